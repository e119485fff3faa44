#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/env/compare.hpp"

using namespace dl;

namespace {

Lock base() {
  Lock l;
  l.add({"system", "cpu"}, "AMD EPYC");
  l.add({"system", "cpu-flags"}, "avx avx2 sse");
  l.add({"system", "kernel"}, "6.1.0-18-amd64");
  l.add({"cuda", "runtime"}, "13.0");
  l.add({"cuda", "cudnn"}, "9.19.0");
  l.add({"driver"}, "580.95.05");
  l.add({"deb", "libopenblas-dev"}, "0.3.21+ds-4");
  l.add({"python", "py", "packages", "numpy"}, "1.24.2");
  l.add({"loaded", "/lib/libc.so.6"}, "sha256:aa");
  return l;
}

const DriftRow* row(const DriftReport& r, const std::string& key) {
  for (const auto& x : r.rows)
    if (x.component == key) return &x;
  return nullptr;
}

}  // namespace

TEST_CASE("compare: identical locks have no drift at any level") {
  for (Level l : {Level::major, Level::minor, Level::patch, Level::exact}) {
    DriftReport r = compare_locks(base(), base(), {l, {}, true, true});
    CHECK_FALSE(r.drift());
    CHECK(r.compared == 9);
  }
}

TEST_CASE("compare: magnitudes, levels, severity") {
  Lock found = base();
  found.find("cuda.cudnn")->version = "9.20.0";                            // minor
  found.find("deb.libopenblas-dev")->version = "0.3.21+ds-5";              // patch (Debian revision)
  found.find("system.kernel")->version = "6.1.0-20-amd64";                 // build
  found.find("loaded.\"/lib/libc.so.6\"")->version = "sha256:bb";          // build
  found.find("python.py.packages.numpy")->version = "1.24.1";              // patch, downgrade

  DriftReport major = compare_locks(base(), found, {Level::major, {}, true, true});
  CHECK(major.rows.empty());
  CHECK(major.below_level == 5);
  DriftReport minor = compare_locks(base(), found, {Level::minor, {}, true, true});
  CHECK(minor.rows.size() == 1);
  DriftReport patch = compare_locks(base(), found, {Level::patch, {}, true, true});
  CHECK(patch.rows.size() == 3);
  DriftReport exact = compare_locks(base(), found, {Level::exact, {}, true, true});
  REQUIRE(exact.rows.size() == 5);
  CHECK_FALSE(exact.breaking());

  const DriftRow* d = row(exact, "cuda.cudnn");
  REQUIRE(d);
  CHECK(d->locked == "9.19.0");
  CHECK(d->found == "9.20.0");
  CHECK(d->severity == "minor");
  CHECK(d->note == "upgrade");
  CHECK(row(exact, "python.py.packages.numpy")->note == "downgrade");
  CHECK(row(exact, "python.py.packages.numpy")->severity == "patch");
  CHECK(row(exact, "deb.libopenblas-dev")->severity == "patch");
  CHECK(row(exact, "system.kernel")->severity == "build");
  CHECK(row(exact, "loaded.\"/lib/libc.so.6\"")->note == "file changed");

  // --ignore by exact key, by table, by glob, by plain key.
  DriftReport ign = compare_locks(base(), found, {Level::exact, {"system", "loaded", "deb.lib*", "python.py.packages.numpy"}, true, true});
  CHECK(ign.rows.size() == 1);
  CHECK(ign.ignored == 6);
  CHECK(ign.rows[0].component == "cuda.cudnn");
  // Not comparing [loaded] at all.
  DriftReport noload = compare_locks(base(), found, {Level::exact, {}, true, false});
  CHECK(noload.rows.size() == 4);
  CHECK(noload.compared == 8);
}

