// The CUDA backend's device arena (lib/device/src/dl/device/cuda/arena.cpp) on the emulated device: packed
// (one cudaMalloc, tensors carved from it) and fenced (a cudaMalloc of exactly each tensor's
// bytes) keep the same books: the same first-fit offsets, the same peak, the same out-of-memory
// error; only where the bytes live differs.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "dl/device/cuda/arena.hpp"
#include "emulator/device_memory.hpp"
#include "dl/core/error.hpp"

using dl::cuda::DeviceArena;

namespace {

// Allocates and releases the same sequence on an arena; returns (in_use, peak) after each step
// and the error a request too large gives.
struct Trace {
  std::vector<std::pair<size_t, size_t>> stats;
  std::string oom;
};

Trace exercise(DeviceArena& arena) {
  Trace t;
  auto note = [&] { t.stats.emplace_back(arena.stats().in_use, arena.stats().peak); };
  void* a = arena.allocate(1000, "a");
  void* b = arena.allocate(256, "b");
  void* c = arena.allocate(5000, "c");
  note();
  arena.release(b);
  note();
  void* d = arena.allocate(100, "d");  // first fit: b's hole
  note();
  arena.release(a);
  arena.release(c);
  note();
  try {
    (void)arena.allocate(1 << 20, "a tensor too large");
  } catch (const dl::Error& e) {
    t.oom = e.what();
  }
  arena.release(d);
  note();
  return t;
}

}  // namespace

TEST_CASE("the fenced arena keeps the packed arena's books: in use, peak and the out-of-memory error") {
  DeviceArena packed(0, 64 << 10), fenced(0, 64 << 10, DeviceArena::Backing::fenced);
  const Trace p = exercise(packed), f = exercise(fenced);
  CHECK(p.stats == f.stats);
  CHECK(p.stats[0] == std::pair<size_t, size_t>{1024 + 256 + 5120, 1024 + 256 + 5120});
  CHECK(p.stats.back().first == 0);
  CHECK(!p.oom.empty());
  CHECK(p.oom == f.oom);
  CHECK(p.oom.find("cannot hold a tensor too large") != std::string::npos);
  CHECK(fenced.stats().fenced);
  CHECK_FALSE(packed.stats().fenced);
}

TEST_CASE("fenced: each block is a device allocation of exactly its bytes, freed on release") {
  DeviceArena arena(0, 1 << 20, DeviceArena::Backing::fenced);
  const size_t live = dl::cuda_emu::live_allocations();
  void* a = arena.allocate(1000, "tensor a f32[250]");
  void* b = arena.allocate(64, "tensor b f32[16]");
  CHECK(dl::cuda_emu::live_allocations() == live + 2);
  auto found = dl::cuda_emu::find_allocation(a);
  REQUIRE(found);
  CHECK(found->base == a);
  CHECK(found->size == 1000);
  CHECK(dl::cuda_emu::find_allocation(b)->size == 64);
  const auto* pa = static_cast<const char*>(a);
  CHECK(arena.describe(pa + 8) == "inside tensor a f32[250] at byte 8 (1000 bytes)");
  CHECK(arena.describe(pa + 1004) == "4 bytes after the end of tensor a f32[250] (1000 bytes)");
  arena.release(a);
  CHECK(dl::cuda_emu::live_allocations() == live + 1);
  CHECK(dl::cuda_emu::find_allocation(a, true)->freed);
  arena.release(b);
  CHECK(dl::cuda_emu::live_allocations() == live);
}

TEST_CASE("packed: blocks lie inside the arena's one allocation and are named by the arena") {
  const size_t live = dl::cuda_emu::live_allocations();
  DeviceArena arena(0, 1 << 20);
  CHECK(dl::cuda_emu::live_allocations() == live + 1);
  void* a = arena.allocate(1000, "tensor a");
  void* b = arena.allocate(64, "tensor b");
  CHECK(static_cast<char*>(b) - static_cast<char*>(a) == 1024);  // a takes 1000 rounded to 256
  CHECK(dl::cuda_emu::find_allocation(a)->size == size_t{1} << 20);
  CHECK(arena.describe(static_cast<char*>(a) + 1000) == "0 bytes after the end of tensor a (1000 bytes)");
  CHECK(arena.describe(static_cast<char*>(a) + 1024) == "inside tensor b at byte 0 (64 bytes)");
  arena.release(a);
  arena.release(b);
  CHECK(arena.stats().in_use == 0);
}
