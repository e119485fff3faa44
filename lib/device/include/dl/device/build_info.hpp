// --version's description of a program that links the device library (dl-train, dl-bench):
// build_info() with the linked CUDA backend's runtime, driver and libraries.
#pragma once
#include <string>

namespace dl {

std::string device_build_info();

}  // namespace dl
