// End-to-end: the dl-envlock binary on this machine (no GPU in CI; fake nvidia-smi scripts stand
// in for a hung driver and for a GPU machine).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "dl/env/lock.hpp"
#include "dl/env/process.hpp"
#include "hostile_lock.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using dl::test::has;

using namespace dl;
namespace fs = std::filesystem;

namespace {

const std::string kTool = test::tool("dl-envlock");

test::RunResult envlock(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return test::run(kTool, args, "", env, 120);
}

void write_script(const fs::path& p, const std::string& body) {
  test::write_file(p, body);
  ::chmod(p.c_str(), 0755);
}

std::string path_with(const fs::path& dir) {
  const char* p = std::getenv("PATH");
  return "PATH=" + dir.string() + ":" + (p ? p : "/usr/bin:/bin");
}

// "#define NAME 123" from a header; -1 when absent.
long header_define(const fs::path& header, const std::string& name) {
  std::string text = test::read_file(header);
  std::smatch m;
  std::regex re("#define\\s+" + name + "\\s+([0-9]+)");
  return std::regex_search(text, m, re) ? std::stol(m[1].str()) : -1;
}

std::string without_date(const std::string& text) {
  std::string out;
  for (const auto& line : test::lines(text))
    if (line.rfind("date = ", 0) != 0) out += line + "\n";
  return out;
}


// Replaces the version line of table [table] in a lock's text.
std::string set_table_version(std::string text, const std::string& table, const std::string& version) {
  std::string head = "[" + table + "]\nversion = \"";
  size_t a = text.find(head);
  REQUIRE(a != std::string::npos);
  size_t b = text.find('"', a + head.size());
  text.replace(a + head.size(), b - (a + head.size()), version);
  return text;
}

// A comparison this machine cannot make is said, not silently left out (ctest -V shows it).
void skipped(const std::string& what, const std::string& why) { MESSAGE("not checked here: ", what, ": ", why); }

bool driver_absent_here() {
  return find_program("nvidia-smi").empty() && !fs::exists("/proc/driver/nvidia/version") && !fs::exists("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
}

}  // namespace

TEST_CASE("snapshot twice gives identical files apart from the date; the lock holds what the libraries report; check exits 0") {
  test::TempDir dir("snap");
  std::vector<std::string> extra = {"--deb", "libopenblas-dev"};
  if (fs::exists("/usr/bin/python3")) extra.insert(extra.end(), {"--python", "/usr/bin/python3"});
  auto args = [&](const std::string& out) {
    std::vector<std::string> a{"snapshot", "-o", (dir / out).string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto r1 = envlock(args("a.lock"));
  REQUIRE_MESSAGE(r1.exit_code == 0, r1.err);
  CHECK(r1.out.empty());  // with -o, stdout stays empty
  CHECK(has(r1.err, "wrote "));
  auto r2 = envlock(args("b.lock"));
  REQUIRE(r2.exit_code == 0);
  std::string a = test::read_file(dir / "a.lock"), b = test::read_file(dir / "b.lock");
  CHECK(without_date(a) == without_date(b));
  CHECK(test::lines(a).size() == test::lines(b).size());

  LockRead lr = read_lock(dir / "a.lock");
  CHECK(lr.hash_ok);
  const Lock& l = lr.lock;
  CHECK(l.header.created_by.rfind("dl-envlock ", 0) == 0);
  CHECK(l.header.host == host_name());
  CHECK(std::regex_match(l.header.date, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));

  // CUDA stack: compare with the toolkit's own headers, read independently.
  fs::path inc = "/usr/local/cuda/include";
  if (fs::exists(inc / "cuda_runtime_api.h")) {
    long cudart = header_define(inc / "cuda_runtime_api.h", "CUDART_VERSION");
    CHECK(l.find("cuda.runtime")->version == std::to_string(cudart / 1000) + "." + std::to_string(cudart % 1000 / 10));
    CHECK(l.find("cuda.runtime")->field_text("code") == std::to_string(cudart));
    CHECK(l.probe("cudart") == "ok");
  } else {
    skipped("cuda.runtime against CUDART_VERSION", "no " + (inc / "cuda_runtime_api.h").string());
  }
  if (fs::exists(inc / "cudnn_version.h")) {
    long ma = header_define(inc / "cudnn_version.h", "CUDNN_MAJOR"), mi = header_define(inc / "cudnn_version.h", "CUDNN_MINOR"),
         pa = header_define(inc / "cudnn_version.h", "CUDNN_PATCHLEVEL");
    CHECK(l.find("cuda.cudnn")->version == std::to_string(ma) + "." + std::to_string(mi) + "." + std::to_string(pa));
    long code = ma >= 9 ? ma * 10000 + mi * 100 + pa : ma * 1000 + mi * 100 + pa;
    CHECK(l.find("cuda.cudnn")->field_text("code") == std::to_string(code));
  } else {
    skipped("cuda.cudnn against CUDNN_MAJOR/MINOR/PATCHLEVEL", "no " + (inc / "cudnn_version.h").string());
  }
  if (fs::exists(inc / "nccl.h")) {
    long ma = header_define(inc / "nccl.h", "NCCL_MAJOR"), mi = header_define(inc / "nccl.h", "NCCL_MINOR"),
         pa = header_define(inc / "nccl.h", "NCCL_PATCH");
    CHECK(l.find("cuda.nccl")->version == std::to_string(ma) + "." + std::to_string(mi) + "." + std::to_string(pa));
    CHECK(l.find("cuda.nccl")->field_text("code") == std::to_string(header_define(inc / "nccl.h", "NCCL_VERSION_CODE")));
  } else {
    skipped("cuda.nccl against NCCL_MAJOR/MINOR/PATCH", "no " + (inc / "nccl.h").string());
  }
  if (fs::exists(inc / "cublas_api.h")) {
    long ma = header_define(inc / "cublas_api.h", "CUBLAS_VER_MAJOR"), mi = header_define(inc / "cublas_api.h", "CUBLAS_VER_MINOR"),
         pa = header_define(inc / "cublas_api.h", "CUBLAS_VER_PATCH");
    CHECK(l.find("cuda.cublas")->version == std::to_string(ma) + "." + std::to_string(mi) + "." + std::to_string(pa));
    CHECK(l.find("cuda.cublas")->field_text("code") == std::to_string(ma * 10000 + mi * 100 + pa));
  } else {
    skipped("cuda.cublas against CUBLAS_VER_*", "no " + (inc / "cublas_api.h").string());
  }
  if (fs::exists("/usr/local/cuda/bin/nvcc")) {
    auto nvcc = run_process({"/usr/local/cuda/bin/nvcc", "--version"});
    std::smatch m;
    REQUIRE(std::regex_search(nvcc.out, m, std::regex(R"(V([0-9.]+))")));
    CHECK(l.find("cuda.toolkit")->version == m[1].str());
  } else {
    skipped("cuda.toolkit against nvcc --version", "no /usr/local/cuda/bin/nvcc");
  }
  if (driver_absent_here()) {
    CHECK(l.find("driver")->version == "none");
    CHECK(l.find("gpu.count")->version == "0");
    CHECK(l.probe("driver").rfind("not found", 0) == 0);
  } else {
    skipped("driver recorded as none", "this machine has an NVIDIA driver (its version is not known to the test)");
  }
  // Debian package asked for, against dpkg-query.
  auto dq = run_process({"dpkg-query", "-W", "-f=${Version}", "libopenblas-dev"});
  if (dq.ok()) CHECK(l.find("deb.libopenblas-dev")->version == dq.out);
  else skipped("deb.libopenblas-dev against dpkg-query", "dpkg-query -W libopenblas-dev: " + dq.describe());
  // The sha256 of a library the process loaded, against sha256sum.
  if (const Component* rt = l.find("cuda.runtime"); rt && rt->version != "none") {
    std::string lib = rt->field_text("library");
    const Component* h = l.find_path({"loaded", lib});
    REQUIRE(h != nullptr);
    auto sum = run_process({"sha256sum", lib});
    REQUIRE(sum.ok());
    CHECK(h->version == "sha256:" + sum.out.substr(0, 64));
  } else {
    skipped("the sha256 of the loaded CUDA runtime against sha256sum", "no CUDA runtime was loaded");
  }
  if (fs::exists("/usr/bin/python3")) {
    const Component* py = l.find_path({"python", "/usr/bin/python3"});
    REQUIRE(py != nullptr);
    CHECK(py->version != "unknown");
    CHECK(l.probe("python:/usr/bin/python3") == "ok");
  } else {
    skipped("the python component", "no /usr/bin/python3");
  }

  // The lock's interpreter runs when named again (python3 on PATH may be another one).
  std::vector<std::string> python(extra.begin() + 2, extra.end());
  auto check_args = [&](std::vector<std::string> a) {
    a.insert(a.end(), python.begin(), python.end());
    return a;
  };
  auto check = envlock(check_args({"check", (dir / "a.lock").string()}));
  CHECK_MESSAGE(check.exit_code == 0, (check.out + check.err));
  CHECK(has(check.out, "at level patch: no drift"));
  auto exact = envlock(check_args({"check", (dir / "a.lock").string(), "--level", "exact", "--format", "json"}));
  CHECK_MESSAGE(exact.exit_code == 0, exact.out);
  CHECK(has(exact.out, "\"drift\": false"));
}

TEST_CASE("a lock with one version edited: check exits 1 and names the component") {
  test::TempDir dir("edit");
  auto s = envlock({"snapshot", "--no-hashes", "--lib", "libz.so.1", "-o", (dir / "env.lock").string(), "--format", "csv"});
  REQUIRE(s.exit_code == 0);
  Lock l = read_lock(dir / "env.lock").lock;
  // With -o and --format csv the lock's rows also go to stdout: a header and one per component.
  CHECK(test::lines(s.out).size() == l.components.size() + 1);
  CHECK(test::lines(s.out).front() == "component,version,details");
  // --lib: the file the loader resolved, its version from the file name, its Debian package.
  const Component* z = l.find("lib.\"libz.so.1\"");
  REQUIRE(z != nullptr);
  if (z->version != "none") {
    std::string file = fs::path(z->field_text("library")).filename().string();
    CHECK(file.rfind("libz.so.", 0) == 0);
    CHECK(file == "libz.so." + z->version);
    // dpkg may know the file under merged-/usr's other name (/lib/... for /usr/lib/...).
    std::string lib = z->field_text("library");
    auto owner = run_process({"dpkg-query", "-S", lib});
    if (!owner.ok() && lib.rfind("/usr/", 0) == 0) owner = run_process({"dpkg-query", "-S", lib.substr(4)});
    if (owner.ok()) {
      CHECK_FALSE(z->field_text("package").empty());
      CHECK(owner.out.rfind(z->field_text("package") + ": ", 0) == 0);
      CHECK_FALSE(z->field_text("package-version").empty());
    } else {
      skipped("libz's Debian package against dpkg-query -S", "dpkg-query -S " + lib + ": " + owner.describe());
    }
  } else {
    skipped("the file and package of libz.so.1", "the loader found no libz.so.1");
  }
  std::string table = l.find("cuda.cudnn") && l.find("cuda.cudnn")->version != "none" ? "cuda.cudnn" : "system.cmake";
  std::string edited = set_table_version(test::read_file(dir / "env.lock"), table, "1.0.0");
  test::write_file(dir / "edited.lock", edited);

  auto r = envlock({"check", (dir / "edited.lock").string()});
  CHECK(r.exit_code == 1);
  CHECK(has(r.out, table + "  1.0.0"));
  CHECK(has(r.out, "1 differ"));
  CHECK(has(r.err, "content does not match its header.content-hash"));
  if (table == "cuda.cudnn") CHECK(has(r.out, "breaking"));

  auto strict = envlock({"check", (dir / "edited.lock").string(), "--strict"});
  CHECK(strict.exit_code == 2);
  CHECK(has(strict.err, "edited after it was written"));

  auto ignored = envlock({"check", (dir / "edited.lock").string(), "--ignore", table});
  CHECK(ignored.exit_code == 0);

  auto diff = envlock({"diff", (dir / "env.lock").string(), (dir / "edited.lock").string(), "--format", "toml"});
  CHECK(diff.exit_code == 1);
  CHECK(has(diff.out, "component = \"" + table + "\"\nlocked = \"" + l.find(table)->version + "\"\nfound = \"1.0.0\""));
  auto same = envlock({"diff", (dir / "env.lock").string(), (dir / "env.lock").string()});
  CHECK(same.exit_code == 0);
  CHECK(has(same.out, "no drift"));
  // The row formats every dlkit tool offers (csv was refused): the drift table's rows, and a lock's.
  auto csv = envlock({"diff", (dir / "env.lock").string(), (dir / "edited.lock").string(), "--format", "csv"});
  CHECK(csv.exit_code == 1);
  const auto csv_lines = test::lines(csv.out);
  REQUIRE(csv_lines.size() == 2);
  CHECK(csv_lines[0] == "component,locked,found,severity,note");
  CHECK(csv_lines[1].rfind(table + "," + l.find(table)->version + ",1.0.0,", 0) == 0);
  auto jsonl = envlock({"diff", (dir / "env.lock").string(), (dir / "edited.lock").string(), "--format", "jsonl"});
  REQUIRE(test::lines(jsonl.out).size() == 1);
  CHECK(nlohmann::json::parse(jsonl.out)["found"] == "1.0.0");
  auto md = envlock({"diff", (dir / "env.lock").string(), (dir / "edited.lock").string(), "--format", "md"});
  CHECK(md.out.rfind("| component | locked | found | severity | note |\n", 0) == 0);
  auto no_rows = envlock({"diff", (dir / "env.lock").string(), (dir / "env.lock").string(), "--format", "csv"});
  CHECK(no_rows.out == "component,locked,found,severity,note\n");
}

TEST_CASE("a hanging nvidia-smi is killed at the probe timeout and recorded as failed") {
  test::TempDir dir("hang");
  fs::create_directories(dir / "bin");
  std::string pidfile = (dir / "pid").string();
  write_script(dir / "bin/nvidia-smi", "#!/bin/sh\necho $$ > " + pidfile + "\nsleep 60\n");
  auto t0 = std::chrono::steady_clock::now();
  auto r = envlock({"snapshot", "--probe-timeout", "1", "--no-hashes", "-o", (dir / "env.lock").string()}, {path_with(dir / "bin")});
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exit_code == 0);
  CHECK(took >= 1.0);  // the probe was given its timeout
  // Not a speed check (the other probes' time varies with the machine's load): a probe that was
  // not killed would wait for the script's 60 s sleep.
  CHECK(took < 30.0);
  CHECK(has(r.err, "probe driver failed: nvidia-smi timed out after 1 s (killed)"));
  Lock l = read_lock(dir / "env.lock").lock;
  CHECK(l.find("driver")->version == "unknown");
  CHECK(l.find("driver")->field_text("source") == "nvidia-smi");
  CHECK(l.find("gpu.count")->version == "unknown");
  CHECK(l.probe("driver") == "failed: nvidia-smi timed out after 1 s (killed)");
  CHECK(l.find("cuda.runtime") != nullptr);  // the other probes still ran
  CHECK(l.probe("cudart") != "");
  // The script was killed with its process group.
  int pid = std::stoi(test::read_file(pidfile));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ::kill(pid, 0) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);
}

TEST_CASE("a GPU machine (fake nvidia-smi): driver and GPUs recorded; a driver downgrade is breaking") {
  test::TempDir dir("gpu");
  fs::create_directories(dir / "bin");
  write_script(dir / "bin/nvidia-smi", "#!/bin/sh\necho \"0, NVIDIA H100 80GB HBM3, 81559, 9.0, ${FAKE_DRIVER:-580.95.05}\"\n");
  auto env = path_with(dir / "bin");
  auto s = envlock({"snapshot", "--no-hashes", "-o", (dir / "env.lock").string()}, {env});
  REQUIRE(s.exit_code == 0);
  Lock l = read_lock(dir / "env.lock").lock;
  CHECK(l.find("driver")->version == "580.95.05");
  CHECK(l.find("gpu.count")->version == "1");
  CHECK(l.find("gpu.0.name")->version == "NVIDIA H100 80GB HBM3");
  CHECK(l.find("gpu.0.memory")->version == "81559 MiB");
  CHECK(l.find("gpu.0.compute-capability")->version == "9.0");
  CHECK(l.probe("driver") == "ok");

  CHECK(envlock({"check", (dir / "env.lock").string()}, {env}).exit_code == 0);
  auto r = envlock({"check", (dir / "env.lock").string(), "--level", "major"}, {env, "FAKE_DRIVER=550.54.14"});
  CHECK(r.exit_code == 1);
  CHECK(std::regex_search(r.out, std::regex(R"(\ndriver\s+580\.95\.05\s+550\.54\.14\s+breaking\s+downgrade)")));
  std::string cuda = l.find("cuda.runtime")->version;
  if (cuda.rfind("13.", 0) == 0) CHECK(has(r.out, "below the minimum 580 for CUDA " + cuda));
  // Without a driver at all (no nvidia-smi on PATH): also breaking.
  if (driver_absent_here()) {
    auto none = envlock({"check", (dir / "env.lock").string(), "--format", "json"});
    CHECK(none.exit_code == 1);
    CHECK(has(none.out, "\"breaking\": true"));
  }
}

TEST_CASE("bad input exits 2 with the file, line or option named") {
  test::TempDir dir("bad");
  test::write_file(dir / "broken.lock", "[header]\nformat = \"dlkit-envlock/1\"\n\n[lock]\nkind = \"snapshot\"\n[cuda.runtime]\nversion = 13\n");
  auto r = envlock({"check", (dir / "broken.lock").string()});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "broken.lock:7: cuda.runtime.version must be a string"));
  test::write_file(dir / "syntax.lock", "[header\n");
  r = envlock({"check", (dir / "syntax.lock").string()});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "syntax.lock:1:"));
  CHECK(has(r.err, "TOML syntax error"));
  r = envlock({"check", (dir / "missing.lock").string()});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "missing.lock: no such file"));
  r = envlock({"check", (dir / "broken.lock").string(), "--level", "huge"});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "unknown --level 'huge' (use major, minor, patch or exact)"));
  r = envlock({"snapshot", "--format", "xml", "--no-hashes"});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "unknown --format 'xml' (use table, json, jsonl, csv, md or toml)"));
  CHECK(envlock({"frobnicate"}).exit_code == 2);
  CHECK(envlock({}).exit_code == 2);
  r = envlock({"sync", (dir / "broken.lock").string(), "--dry-run", "--yes"});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "contradict"));
  test::write_file(dir / "env.toml", "cuda = \">=12.4\"\ndriver = \"=>550\"\n");
  r = envlock({"resolve", (dir / "env.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, "env.toml:2: driver: invalid constraint \"=>550\""));
}

