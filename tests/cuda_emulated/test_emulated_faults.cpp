// A kernel's global access past its allocation on the emulated device: the allocation's guard
// page faults and the emulator reports it as compute-sanitizer would (kernel, thread, block, the
// allocation it ran past), then aborts; an access that stays inside runs clean.
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
