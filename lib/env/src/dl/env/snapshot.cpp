#include "dl/env/snapshot.hpp"

#include <sys/utsname.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/core/version.hpp"
#include "dl/env/native.hpp"
#include "dl/env/process.hpp"
#include "dl/env/sha256.hpp"

namespace dl {

namespace fs = std::filesystem;

namespace {

std::string read_small_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return "";
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> out;
  std::istringstream is{std::string(text)};
  std::string line;
  while (std::getline(is, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t b = 0;
  for (;;) {
    size_t t = line.find('\t', b);
    out.push_back(line.substr(b, t == std::string::npos ? std::string::npos : t - b));
    if (t == std::string::npos) break;
    b = t + 1;
  }
  return out;
}

std::string failed(const ProcessResult& r, const std::string& what) { return "failed: " + what + " " + r.describe(); }

// The names dpkg may know a file by: with merged /usr (Debian 12), packages list /lib/x.so while
// the loader resolves /usr/lib/x.so.
std::vector<std::string> dpkg_aliases(const std::string& path) {
  std::vector<std::string> out{path};
  for (const char* dir : {"/usr/lib/", "/usr/lib64/", "/usr/bin/", "/usr/sbin/"})
    if (path.rfind(dir, 0) == 0) out.push_back(path.substr(4));
  return out;
}

}  // namespace

// ---------------------------------------------------------------- parsers

OsRelease parse_os_release(std::string_view text) {
  OsRelease o;
  for (const auto& line : split_lines(text)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
    if (k == "ID") o.id = v;
    else if (k == "VERSION_ID") o.version_id = v;
    else if (k == "PRETTY_NAME") o.pretty_name = v;
  }
  return o;
}

CpuInfo parse_cpuinfo(std::string_view text) {
  CpuInfo c;
  std::set<std::string> flags;
  bool have_flags = false;
  for (const auto& line : split_lines(text)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = trim(line.substr(0, colon)), v = trim(line.substr(colon + 1));
    if (c.model.empty() && (k == "model name" || k == "Model" || k == "Hardware" || k == "cpu model")) c.model = v;
    if (!have_flags && (k == "flags" || k == "Features")) {
      for (auto& w : split_words(v)) flags.insert(std::move(w));
      have_flags = true;
    }
  }
  c.flags.assign(flags.begin(), flags.end());
  return c;
}

std::string parse_nvcc_version(std::string_view text) {
  static const std::regex re(R"(release\s+([0-9.]+),\s*V([0-9.]+))");
  std::string s(text);
  std::smatch m;
  if (std::regex_search(s, m, re)) return m[2].str();
  static const std::regex rel(R"(release\s+([0-9.]+))");
  if (std::regex_search(s, m, rel)) return m[1].str();
  return "";
}

std::string parse_tool_version(std::string_view text) {
  auto lines = split_lines(text);
  static const std::regex re(R"(([0-9]+\.[0-9]+(?:\.[0-9]+)*))");
  for (const auto& line : lines) {
    if (trim(line).empty()) continue;
    // The last dotted number of the first line: "c++ (Debian 12.2.0-14+deb12u1) 12.2.0" -> 12.2.0.
    std::string last;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), re); it != std::sregex_iterator(); ++it) last = it->str();
    return last;
  }
  return "";
}

std::vector<SmiGpu> parse_nvidia_smi_csv(std::string_view text) {
  std::vector<SmiGpu> out;
  for (const auto& line : split_lines(text)) {
    if (trim(line).empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(trim(cell));
    if (f.size() < 4) continue;
    SmiGpu g;
    // index, name, memory.total [, compute_cap], driver_version
    g.name = f[1];
    try {
      g.memory_mib = std::stoll(f[2]);
    } catch (...) {
      g.memory_mib = -1;
    }
    if (f.size() >= 5) {
      g.compute_capability = f[3];
      g.driver = f[4];
    } else {
      g.driver = f[3];
    }
    out.push_back(g);
  }
  return out;
}

std::string parse_proc_driver_version(std::string_view text) {
  static const std::regex re(R"(Kernel Module\s+([0-9]+(?:\.[0-9]+)+))");
  std::string s(text);
  std::smatch m;
  return std::regex_search(s, m, re) ? m[1].str() : "";
}

std::vector<std::pair<std::string, std::string>> parse_pip_list_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw_runtime("pip list printed something that is not JSON: ", e.what());
  }
  if (!j.is_array()) throw_runtime("pip list --format json did not print an array");
  std::map<std::string, std::string> sorted;
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("name") || !e.contains("version") || !e["name"].is_string() || !e["version"].is_string())
      throw_runtime("pip list entry without name and version: ", e.dump());
    sorted[normalize_python_name(e["name"].get<std::string>())] = e["version"].get<std::string>();
  }
  return {sorted.begin(), sorted.end()};
}

