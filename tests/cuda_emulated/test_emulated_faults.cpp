// A kernel's global access past its allocation on the emulated device: the allocation's guard
// page faults and the emulator reports it as compute-sanitizer would (kernel, thread, block, the
// allocation it ran past), then aborts; a write into the alignment slack before the guard page is
// found after the launch; the backend's fenced arena gives every tensor such ends, so a kernel
// running past one tensor is reported with the tensor's name; an access that stays inside runs clean.
#include <doctest/doctest.h>

#include <string>

#include "support/support.hpp"

using namespace dl::test;

TEST_CASE("the emulated device reports a kernel's read past its allocation, and runs one that stays inside") {
  const std::string worker = tool("kernel_fault_worker");
  // 64 floats: 256 bytes, so each buffer ends where its guard page starts.
  const RunResult inside = run(worker, {"add", "64", "64"});
  INFO(inside.err);
  REQUIRE(inside.exit_code == 0);
  const auto sums = lines(inside.out);
  REQUIRE(sums.size() == 64);
  CHECK(sums[0] == "0.5");
  CHECK(sums[63] == "63.5");

  const RunResult past = run(worker, {"add", "65", "64"});
  INFO(past.err);
  CHECK(past.exit_code != 0);
  CHECK(past.err.find("========= Invalid __global__ access (emulated device)") != std::string::npos);
  CHECK(past.err.find("by thread (64,0,0) in block (0,0,0) of kernel add_kernel") != std::string::npos);
  CHECK(past.err.find("0 bytes after the end of device allocation #") != std::string::npos);
}

TEST_CASE("a kernel's write into an allocation's alignment slack is reported after the launch") {
  // 62 floats: 248 bytes, so the 8 bytes after the end lie before the guard page and cannot fault.
  // The inputs are longer, so the stray sum is a number (a NaN of poisoned inputs would leave the
  // 0xFF bytes as they were).
  const RunResult past = run(tool("kernel_fault_worker"), {"add", "63", "64", "62"});
  INFO(past.err);
  CHECK(past.exit_code != 0);
  CHECK(past.err.find("========= Invalid __global__ write (emulated device)") != std::string::npos);
  CHECK(past.err.find("by a thread of kernel add_kernel") != std::string::npos);
  CHECK(past.err.find("0 bytes after the end of device allocation #") != std::string::npos);
}

TEST_CASE("the fenced arena: a kernel running past one tensor faults naming the tensor; packed, it does not") {
  const std::string worker = tool("kernel_fault_worker");
  const RunResult inside = run(worker, {"tensors", "64", "64"});
  INFO(inside.err);
  REQUIRE(inside.exit_code == 0);
  CHECK(lines(inside.out).size() == 64);
  CHECK(inside.err.find("fenced: a cudaMalloc per tensor") != std::string::npos);

  const RunResult past = run(worker, {"tensors", "65", "64"});
  INFO(past.err);
  CHECK(past.exit_code != 0);
  CHECK(past.err.find("by thread (64,0,0) in block (0,0,0) of kernel add_kernel") != std::string::npos);
  CHECK(past.err.find("0 bytes after the end of tensor f32[64] (256 bytes)") != std::string::npos);

  const RunResult slack = run(worker, {"tensors", "63", "64", "62"});
  INFO(slack.err);
  CHECK(slack.exit_code != 0);
  CHECK(slack.err.find("0 bytes after the end of tensor f32[62] (248 bytes)") != std::string::npos);

  // Packed (one cudaMalloc for the arena, as on a GPU by default): the same overrun lands in the
  // neighbouring block unseen, which is why the emulated device fences.
  const RunResult packed = run(worker, {"tensors", "65", "64"}, "", {"DL_CUDA_ARENA_FENCED=0"});
  INFO(packed.err);
  CHECK(packed.exit_code == 0);
  CHECK(packed.err.find("Invalid __global__") == std::string::npos);
}
