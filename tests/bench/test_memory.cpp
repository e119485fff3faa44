// dl-bench memory (lib/bench/src/dl/bench/memory.cpp) verifies what it copied: a copy that left a
// destination or part of one unwritten is a failure in the report, counted in the row.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <string>

#include "dl/bench/memory.hpp"

using namespace dl::bench;

namespace {

// 64 KiB copies, 1 warm-up and 3 timed: each of the 4 copies goes to its own buffer pair (64 KiB
// sits in any last-level cache, so the benchmark rotates over as many pairs as it copies), one
// thread, so one copy call per copy.
Report measure(MemoryOptions m) {
  CommonOptions c;
  c.repeat = 3;
  c.warmup = 1;
  c.threads = 1;
  c.quiet = true;
  apply_common(c);
  m.bytes = 64 * 1024;
  return run_memory(m, c);
}

}  // namespace

TEST_CASE("dl-bench memory: a correct copy verifies at 64 positions of every destination") {
  Report r = measure({});
  REQUIRE(r.rows.size() == 1);
  const Row& row = r.rows[0];
  CHECK(row["direction"] == "host");
  CHECK(row["bytes"] == 64 * 1024);
  REQUIRE(row["buffer_pairs"] == 4);
  CHECK(row["checked"] == 4 * 64);
  CHECK(row["wrong"] == 0);
  CHECK(r.failures.empty());
}

TEST_CASE("dl-bench memory: a destination left unwritten, or half of each, is reported") {
  SUBCASE("the third copy does nothing") {
    std::atomic<int> calls{0};
    MemoryOptions m;
    m.copy = [&](float* d, const float* s, int64_t n) {
      if (calls++ != 2) std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
    };
    Report r = measure(m);
    CHECK(calls == 4);
    REQUIRE(r.rows.size() == 1);
    // Destinations start with other values: every sample of the skipped one differs, none of
    // the others.
    CHECK(r.rows[0]["checked"] == 4 * 64);
    CHECK(r.rows[0]["wrong"] == 64);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0] == "memory copy: 64 of 256 sampled positions differ from the source");
  }
  SUBCASE("every copy writes only the first half") {
    MemoryOptions m;
    m.copy = [](float* d, const float* s, int64_t n) { std::memcpy(d, s, static_cast<size_t>(n / 2) * sizeof(float)); };
    Report r = measure(m);
    REQUIRE(r.rows.size() == 1);
    const int wrong = r.rows[0]["wrong"].get<int>();
    // About half of the 256 samples: far from both 0 and all of them.
    CHECK(wrong > 64);
    CHECK(wrong < 192);
    REQUIRE(r.failures.size() == 1);
    CHECK(r.failures[0] == "memory copy: " + std::to_string(wrong) + " of 256 sampled positions differ from the source");
  }
}