TEST_CASE("resolve: unsatisfiable exits 1 with the explanation; a satisfiable lock checks clean; sync prints the commands") {
  test::TempDir dir("resolve");
  test::write_file(dir / "impossible.toml", "cuda = \">=99\"\n");
  auto r = envlock({"resolve", (dir / "impossible.toml").string()});
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(has(r.err, "Could not find a version that satisfies cuda \">=99\" (from " + (dir / "impossible.toml").string() + " line 1)"));
  CHECK((has(r.err, "rejected by >=99") || has(r.err, "No candidates")));

  if (find_program("apt-cache").empty() || !run_process({"dpkg-query", "-W", "libopenblas-dev"}).ok()) {
    MESSAGE("no apt or libopenblas-dev here; the rest is skipped");
    return;
  }
  test::write_file(dir / "env.toml", "deb.libopenblas-dev = \"*\"\n");
  auto ok = envlock({"resolve", (dir / "env.toml").string(), "--prefer-installed", "-o", (dir / "env.lock").string()});
  REQUIRE_MESSAGE(ok.exit_code == 0, ok.err);
  Lock l = read_lock(dir / "env.lock").lock;
  CHECK(l.kind == "resolved");
  auto installed = run_process({"dpkg-query", "-W", "-f=${Version}", "libopenblas-dev"});
  CHECK(l.find("deb.libopenblas-dev")->version == installed.out);
  auto check = envlock({"check", (dir / "env.lock").string()});
  CHECK_MESSAGE(check.exit_code == 0, check.out);
  CHECK(has(check.out, "1 components compared at level patch: no drift"));

  auto sync = envlock({"sync", (dir / "env.lock").string(), "--dry-run"});
  CHECK(sync.exit_code == 0);
  CHECK(has(sync.out, "# Debian packages: 0 to install or change, 1 already at the locked version\n"));
  // Pin another version: sync prints the apt-get command that installs it.
  std::string text = test::read_file(dir / "env.lock");
  size_t at = text.find("libopenblas-dev = \"" + installed.out + "\"");
  REQUIRE(at != std::string::npos);
  text.replace(at, std::string("libopenblas-dev = \"" + installed.out + "\"").size(), "libopenblas-dev = \"0.3.20+ds-1\"");
  test::write_file(dir / "other.lock", text);
  auto plan = envlock({"sync", (dir / "other.lock").string(), "--dry-run"});
  CHECK(plan.exit_code == 0);
  std::string cmd = std::string(::geteuid() == 0 ? "" : "sudo ") + "apt-get install -y --allow-downgrades libopenblas-dev=0.3.20+ds-1\n";
  CHECK(has(plan.out, "\n" + cmd));
  auto json = envlock({"sync", (dir / "other.lock").string(), "--dry-run", "--format", "json"});
  CHECK(json.exit_code == 0);
  CHECK(has(json.out, "\"libopenblas-dev=0.3.20+ds-1\""));
}

