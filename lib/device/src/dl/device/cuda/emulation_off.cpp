// The CUDA backend on a GPU (dl_device): nothing is emulated (emulation.hpp).
#include "dl/device/cuda/emulation.hpp"

namespace dl::cuda {

bool device_is_emulated() { return false; }
void describe_faults_with(const DeviceArena*) {}

}  // namespace dl::cuda
