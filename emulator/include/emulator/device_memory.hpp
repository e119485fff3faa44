// The emulated device's memory (DL_CUDA_EMULATION builds): every cudaMalloc is a block of host
// memory that behaves like a fresh GPU allocation under compute-sanitizer's eyes.
//
// - Poisoned: a block reads 0xFF bytes until written (NaN in f32, bf16 and f16), so a read of
//   memory nothing wrote shows up as NaN in the result. The bytes come from one shared 0xFF
//   file mapped copy-on-write, so a reserved-but-untouched arena of tens of GB costs no RAM.
// - Fenced: the block ends at most 255 bytes before an inaccessible guard page (it starts
//   256-byte aligned, as cudaMalloc's blocks do), and a guard page precedes it, so running off
//   either end faults (SIGSEGV) at the first access. The < 256 bytes of alignment slack after
//   the end are poisoned too but cannot fault: find_allocation tells them apart.
// - Counted: cudaMemGetInfo reports total minus allocated, total = DL_CUDA_EMU_MEMORY (bytes,
//   or with a K/M/G/T suffix, powers of 1024) or 80 GiB; a cudaMalloc beyond it fails with
//   cudaErrorMemoryAllocation.
// - Checked for stray writes: the bytes a block's mapping holds outside its own (the < 256 bytes
//   of slack after the end, the rest of the first data page before the start) stay 0xFF unless a
//   kernel wrote past an end where no guard page could stop it; first_stray_write finds such a
//   byte (the warp emulator asks after every launch).
// - Quarantined when freed: a freed block's addresses stay reserved and inaccessible (the
//   newest kQuarantineBlocks blocks, at most kQuarantineBytes of address space; each is one
//   mapping, and a process has about 65530), so a kernel that uses a recently freed buffer
//   faults and find_allocation names the block it was, instead of landing in a newer one.
// - Registered: cudaFree of a pointer that is not a live block's start is cudaErrorInvalidValue,
//   copies check their kind and their byte range against the registry.
#pragma once
#include <driver_types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dl::cuda_emu {

struct DeviceAllocation {
  const unsigned char* base = nullptr;  // what cudaMalloc returned
  size_t size = 0;                      // bytes asked for
  uint64_t serial = 0;                  // 1 for the process's first cudaMalloc, 2 for the next, ...
  bool freed = false;                   // a quarantined block (found only with `nearby`)
  bool contains(const void* p, size_t bytes = 1) const;
  std::string describe() const;  // "device allocation #3 (4096 bytes at 0x7f...)"
};

// The live allocation whose bytes [base, base + size) hold `p`. With `nearby`, also one whose
// guard pages or alignment slack hold it (an access just past an end): the buffer it overran;
// failing that, a freed block still in quarantine whose pages hold it (freed = true).
std::optional<DeviceAllocation> find_allocation(const void* p, bool nearby = false);
// The first byte outside every live block's own bytes but inside its mapping (slack or lead)
// that is no longer 0xFF: a write past an end that no guard page stopped; nullptr when none.
const void* first_stray_write();
// Whether [p, p + bytes) lies inside one live allocation.
bool is_device_range(const void* p, size_t bytes);

cudaError_t allocate(void** out, size_t bytes);
cudaError_t release(void* p);
size_t memory_total();
size_t memory_allocated();
size_t live_allocations();
size_t quarantined_allocations();
constexpr size_t kQuarantineBytes = size_t{64} << 30;  // address space only: the pages are dropped
constexpr size_t kQuarantineBlocks = 8192;

// Pinned host memory (cudaMallocHost): plain host memory, registered so cudaFreeHost can check it
// and copies can tell it from device memory.
cudaError_t allocate_host(void** out, size_t bytes);
cudaError_t release_host(void* p);

// Parses DL_CUDA_EMU_MEMORY's syntax: "85899345920", "80G", "512M"; nullopt if it is none.
std::optional<size_t> parse_byte_count(const std::string& text);

}  // namespace dl::cuda_emu