std::map<std::string, std::string> parse_dpkg_search(std::string_view text) {
  std::map<std::string, std::string> out;
  for (const auto& line : split_lines(text)) {
    if (line.rfind("diversion ", 0) == 0) continue;
    size_t sep = line.find(": /");
    if (sep == std::string::npos) continue;
    std::string pkgs = line.substr(0, sep), path = line.substr(sep + 2);
    std::string first = trim(pkgs.substr(0, pkgs.find(',')));
    out[path] = first;
  }
  return out;
}

std::vector<DpkgEntry> parse_dpkg_query(std::string_view text) {
  std::vector<DpkgEntry> out;
  for (const auto& line : split_lines(text)) {
    auto f = split_tabs(line);
    if (f.size() < 5) continue;
    DpkgEntry e;
    e.binary_package = f[0];
    e.package = f[1];
    e.arch = f[2];
    e.version = f[3];
    e.installed = f[4].size() >= 2 && f[4][0] == 'i' && f[4][1] == 'i';
    out.push_back(e);
  }
  return out;
}

std::string nccl_built_for(const std::string& library_path, const std::string& package_version) {
  static const std::regex deb(R"(\+cuda([0-9]+(?:\.[0-9]+)?))");
  std::smatch m;
  if (std::regex_search(package_version, m, deb)) return m[1].str();
  static const std::regex wheel(R"(^nvidia_nccl_cu([0-9]+)-.*\.dist-info$)");
  fs::path dir = fs::path(library_path).parent_path();
  for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
    for (const fs::path& d : {dir, dir / "dist-info"}) {
      std::error_code ec;
      if (!fs::is_directory(d, ec)) continue;
      for (const auto& e : fs::directory_iterator(d, ec)) {
        std::string name = e.path().filename().string();
        if (std::regex_match(name, m, wheel)) return m[1].str();
      }
    }
    if (dir == dir.root_path()) break;
  }
  return "";
}

// ---------------------------------------------------------------- the snapshot

namespace {

struct Snap {
  const SnapshotOptions& o;
  Lock lock;
  std::vector<std::pair<std::string, std::string>> lib_paths;  // (component key, library path)

  ProcessResult run(const std::vector<std::string>& argv, std::vector<std::string> env = {}) {
    ProcessOptions po;
    po.timeout_s = o.probe_timeout_s;
    po.env = std::move(env);
    return run_process(argv, po);
  }

  void probe(const std::string& name, const std::string& status) {
    lock.set_probe(name, status);
    if (status.rfind("failed", 0) == 0) log_warn("probe " + name + " " + status);
  }

  void system() {
    OsRelease os = parse_os_release(read_small_file("/etc/os-release"));
    struct utsname u {};
    ::uname(&u);
    CpuInfo cpu = parse_cpuinfo(read_small_file("/proc/cpuinfo"));
    lock.add({"system", "os"}, os.id.empty() ? kVersionUnknown : os.id);
    lock.add({"system", "os-version"}, os.version_id.empty() ? kVersionUnknown : os.version_id);
    lock.add({"system", "kernel"}, u.release);
    lock.add({"system", "arch"}, u.machine);
    lock.add({"system", "cpu"}, cpu.model.empty() ? kVersionUnknown : cpu.model);
    const std::string flags = join(cpu.flags, " ");
    lock.add({"system", "cpu-flags"}, flags.empty() ? kVersionUnknown : flags);
    probe("system", "ok");
  }

  void tool(const std::string& probe_name, std::vector<std::string> path, std::vector<std::string> argv,
            std::string (*parse)(std::string_view)) {
    Component& c = lock.add(std::move(path), kVersionNone);
    c.set("command", argv[0]);
    std::string exe = find_program(argv[0]);
    if (exe.empty()) {
      probe(probe_name, "not found: no " + argv[0] + " on PATH");
      return;
    }
    argv.push_back("--version");
    ProcessResult r = run(argv);
    if (!r.ok()) {
      c.version = kVersionUnknown;
      probe(probe_name, failed(r, argv[0] + " --version"));
      return;
    }
    std::string v = parse(r.out.empty() ? r.err : r.out);
    c.version = v.empty() ? kVersionUnknown : v;
    probe(probe_name, v.empty() ? "failed: no version in the output of " + argv[0] + " --version" : "ok");
  }