TEST_CASE("--help teaches every subcommand with examples") {
  auto top = envlock({"--help"});
  CHECK(top.exit_code == 0);
  CHECK(has(top.out, "Examples:"));
  for (const char* sub : {"snapshot", "check", "diff", "resolve", "sync"}) {
    auto h = envlock({sub, "--help"});
    INFO(sub);
    CHECK(h.exit_code == 0);
    CHECK(has(h.out, "Examples:"));
    CHECK(has(h.out, std::string("dl-envlock ") + sub));
  }
}

TEST_CASE("a lock naming a program and a library: check, --strict, diff and dl-train --env-lock run and load neither") {
  test::TempDir dir("hostile");
  const test::HostileLock h = test::write_hostile_lock(dir.path());
  if (!h.library_built) skipped("a lock naming a shared library", "no C compiler (cc, gcc) to build one");
  const std::string lock = h.lock.string(), interp = h.interpreter.string();
  const std::vector<std::string> env = {h.lib_env()};
  // Each step is judged by its own run: the marker goes after each look.
  auto ran_nothing = [&](const std::string& what) {
    INFO(what);
    CHECK_MESSAGE(!fs::exists(h.marker), test::read_file(h.marker));
    fs::remove(h.marker);
  };

  auto check = envlock({"check", lock}, env);
  ran_nothing("check");
  // The interpreter was compared as text, not run: one row says so and how to compare it.
  CHECK(check.exit_code == 1);
  CHECK(has(check.out, "python.\"" + interp + "\"  3.11.7  unknown"));
  CHECK(has(check.out, "not run: " + interp + " is named only by the lock"));
  CHECK(has(check.out, "--python " + interp));
  CHECK_FALSE(has(check.out, "numpy"));  // its packages are not compared without it
  // The libraries were found as files (the path, and the name on LD_LIBRARY_PATH): their
  // versions, from the file name, match; nothing was loaded.
  CHECK_FALSE(has(check.out, "lib."));

  auto strict = envlock({"check", lock, "--strict", "--level", "exact"}, env);
  ran_nothing("check --strict --level exact");
  CHECK(strict.exit_code == 1);
  CHECK(has(strict.out, "not run: " + interp));

  auto diff = envlock({"diff", lock, lock}, env);
  ran_nothing("diff");
  CHECK(diff.exit_code == 0);

  const std::string train = test::tool("dl-train");
  if (fs::exists(train)) {
    test::write_file(dir / "c.toml", test::kTinyGpt);
    auto t = test::run(train, {(dir / "c.toml").string(), "--run-dir", (dir / "run").string(), "--steps", "1",
                               "--env-lock", lock},
                       "", env, 300);
    ran_nothing("dl-train --env-lock");
    CHECK_MESSAGE(t.exit_code == 0, t.err);  // not breaking: a warning with the table
    CHECK(has(t.err, "not run: " + interp));
  } else {
    skipped("dl-train --env-lock", "no " + train + " in this build");
  }

  // Named on the command line, the interpreter runs: its packages compare, and the lock matches.
  auto named = envlock({"check", lock, "--python", interp}, env);
  CHECK_MESSAGE(named.exit_code == 0, (named.out + named.err));
  CHECK(has(named.out, "no drift"));
  CHECK(has(test::read_file(h.marker), "ran: " + interp + " --version"));
}

