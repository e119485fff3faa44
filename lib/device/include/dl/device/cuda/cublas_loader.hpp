// cuBLAS and cuBLASLt are loaded when the CUDA backend first calls them, not at start-up
// (lib/device/src/dl/device/cuda/cublas_loader.cpp says why). What a test or --version may ask.
#pragma once
#include <string>
#include <vector>

namespace dl::cuda {

// Whether libcublasLt / libcublas is in this process now (loaded by anyone). Loads nothing.
bool cublas_lt_is_loaded();
bool cublas_is_loaded();

// Loads both libraries and looks up every function dlkit calls: one line for each that is
// missing (or for a library that cannot be loaded), empty when all resolve.
std::vector<std::string> cublas_missing_functions();

}  // namespace dl::cuda
