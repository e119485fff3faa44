// The seam between the CUDA backend and the device it runs on: a GPU (emulation_off.cpp, linked
// into dl_device) or the emulated device (emulation_on.cpp, linked into dl_device_emulated; the
// emulator in emulator/, docs/CUDA.md). The backend's code is the same in both and never asks
// which at compile time.
#pragma once

namespace dl::cuda {

class DeviceArena;

// True on the emulated device.
bool device_is_emulated();
// The open backend's arena, so that the emulator's report of a kernel's bad memory access names
// the tensor it ran past; nullptr when the backend closes. Nothing on a GPU (compute-sanitizer
// reports addresses there).
void describe_faults_with(const DeviceArena* arena);

}  // namespace dl::cuda
