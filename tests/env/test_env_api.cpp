// The API dl-train uses: write_env_snapshot and check_env_lock (lib/env/include/dl/env/env.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "dl/core/error.hpp"
#include "dl/env/env.hpp"
#include "dl/env/native.hpp"
#include "hostile_lock.hpp"
#include "support/support.hpp"

using namespace dl;

namespace {

const DriftRow* row_for(const DriftReport& report, const std::string& component) {
  for (const auto& row : report.rows)
    if (row.component == component) return &row;
  return nullptr;
}

}  // namespace

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

TEST_CASE("check_env_lock (dl-train --env-lock) runs no interpreter and loads no library a lock names") {
  test::TempDir dir("api-hostile");
  const test::HostileLock h = test::write_hostile_lock(dir.path());
  const std::string interp = h.interpreter.string();
  EnvCheckResult r = check_env_lock(h.lock, Level::major);
  CHECK_MESSAGE(!std::filesystem::exists(h.marker), test::read_file(h.marker));
  const auto loaded = loaded_library_paths();
  CHECK(std::find(loaded.begin(), loaded.end(), h.library.string()) == loaded.end());
  CHECK(r.hash_ok);
  CHECK(r.drift);
  CHECK_FALSE(r.breaking);
  const DriftRow* py = row_for(r.report, "python.\"" + interp + "\"");
  REQUIRE(py != nullptr);
  CHECK(py->found == "unknown");
  CHECK(py->note.rfind("not run: " + interp + " is named only by the lock", 0) == 0);
  if (h.library_built) {
    // The path is found as a file, its version from the file name: no row. The bare name is not on
    // this process's LD_LIBRARY_PATH: not installed, and still not loaded.
    CHECK(row_for(r.report, "lib.\"" + h.library.string() + "\"") == nullptr);
    REQUIRE(row_for(r.report, "lib.\"libdlkitevil.so.1\"") != nullptr);
    CHECK(row_for(r.report, "lib.\"libdlkitevil.so.1\"")->found == "none");
  }

  // An interpreter named by the caller (--python) runs, and its packages compare.
  EnvCheckOptions named;
  named.pythons = {interp};
  EnvCheckResult n = check_env_lock(h.lock, Level::major, named);
  CHECK(row_for(n.report, "python.\"" + interp + "\"") == nullptr);
  CHECK(row_for(n.report, "python.\"" + interp + "\".packages.numpy") == nullptr);
  CHECK(test::has(test::read_file(h.marker), "ran: " + interp + " -m pip list"));
}