  void compilers() {
    std::vector<std::string> cxx{"c++"};
    if (const char* env = std::getenv("CXX"); env && *env) {
      const std::vector<std::string> words = split_words(env);
      // "ccache g++": the compiler is the last word.
      if (!words.empty()) cxx = {words.back()};
    }
    tool("cxx", {"system", "cxx"}, cxx, &parse_tool_version);
    tool("cmake", {"system", "cmake"}, {"cmake"}, &parse_tool_version);
    std::string nvcc;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var); v && *v && nvcc.empty()) nvcc = find_program(std::string(v) + "/bin/nvcc");
    if (nvcc.empty()) nvcc = find_program("nvcc");
    if (nvcc.empty()) nvcc = find_program("/usr/local/cuda/bin/nvcc");
    tool("nvcc", {"cuda", "toolkit"}, {nvcc.empty() ? "nvcc" : nvcc}, &parse_nvcc_version);
  }

  void cuda_libs(std::string& driver_cuda) {
    CudaRuntimeProbe rt = probe_cuda_runtime();
    Component& c = lock.add({"cuda", "runtime"}, rt.runtime_code > 0 ? decode_cuda_version(rt.runtime_code) : kVersionNone);
    if (rt.runtime_code > 0) {
      c.set("code", rt.runtime_code);
      c.set("library", rt.lib.path);
      lib_paths.push_back({c.key(), rt.lib.path});
      probe("cudart", "ok");
    } else if (rt.lib.found) {
      c.version = kVersionUnknown;
      probe("cudart", "failed: " + rt.error);
    } else {
      probe("cudart", rt.error);
    }
    driver_cuda = rt.driver_code > 0 ? decode_cuda_version(rt.driver_code) : kVersionNone;

    CudnnProbe dnn = probe_cudnn();
    Component& d = lock.add({"cuda", "cudnn"}, dnn.code > 0 ? decode_cudnn_version(dnn.code) : kVersionNone);
    if (dnn.code > 0) {
      d.set("code", dnn.code);
      if (dnn.cudart_code > 0) d.set("built-for-cuda", decode_cuda_version(dnn.cudart_code));
      d.set("library", dnn.lib.path);
      lib_paths.push_back({d.key(), dnn.lib.path});
      probe("cudnn", "ok");
    } else if (dnn.lib.found) {
      d.version = kVersionUnknown;
      probe("cudnn", "failed: " + dnn.error);
    } else {
      probe("cudnn", dnn.error);
    }

    CublasProbe bl = probe_cublas();
    bool bl_ok = bl.major >= 0;
    Component& b = lock.add({"cuda", "cublas"}, bl_ok ? str(bl.major, ".", bl.minor, ".", bl.patch) : kVersionNone);
    if (bl_ok) {
      b.set("code", cublas_version_code(bl.major, bl.minor, bl.patch));
      b.set("library", bl.lib.path);
      lib_paths.push_back({b.key(), bl.lib.path});
      probe("cublas", "ok");
    } else if (bl.lib.found) {
      b.version = kVersionUnknown;
      probe("cublas", "failed: " + bl.error);
    } else {
      probe("cublas", bl.error);
    }

    NcclProbe nc = probe_nccl();
    Component& n = lock.add({"cuda", "nccl"}, nc.code > 0 ? decode_nccl_version(nc.code) : kVersionNone);
    if (nc.code > 0) {
      n.set("code", nc.code);
      n.set("library", nc.lib.path);
      lib_paths.push_back({n.key(), nc.lib.path});
      probe("nccl", "ok");
    } else if (nc.lib.found) {
      n.version = kVersionUnknown;
      probe("nccl", "failed: " + nc.error);
    } else {
      probe("nccl", nc.error);
    }
  }

  void driver(const std::string& driver_cuda) {
    Component drv{{"driver"}, kVersionNone, {}, {}, 0};
    std::vector<GpuInfo> gpus;
    std::string gpu_count = "0";
    std::string status;
    std::string smi = find_program("nvidia-smi");
    if (!smi.empty()) {
      drv.set("source", "nvidia-smi");
      ProcessResult r = run({smi, "--query-gpu=index,name,memory.total,compute_cap,driver_version",
                             "--format=csv,noheader,nounits"});
      if (r.started && !r.timed_out && r.exit_code != 0) {
        // Drivers before compute_cap existed as a field: ask without it.
        ProcessResult r2 = run({smi, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"});
        if (r2.ok() || r2.timed_out) r = r2;
      }
      auto rows = r.ok() ? parse_nvidia_smi_csv(r.out) : std::vector<SmiGpu>{};
      if (r.ok() && !rows.empty()) {
        drv.version = rows[0].driver.empty() ? kVersionUnknown : rows[0].driver;
        for (const auto& g : rows) gpus.push_back({g.name, g.memory_mib, g.compute_capability});
        gpu_count = std::to_string(rows.size());
        status = "ok";
      } else {
        drv.version = kVersionUnknown;
        gpu_count = kVersionUnknown;
        status = r.ok() ? "failed: nvidia-smi printed no GPU" : failed(r, "nvidia-smi");
      }
    } else if (NvmlProbe nv = probe_nvml(); nv.lib.found) {
      drv.set("source", "nvml");
      if (nv.ok) {
        drv.version = nv.driver;
        gpus = nv.gpus;
        gpu_count = std::to_string(gpus.size());
        status = "ok";
      } else {
        drv.version = kVersionUnknown;
        gpu_count = kVersionUnknown;
        status = "failed: " + nv.error;
      }
    } else if (std::string proc = read_small_file("/proc/driver/nvidia/version"); !proc.empty()) {
      drv.set("source", "/proc/driver/nvidia/version");
      std::string v = parse_proc_driver_version(proc);
      drv.version = v.empty() ? kVersionUnknown : v;
      size_t n = 0;
      std::error_code ec;
      for (auto it = fs::directory_iterator("/proc/driver/nvidia/gpus", ec); !ec && it != fs::directory_iterator(); ++it) ++n;
      gpu_count = std::to_string(n);
      status = v.empty() ? "failed: no version in /proc/driver/nvidia/version" : "ok";
    } else {
      drv.set("source", "none");
      status = "not found: no nvidia-smi on PATH, no libnvidia-ml.so.1, no /proc/driver/nvidia/version";
    }
    drv.set("cuda", driver_cuda);
    lock.components.push_back(drv);
    lock.add({"gpu", "count"}, gpu_count);
    for (size_t i = 0; i < gpus.size(); ++i) {
      std::string idx = std::to_string(i);
      lock.add({"gpu", idx, "name"}, gpus[i].name.empty() ? kVersionUnknown : gpus[i].name);
      lock.add({"gpu", idx, "memory"}, gpus[i].memory_mib >= 0 ? std::to_string(gpus[i].memory_mib) + " MiB" : kVersionUnknown);
      lock.add({"gpu", idx, "compute-capability"},
               gpus[i].compute_capability.empty() ? kVersionUnknown : gpus[i].compute_capability);
    }
    probe("driver", status);
  }

  void cpu_libs() {
    OpenblasProbe ob = probe_openblas();
    Component& c = lock.add({"blas", "openblas"}, ob.version.empty() ? (ob.lib.found ? kVersionUnknown : kVersionNone) : ob.version);
    if (ob.lib.found) {
      if (!ob.config.empty()) c.set("config", ob.config);
      c.set("library", ob.lib.path);
      lib_paths.push_back({c.key(), ob.lib.path});
    }
    probe("openblas", ob.error.empty() ? "ok" : (ob.lib.found ? "failed: " + ob.error : ob.error));

    LoadedLibrary gloo = load_library({"libgloo.so", "libgloo.so.0"});
    std::string gv = gloo.found ? version_from_library_name(gloo.path) : kVersionNone;
    Component& g = lock.add({"comm", "gloo"}, gv.empty() ? kVersionUnknown : gv);
    if (gloo.found) {
      g.set("library", gloo.path);
      lib_paths.push_back({g.key(), gloo.path});
    }
    probe("gloo", gloo.found ? (gv.empty() ? "failed: no version in the file name " + gloo.path : "ok") : gloo.error);

    extra_libs();
  }

  // lib.NAME: the file `path` ("" when absent: `missing` says why), its version from its name.
  void lib(const std::string& name, const std::string& path, const std::string& missing) {
    std::string v = path.empty() ? kVersionNone : version_from_library_name(path);
    Component& lc = lock.add({"lib", name}, v.empty() ? kVersionUnknown : v);
    if (!path.empty()) {
      lc.set("library", path);
      lib_paths.push_back({lc.key(), path});
    }
    probe("lib:" + name, path.empty() ? missing : "ok");
  }

  void extra_libs() {
    for (const auto& name : o.libs) {
      LoadedLibrary l = load_library({name});
      lib(name, l.found ? l.path : "", l.error);
    }
    if (o.lib_files.empty()) return;
    LibraryCache cache;
    std::string ldconfig = find_program("ldconfig");
    for (const char* p : {"/sbin/ldconfig", "/usr/sbin/ldconfig"})
      if (ldconfig.empty()) ldconfig = find_program(p);
    if (!ldconfig.empty())
      if (ProcessResult r = run({ldconfig, "-p"}, {"LC_ALL=C"}); r.ok()) cache = parse_ldconfig_cache(r.out);
    for (const auto& name : o.lib_files)
      lib(name, find_library_file(name, cache),
          "not found: " + name + " (looked up as a file in LD_LIBRARY_PATH, the ldconfig cache, /lib and /usr/lib; not loaded)");
  }

  // The Debian package owning each library: dpkg-query -S, then its version with -W.
  void library_packages() {
    if (lib_paths.empty()) return;
    if (find_program("dpkg-query").empty()) {
      probe("packages", "not found: no dpkg-query on PATH");
      return;
    }
    std::vector<std::string> argv{"dpkg-query", "-S"};
    std::set<std::string> asked;
    for (const auto& [key, path] : lib_paths)
      for (const std::string& p : dpkg_aliases(path))
        if (asked.insert(p).second) argv.push_back(p);
    ProcessResult r = run(argv);
    if (!r.started || r.timed_out) {
      probe("packages", failed(r, "dpkg-query -S"));
      return;
    }
    auto owners = parse_dpkg_search(r.out);  // exit code 1 when some file has no package: fine
    std::set<std::string> pkgs;
    for (const auto& [path, pkg] : owners) pkgs.insert(pkg);
    std::map<std::string, std::string> versions;
    if (!pkgs.empty()) {
      std::vector<std::string> q{"dpkg-query", "-W", "-f=${binary:Package}\\t${Package}\\t${Architecture}\\t${Version}\\t${db:Status-Abbrev}\\n", "--"};
      q.insert(q.end(), pkgs.begin(), pkgs.end());
      ProcessResult w = run(q);
      if (!w.started || w.timed_out) {
        probe("packages", failed(w, "dpkg-query -W"));
        return;
      }
      for (const auto& e : parse_dpkg_query(w.out)) {
        versions[e.binary_package] = e.version;
        versions[e.package + ":" + e.arch] = e.version;
        versions[e.package] = e.version;
      }
    }
    for (const auto& [key, path] : lib_paths) {
      std::string owner;
      for (const std::string& p : dpkg_aliases(path))
        if (auto it = owners.find(p); it != owners.end() && owner.empty()) owner = it->second;
      Component* c = lock.find(key);
      if (!c || owner.empty()) continue;
      c->set("package", owner);
      if (auto v = versions.find(owner); v != versions.end()) c->set("package-version", v->second);
    }
    probe("packages", "ok");
  }

  void nccl_built_for_field() {
    Component* n = lock.find("cuda.nccl");
    if (!n || n->field_text("library").empty()) return;
    std::string b = nccl_built_for(n->field_text("library"), n->field_text("package-version"));
    if (!b.empty()) n->set("built-for-cuda", b);
  }

  void debs() {
    if (o.debs.empty()) return;
    std::vector<std::string> names(o.debs.begin(), o.debs.end());
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::map<std::string, std::string> found;
    std::string status = "ok";
    bool unknown = false;
    if (find_program("dpkg-query").empty()) {
      status = "failed: no dpkg-query on PATH (not a Debian system?)";
      unknown = true;
    } else {
      std::vector<std::string> q{"dpkg-query", "-W", "-f=${binary:Package}\\t${Package}\\t${Architecture}\\t${Version}\\t${db:Status-Abbrev}\\n", "--"};
      q.insert(q.end(), names.begin(), names.end());
      ProcessResult r = run(q);
      if (!r.started || r.timed_out) {
        status = failed(r, "dpkg-query -W");
        unknown = true;
      } else {
        for (const auto& e : parse_dpkg_query(r.out)) {
          if (!e.installed) continue;
          for (const std::string& n : {e.binary_package, e.package, e.package + ":" + e.arch}) found.emplace(n, e.version);
        }
      }
    }
    for (const auto& n : names) {
      auto it = found.find(n);
      lock.add({"deb", n}, unknown ? kVersionUnknown : (it == found.end() ? kVersionNone : it->second));
    }
    probe("deb", status);
  }

  void pythons() {
    std::vector<std::string> seen;
    for (const auto& py : o.pythons) {
      if (std::find(seen.begin(), seen.end(), py) != seen.end()) continue;
      seen.push_back(py);
      std::string pname = "python:" + py;
      auto runs = o.python_runs.find(py);
      const std::string& prog = runs == o.python_runs.end() ? py : runs->second;
      Component c{{"python", py}, kVersionNone, {}, {}, 0};
      std::string exe = find_program(prog);
      c.set("executable", exe.empty() ? kVersionNone : exe);
      if (exe.empty()) {
        lock.components.push_back(c);
        probe(pname, "not found: " + prog + (prog.find('/') == std::string::npos ? " is not on PATH" : " is not executable"));
        continue;
      }
      ProcessResult v = run({prog, "--version"});
      std::string ver = v.ok() ? parse_tool_version(v.out.empty() ? v.err : v.out) : "";
      c.version = ver.empty() ? kVersionUnknown : ver;
      lock.components.push_back(c);
      if (ver.empty()) {
        probe(pname, failed(v, prog + " --version"));
        continue;
      }
      ProcessResult r = run({prog, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"},
                            {"PIP_NO_PYTHON_VERSION_WARNING=1", "PIP_NO_INPUT=1"});
      if (!r.ok()) {
        probe(pname, failed(r, prog + " -m pip list"));
        continue;
      }
      try {
        for (const auto& [name, version] : parse_pip_list_json(r.out)) lock.add({"python", py, "packages", name}, version);
        probe(pname, "ok");
      } catch (const Error& e) {
        probe(pname, std::string("failed: ") + e.what());
      }
    }
  }

  void loaded() {
    if (!o.hash_libraries) return;
    std::string status = "ok";
    for (const auto& path : loaded_library_paths()) {
      try {
        lock.add({"loaded", path}, "sha256:" + sha256_file(path));
      } catch (const Error& e) {
        lock.add({"loaded", path}, kVersionUnknown);
        status = std::string("failed: ") + e.what();
      }
    }
    probe("loaded", status);
  }
};

}  // namespace

Lock take_snapshot(const SnapshotOptions& options) {
  Snap s{options, {}, {}};
  s.lock.kind = "snapshot";
  s.lock.header.created_by = options.created_by.empty() ? "dl-envlock " + version_string() : options.created_by;
  s.lock.header.date = utc_timestamp();
  s.lock.header.host = host_name();
  if (options.probe_stack) {
    std::string driver_cuda;
    s.system();
    s.compilers();
    s.cuda_libs(driver_cuda);
    s.driver(driver_cuda);
    s.cpu_libs();
  } else {
    s.extra_libs();
  }
  s.library_packages();
  s.nccl_built_for_field();
  s.debs();
  s.pythons();
  s.loaded();
  std::sort(s.lock.probes.begin(), s.lock.probes.end(), [](const Probe& a, const Probe& b) { return a.name < b.name; });
  seal(s.lock);
  return s.lock;
}

bool same_interpreter(const std::string& locked, const std::string& program) {
  if (locked == program) return true;
  const std::string found = find_program(program);
  return !found.empty() && (found == locked || found == find_program(locked));
}

SnapshotOptions snapshot_options_for(const Lock& lock, const std::vector<std::string>& interpreters) {
  SnapshotOptions o;
  o.hash_libraries = false;
  for (const auto& c : lock.components) {
    if (c.path.empty()) continue;
    if (c.path[0] == "deb" && c.path.size() == 2) o.debs.push_back(c.path[1]);
    if (c.path[0] == "python" && c.path.size() >= 2 &&
        std::find(o.pythons.begin(), o.pythons.end(), c.path[1]) == o.pythons.end()) {
      const std::string& locked = c.path[1];
      for (const auto& program : interpreters)
        if (same_interpreter(locked, program)) {
          o.pythons.push_back(locked);
          if (program != locked) o.python_runs[locked] = program;
          break;
        }
    }
    if (c.path[0] == "lib" && c.path.size() == 2) o.lib_files.push_back(c.path[1]);
    if (c.path[0] == "loaded") o.hash_libraries = true;
  }
  return o;
}

}  // namespace dl
