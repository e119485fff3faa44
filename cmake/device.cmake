# The device library (lib/device: device selection and the CUDA backend, with kernels/), included
# by lib/CMakeLists.txt at its line of lib/libraries.txt. It comes in flavours that share every
# other library:
#   dl_device_api       what other libraries link (train, bench): the public headers and, when
#                       the CUDA backend is built, DL_HAVE_CUDA and CUDA's headers; no code of
#                       its own, but it brings the implementation its program chose.
#   dl_device           the implementation programs link: device selection, and with nvcc the
#                       CUDA backend, kernels/*.cu compiled by nvcc, libcudart, cuBLASLt, cuDNN, NCCL.
#   dl_device_emulated  the same host code with kernels/*.cu compiled as C++ for the warp emulator
#                       and the CUDA runtime and cuBLASLt served on the CPU (emulator/), no NCCL:
#                       the emulated device of docs/CUDA.md. Not built by default: `make
#                       test-emulated` builds it and the programs linked to it (target `emulated`).
# Only the flavour's own files differ: device/cuda/emulation_off.cpp or emulation_on.cpp (the
# hooks the emulator offers), and kernels/device.cuh with DL_CUDA_EMULATION for the kernels alone.
set(dl_device_dir ${CMAKE_CURRENT_SOURCE_DIR}/device)

add_library(dl_device_headers INTERFACE)
target_include_directories(dl_device_headers INTERFACE ${dl_device_dir}/include)
target_link_libraries(dl_device_headers INTERFACE dl_backend dl_dist)
if(DL_HAVE_CUDA)
  target_compile_definitions(dl_device_headers INTERFACE DL_HAVE_CUDA=1)
  target_include_directories(dl_device_headers SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS})
endif()
# The headers, and the implementation the linking program names in its DL_DEVICE property
# (dl_link_device): it lands on the link line after the libraries that use it, where a static
# library must come.
add_library(dl_device_api INTERFACE)
target_link_libraries(dl_device_api INTERFACE dl_device_headers $<TARGET_PROPERTY:DL_DEVICE>)

# dl_link_device(TARGET IMPLEMENTATION): the program TARGET runs on dl_device or dl_device_emulated.
function(dl_link_device target impl)
  set_property(TARGET ${target} PROPERTY DL_DEVICE ${impl})
  target_link_libraries(${target} PRIVATE ${impl})
endfunction()

dl_library_sources(dl_device_srcs device)
list(FILTER dl_device_srcs EXCLUDE REGEX "/(emulation_(on|off)|cublas_forward)\\.cpp$")

# dl_device_flavour(TARGET ARCHS COMPILER EXTRA_SOURCES...): what both flavours share.
function(dl_device_flavour target archs compiler)
  target_sources(${target} PRIVATE ${dl_device_srcs} ${ARGN})
  dl_library_settings(${target})
  target_include_directories(${target} PRIVATE ${dl_device_dir}/src ${PROJECT_SOURCE_DIR}/kernels)
  target_link_libraries(${target} PUBLIC dl_device_headers ${CMAKE_DL_LIBS})  # dlopen: cublas_loader.cpp
  if(DL_HAVE_CUDA)
    target_compile_definitions(${target} PRIVATE DL_CUDA_ARCHS="${archs}" DL_CUDA_COMPILER_VERSION="${compiler}")
  endif()
endfunction()

add_library(dl_device STATIC)
if(NOT DL_HAVE_CUDA)
  dl_device_flavour(dl_device "" "")
  return()
endif()

file(GLOB dl_kernel_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
dl_device_flavour(dl_device "${CMAKE_CUDA_ARCHITECTURES}" "${CMAKE_CUDA_COMPILER_VERSION}"
                  ${dl_kernel_sources} ${dl_device_dir}/src/dl/device/cuda/emulation_off.cpp
                  ${dl_device_dir}/src/dl/device/cuda/cublas_forward.cpp)
# nvcc's own warnings, and the host compiler's on the host half of each .cu file.
target_compile_options(dl_device PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter --expt-relaxed-constexpr
  $<$<BOOL:${DL_WERROR}>:-Werror=all-warnings -Xcompiler=-Werror>>)
# Not cuBLAS and cuBLASLt: the backend loads them at its first call (cuda/cublas_loader.cpp; linked,
# cuBLASLt's initializers cost every start of dl-train 0.1 s of system time and 210 MB). Where
# CMake found them is the loader's last place to look.
target_link_libraries(dl_device PUBLIC CUDA::cudart)
get_filename_component(dl_cublas_dir "${CUDA_cublasLt_LIBRARY}" DIRECTORY)
set_property(SOURCE ${dl_device_dir}/src/dl/device/cuda/cublas_loader.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             DL_CUBLAS_DIR="${dl_cublas_dir}")
if(DL_HAVE_CUDNN)
  target_compile_definitions(dl_device PRIVATE DL_HAVE_CUDNN=1)
  target_include_directories(dl_device PRIVATE ${DL_CUDNN_INCLUDE_DIR})
  target_link_libraries(dl_device PUBLIC ${DL_CUDNN_LIBRARY})
endif()
if(DL_HAVE_NCCL)
  target_compile_definitions(dl_device PRIVATE DL_HAVE_NCCL=1)
  target_include_directories(dl_device PRIVATE ${DL_NCCL_INCLUDE_DIR})
  target_link_libraries(dl_device PUBLIC ${DL_NCCL_LIBRARY})
endif()

if(NOT DL_CUDA_EMULATION)
  return()
endif()
# The kernels once more, as C++: a one-line .cpp per .cu, so that the .cu files keep their CUDA
# language for dl_device, and DL_CUDA_EMULATION reaches the kernels (kernels/device.cuh) alone.
set(dl_emulated_kernels)
foreach(cu ${dl_kernel_sources})
  get_filename_component(stem ${cu} NAME_WE)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/emulated_kernels/${stem}.cpp)
  # A relative include, so that every clone compiles the same bytes (ccache, cmake/unity.cmake).
  file(RELATIVE_PATH cu_relative ${CMAKE_CURRENT_BINARY_DIR}/emulated_kernels ${cu})
  file(CONFIGURE OUTPUT ${wrapper} CONTENT "// kernels/${stem}.cu for the emulated device (cmake/device.cmake)\n#include \"${cu_relative}\"\n")
  list(APPEND dl_emulated_kernels ${wrapper})
endforeach()
set_source_files_properties(${dl_emulated_kernels} PROPERTIES COMPILE_DEFINITIONS DL_CUDA_EMULATION=1
                            COMPILE_OPTIONS "-Wno-unknown-pragmas")  # #pragma unroll is nvcc's
add_library(dl_device_emulated STATIC EXCLUDE_FROM_ALL)
dl_device_flavour(dl_device_emulated "emulated" "none (emulated device)"
                  ${dl_emulated_kernels} ${dl_device_dir}/src/dl/device/cuda/emulation_on.cpp)
target_link_libraries(dl_device_emulated PUBLIC dl_cuda_emu_runtime dl_warp_emulator)
