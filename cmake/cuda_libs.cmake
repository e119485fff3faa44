# cuDNN and NCCL for the CUDA backend. Both are optional: a part whose library or header is not
# found is left out of the build, and configure says so.
#
# Where they are looked for, in order:
#   1. CUDNN_ROOT / NCCL_ROOT, as CMake variables (-DCUDNN_ROOT=...) or environment variables;
#   2. the CUDA toolkit (its lib, lib64 and include folders; Debian-style /usr/local/cuda/lib too);
#   3. the nvidia-* Python packages PyTorch installs (nvidia/cudnn, nvidia/nccl), as reported by
#      scripts/find-cuda-libs.sh, which asks python3 where they are.
# Those packages ship only versioned libraries (libcudnn.so.9, libnccl.so.2), so both names are
# tried.

set(_dl_toolkit_roots ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
get_filename_component(_dl_toolkit_from_lib "${CUDAToolkit_LIBRARY_DIR}" DIRECTORY)
list(APPEND _dl_toolkit_roots ${_dl_toolkit_from_lib} /usr/local/cuda)

# The pip packages' folders, found once per configure (cheap: one python start).
set(_dl_pip_cudnn "")
set(_dl_pip_nccl "")
execute_process(COMMAND ${CMAKE_CURRENT_LIST_DIR}/../scripts/find-cuda-libs.sh --cmake
                OUTPUT_VARIABLE _dl_pip_out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _dl_pip_rc)
if(_dl_pip_rc EQUAL 0 AND _dl_pip_out)
  string(REPLACE "\n" ";" _dl_pip_lines "${_dl_pip_out}")
  foreach(_line ${_dl_pip_lines})
    if(_line MATCHES "^-DCUDNN_ROOT=(.*)$")
      set(_dl_pip_cudnn "${CMAKE_MATCH_1}")
    elseif(_line MATCHES "^-DNCCL_ROOT=(.*)$")
      set(_dl_pip_nccl "${CMAKE_MATCH_1}")
    endif()
  endforeach()
endif()

function(_dl_find_cuda_part part header libnames)
  string(TOUPPER ${part} P)
  set(_hints ${${P}_ROOT} $ENV{${P}_ROOT} ${_dl_toolkit_roots} ${_dl_pip_${part}})
  find_path(DL_${P}_INCLUDE_DIR ${header} HINTS ${_hints} PATH_SUFFIXES include NO_CACHE)
  # The library beside the header first: on the first GPU machine the headers came from PyTorch's
  # nvidia-cudnn package (9.19) while a plain search took the system's libcudnn.so (9.14), a pair
  # that was never built together. NAMES_PER_DIR keeps "libcudnn.so.9" in that folder ahead of an
  # unversioned "libcudnn.so" elsewhere.
  if(DL_${P}_INCLUDE_DIR)
    get_filename_component(_beside "${DL_${P}_INCLUDE_DIR}" DIRECTORY)
    find_library(DL_${P}_LIBRARY NAMES ${libnames} NAMES_PER_DIR HINTS ${_beside}
                 PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu NO_DEFAULT_PATH NO_CACHE)
  endif()
  if(NOT DL_${P}_LIBRARY)
    find_library(DL_${P}_LIBRARY NAMES ${libnames} HINTS ${_hints}
                 PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu NO_CACHE)
  endif()
  if(DL_${P}_INCLUDE_DIR AND DL_${P}_LIBRARY)
    set(DL_HAVE_${P} ON PARENT_SCOPE)
    set(DL_${P}_INCLUDE_DIR ${DL_${P}_INCLUDE_DIR} PARENT_SCOPE)
    set(DL_${P}_LIBRARY ${DL_${P}_LIBRARY} PARENT_SCOPE)
    message(STATUS "dlkit: ${part}: ${DL_${P}_LIBRARY} (headers ${DL_${P}_INCLUDE_DIR})")
  else()
    set(DL_HAVE_${P} OFF PARENT_SCOPE)
    message(STATUS "dlkit: ${part} not found (set ${P}_ROOT, or see scripts/find-cuda-libs.sh): "
                   "the CUDA backend is built without it")
  endif()
endfunction()

_dl_find_cuda_part(cudnn cudnn_version.h "cudnn;libcudnn.so.9;libcudnn.so.8")
_dl_find_cuda_part(nccl nccl.h "nccl;libnccl.so.2")