TEST_CASE("compare: CUDA or driver major changes are breaking") {
  Lock found = base();
  found.find("cuda.runtime")->version = "12.4";
  DriftReport r = compare_locks(base(), found, {Level::major, {}, true, true});
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0].component == "cuda.runtime");
  CHECK(r.rows[0].severity == "breaking");
  CHECK(r.breaking());

  found = base();
  found.find("driver")->version = "575.51.03";
  r = compare_locks(base(), found, {Level::major, {}, true, true});
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0].breaking);
  CHECK(r.rows[0].note == "downgrade; below the minimum 580 for CUDA 13.0");

  found = base();
  found.find("driver")->version = "none";
  r = compare_locks(base(), found, {Level::major, {}, true, true});
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0].severity == "breaking");
  CHECK(r.rows[0].note == "not installed");

  // A driver minor update is not breaking; a non-CUDA major change is major but not breaking.
  found = base();
  found.find("driver")->version = "580.105.08";
  found.find("python.py.packages.numpy")->version = "2.0.0";
  r = compare_locks(base(), found, {Level::patch, {}, true, true});
  CHECK(r.rows.size() == 2);
  CHECK_FALSE(r.breaking());
  CHECK(row(r, "driver")->severity == "minor");
  CHECK(row(r, "python.py.packages.numpy")->severity == "major");
}

TEST_CASE("compare: missing, new, failed probes, facts") {
  Lock found = base();
  found.components.erase(found.components.begin() + 7);  // numpy uninstalled
  found.add({"python", "py", "packages", "torch"}, "2.1.0");
  found.find("driver")->version = "unknown";
  found.set_probe("driver", "failed: nvidia-smi timed out after 1 s (killed)");
  found.find("system.cpu-flags")->version = "avx sse sse4_2";
  found.find("system.cpu")->version = "Intel Xeon";
  DriftReport r = compare_locks(base(), found, {Level::patch, {}, true, true});
  CHECK(row(r, "python.py.packages.numpy")->found == "(absent)");
  CHECK(row(r, "python.py.packages.numpy")->note == "missing");
  CHECK(row(r, "python.py.packages.numpy")->severity == "major");
  CHECK(row(r, "python.py.packages.torch")->locked == "(absent)");
  CHECK(row(r, "python.py.packages.torch")->note == "new (not in the lock)");
  CHECK(row(r, "driver")->severity == "unknown");
  CHECK(row(r, "driver")->note == "probe failed: nvidia-smi timed out after 1 s (killed)");
  CHECK(row(r, "system.cpu-flags")->severity == "minor");
  CHECK(row(r, "system.cpu-flags")->note == "missing: avx2; new: sse4_2");
  CHECK(row(r, "system.cpu")->severity == "major");
  // A resolved lock lists only what it constrains: nothing is "new".
  DriftReport noadd = compare_locks(base(), found, {Level::patch, {}, false, true});
  CHECK(row(noadd, "python.py.packages.torch") == nullptr);
  // A failed probe counts even at --level major.
  DriftReport maj = compare_locks(base(), found, {Level::major, {}, true, true});
  CHECK(row(maj, "driver") != nullptr);
}

TEST_CASE("compare: renderings and options") {
  Lock found = base();
  found.find("cuda.cudnn")->version = "9.20.0";
  DriftReport r = compare_locks(base(), found, {Level::patch, {}, true, true});
  std::string table = render_drift(r, EnvFormat::table);
  CHECK(table.find("component   locked  found   severity  note") == 0);
  CHECK(table.find("cuda.cudnn  9.19.0  9.20.0  minor     upgrade") != std::string::npos);
  CHECK(table.find("# 9 components compared at level patch: 1 differ") != std::string::npos);
  auto j = nlohmann::json::parse(render_drift(r, EnvFormat::json));
  CHECK(j["drift"] == true);
  CHECK(j["breaking"] == false);
  CHECK(j["rows"].size() == 1);
  CHECK(j["rows"][0]["component"] == "cuda.cudnn");
  std::string toml = render_drift(r, EnvFormat::toml);
  CHECK(toml.find("[[drift]]\ncomponent = \"cuda.cudnn\"\nlocked = \"9.19.0\"\nfound = \"9.20.0\"\nseverity = \"minor\"") !=
        std::string::npos);
  CHECK(parse_level("exact") == Level::exact);
  CHECK_THROWS_AS(parse_level("huge"), Error);
  CHECK_THROWS_AS(parse_env_format("xml"), Error);
  try {
    parse_level("huge");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()) == "unknown --level 'huge' (use major, minor, patch or exact)");
  }
  CHECK(probe_for({"cuda", "cudnn"}) == "cudnn");
  CHECK(probe_for({"gpu", "0", "name"}) == "driver");
  CHECK(probe_for({"python", "/usr/bin/python3", "packages", "numpy"}) == "python:/usr/bin/python3");
}