TEST_CASE("resolve: the interpreter a constraints file names runs only when --python names it too") {
  test::TempDir dir("hostile-resolve");
  const test::HostileLock h = test::write_hostile_lock(dir.path());
  const std::string interp = h.interpreter.string();
  test::write_file(dir / "env.toml", "python-interpreter = \"" + interp + "\"\npython.numpy = \"*\"\n");
  auto r = envlock({"resolve", (dir / "env.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(has(r.err, (dir / "env.toml").string() + ":1: python-interpreter \"" + interp + "\" is not run"));
  CHECK(has(r.err, "--python " + interp));
  CHECK_MESSAGE(!fs::exists(h.marker), test::read_file(h.marker));

  auto named = envlock({"resolve", (dir / "env.toml").string(), "--python", interp, "--format", "json"});
  CHECK_MESSAGE(named.exit_code == 0, named.err);
  CHECK(has(named.out, "\"component\": \"python.\\\"" + interp + "\\\".packages.numpy\",\n      \"version\": \"1.24.2\""));
  CHECK(has(test::read_file(h.marker), "ran: " + interp + " -m pip list"));
}

TEST_CASE("sync --dry-run compares the interpreter's installed packages: only differences get pip install; local versions are manual") {
  test::TempDir dir("sync-python");
  const fs::path interp = dir / "python", marker = dir / "marker";
  // A fake interpreter: Python 3.11.2 with numpy 1.24.2, scipy 1.9.0 and a source build of torch.
  write_script(interp, "#!/bin/sh\n"
                       "echo \"ran: $*\" >> " + marker.string() + "\n"
                       "if [ \"$1\" = --version ]; then echo 'Python 3.11.2'; exit 0; fi\n"
                       "echo '[{\"name\": \"numpy\", \"version\": \"1.24.2\"}, {\"name\": \"scipy\", \"version\": \"1.9.0\"},"
                       " {\"name\": \"torch\", \"version\": \"1.13.0a0+gitunknown\"}]'\n");
  Lock l;
  l.add({"python", interp.string()}, "3.11.2").set("executable", interp.string());
  l.add({"python", interp.string(), "packages", "numpy"}, "1.24.2");
  l.add({"python", interp.string(), "packages", "scipy"}, "1.10.0");
  l.add({"python", interp.string(), "packages", "torch"}, "1.13.0a0+gitunknown");
  l.add({"python", interp.string(), "packages", "mylib"}, "0.1+local");
  seal(l);
  write_lock(dir / "env.lock", l);

  // Not named: the lock's interpreter is not run, and every public version is proposed.
  auto unnamed = envlock({"sync", (dir / "env.lock").string(), "--dry-run"});
  CHECK_MESSAGE(unnamed.exit_code == 0, unnamed.err);
  CHECK_FALSE(fs::exists(marker));
  CHECK(has(unnamed.out, "\n" + interp.string() + " -m pip install numpy==1.24.2 scipy==1.10.0\n"));
  CHECK(has(unnamed.out, "# " + interp.string() + ": installed packages not read"));
  CHECK(has(unnamed.out, "--python " + interp.string() + " compares them"));

  auto named = envlock({"sync", (dir / "env.lock").string(), "--dry-run", "--python", interp.string()});
  CHECK_MESSAGE(named.exit_code == 0, named.err);
  CHECK(has(test::read_file(marker), "ran: -m pip list"));
  CHECK(has(named.out, "# Python packages: 1 to install or change, 2 already at the locked version\n"));
  CHECK(has(named.out, "\n" + interp.string() + " -m pip install scipy==1.10.0\n"));
  CHECK_FALSE(has(named.out, "numpy=="));
  CHECK_FALSE(has(named.out, "torch"));  // installed at its locked source build
  CHECK(has(named.out, "#   python.\"" + interp.string() + "\".packages.mylib 0.1+local: a local version (+local): no public "
                       "package index serves it; not installed;"));
  auto json = envlock({"sync", (dir / "env.lock").string(), "--dry-run", "--python", interp.string(), "--format", "json"});
  CHECK(json.exit_code == 0);
  CHECK(has(json.out, "\"pip_satisfied\": ["));
  CHECK(has(json.out, "\"detail\": \"installed 1.13.0a0+gitunknown\""));
}
