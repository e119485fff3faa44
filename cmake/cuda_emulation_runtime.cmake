# dl_cuda_emu_runtime: the CPU implementation of the CUDA runtime, cuBLASLt and cuBLAS GemmEx calls
# dlkit makes (lib/dl/backend/cuda/emulator, docs/CUDA.md), compiled by the host compiler against
# NVIDIA's headers, linked in place of libcudart/libcublasLt/libcublas in emulated builds.
# dl_cuda_emulator_tests() adds its tests (tests/cuda_emulator, ctest entry `cuda_emulator`).
if(TARGET dl_cuda_emu_runtime)
  return()
endif()
find_path(DL_CUDA_EMU_INCLUDE_DIR cuda_runtime_api.h
  HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES include REQUIRED)
set(dl_emu_dir ${CMAKE_CURRENT_LIST_DIR}/../lib/dl/backend/cuda/emulator)
add_library(dl_cuda_emu_runtime STATIC
  ${dl_emu_dir}/device_memory.cpp
  ${dl_emu_dir}/runtime.cpp
  ${dl_emu_dir}/cublaslt.cpp
  ${dl_emu_dir}/float_formats.cpp)
target_include_directories(dl_cuda_emu_runtime PUBLIC ${CMAKE_CURRENT_LIST_DIR}/../lib)
target_include_directories(dl_cuda_emu_runtime SYSTEM PUBLIC ${DL_CUDA_EMU_INCLUDE_DIR})
target_link_libraries(dl_cuda_emu_runtime PRIVATE dl_warnings)

function(dl_cuda_emulator_tests)
  file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/cuda_emulator/*.cpp)
  add_executable(test_cuda_emulator ${srcs})
  target_link_libraries(test_cuda_emulator PRIVATE dl_cuda_emu_runtime dl_test_main doctest::doctest dl_warnings)
  add_test(NAME cuda_emulator COMMAND test_cuda_emulator)
  set_tests_properties(cuda_emulator PROPERTIES TIMEOUT 300)
endfunction()
