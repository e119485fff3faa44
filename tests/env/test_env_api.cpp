// The API dl-train uses: write_env_snapshot and check_env_lock (lib/env/include/dl/env/env.hpp).
#include <doctest/doctest.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/env/env.hpp"
#include "support/support.hpp"

using namespace dl;

TEST_CASE("write_env_snapshot + check_env_lock on this machine") {
  test::TempDir dir("api");
  EnvSnapshotOptions o;
  o.hash_libraries = false;
  o.created_by = "dl-train test";
  write_env_snapshot(dir / "env.lock", o);
  LockRead r = read_lock(dir / "env.lock");
  CHECK(r.hash_ok);
  CHECK(r.lock.kind == "snapshot");
  CHECK(r.lock.header.created_by == "dl-train test");
  REQUIRE(r.lock.find("cuda.runtime") != nullptr);
  REQUIRE(r.lock.find("driver") != nullptr);
  CHECK(r.lock.find("loaded.\"/usr/lib/x86_64-linux-gnu/libc.so.6\"") == nullptr);  // no hashes asked

  EnvCheckResult same = check_env_lock(dir / "env.lock", Level::major);
  CHECK_FALSE(same.drift);
  CHECK_FALSE(same.breaking);
  CHECK(same.hash_ok);
  CHECK(same.table.find("no drift") != std::string::npos);

  // A lock pinning another CUDA major: breaking, with the table for dl-train to print.
  std::string text = test::read_file(dir / "env.lock");
  std::string cuda = r.lock.find("cuda.runtime")->version;
  std::string from = "[cuda.runtime]\nversion = \"" + cuda + "\"";
  size_t at = text.find(from);
  if (cuda == "none") {
    // No CUDA runtime here: pin one that is missing instead.
    from = "[cuda.runtime]\nversion = \"none\"";
    at = text.find(from);
  }
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), "[cuda.runtime]\nversion = \"11.8\"");
  test::write_file(dir / "edited.lock", text);
  EnvCheckResult bad = check_env_lock(dir / "edited.lock", Level::major);
  CHECK(bad.drift);
  CHECK(bad.breaking);
  CHECK_FALSE(bad.hash_ok);
  REQUIRE(bad.report.rows.size() == 1);
  CHECK(bad.report.rows[0].component == "cuda.runtime");
  CHECK(bad.report.rows[0].locked == "11.8");
  CHECK(bad.table.find("cuda.runtime") != std::string::npos);
  CHECK(bad.table.find("breaking") != std::string::npos);
  EnvCheckOptions strict;
  strict.strict_hash = true;
  CHECK_THROWS_AS(check_env_lock(dir / "edited.lock", Level::major, strict), Error);
  try {
    check_env_lock(dir / "missing.lock", Level::major);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}
