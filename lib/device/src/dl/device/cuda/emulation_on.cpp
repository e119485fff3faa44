// The CUDA backend on the emulated device (dl_device_emulated, emulation.hpp): the emulator's
// fault reports name the device allocation and the arena's tensor an address belongs to, and its
// check for writes into a block's alignment slack runs after every launch.
#include <string>

#include "dl/device/cuda/arena.hpp"
#include "dl/device/cuda/emulation.hpp"
#include "emulator/device_memory.hpp"
#include "emulator/warp_emulator.hpp"

namespace dl::cuda {
namespace {

const DeviceArena* g_described_arena = nullptr;  // the open backend's

// The device allocation the address ran past (its guard pages are what faulted) and the tensor
// of the arena it belongs to.
std::string describe_device_address(const void* address) {
  std::string where;
  if (const auto found = cuda_emu::find_allocation(address, true)) {
    const auto* at = static_cast<const unsigned char*>(address);
    if (at < found->base)
      where = std::to_string(found->base - at) + " bytes before " + found->describe();
    else if (found->freed || found->contains(address))
      where = "inside " + found->describe();
    else
      where = std::to_string(at - (found->base + found->size)) + " bytes after the end of " + found->describe();
  }
  const std::string tensor = g_described_arena ? g_described_arena->describe(address) : std::string();
  if (!tensor.empty()) where += (where.empty() ? "" : ": ") + tensor;
  return where;
}

}  // namespace

bool device_is_emulated() { return true; }

void describe_faults_with(const DeviceArena* arena) {
  g_described_arena = arena;
  if (arena) {
    emu::set_address_describer(describe_device_address);
    emu::set_stray_write_finder(cuda_emu::first_stray_write);
  }
}

}  // namespace dl::cuda
