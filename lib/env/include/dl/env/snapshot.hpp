// dl-envlock snapshot: probe this machine's stack into a Lock.
//
// Probes (each subprocess without a shell and with options.probe_timeout_s; a probe that fails or
// hangs is killed and recorded under [probes] as "failed: <reason>", its components as "unknown",
// and the snapshot goes on):
//   system   /etc/os-release, uname, /proc/cpuinfo (model, flags)
//   cxx      $CXX or c++ --version          cmake   cmake --version
//   nvcc     nvcc --version ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin)
//   cudart   cudaRuntimeGetVersion, cudaDriverGetVersion (dlopen)
//   cudnn    cudnnGetVersion, cudnnGetCudartVersion;  cublas  cublasGetProperty;  nccl  ncclGetVersion
//   driver   nvidia-smi (killable, so first), else NVML (dlopen), else /proc/driver/nvidia/version;
//            "none" when none of them exists; with it each GPU's name, memory, compute capability
//   openblas openblas_get_config;  gloo  libgloo.so (version from the file name)
//   packages dpkg-query -S / -W: the Debian package owning each library above
//   lib:NAME each --lib, dlopen'ed; each of lib_files found as a file (native.hpp), never loaded
//   deb      dpkg-query -W for each --deb
//   python:PATH  PATH --version and PATH -m pip list --format json
//   loaded   sha256 of every shared library mapped into this process (dl_iterate_phdr)
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dl/env/lock.hpp"

namespace dl {

// What a snapshot runs and loads is what these options name, and the options come from the
// command line or from the tool itself, never from a lock (snapshot_options_for says how).
struct SnapshotOptions {
  std::vector<std::string> pythons;  // interpreters to run for their packages, recorded under their name
  // An interpreter of `pythons` recorded under one name and run as another: a lock's key ->
  // the same interpreter as the user (--python) or PATH names it.
  std::map<std::string, std::string> python_runs;
  std::vector<std::string> debs;       // Debian packages to record
  std::vector<std::string> libs;       // extra shared libraries to load and record ("libz.so.1")
  std::vector<std::string> lib_files;  // libraries to find as files and record, never loaded
  double probe_timeout_s = 10;
  bool probe_stack = true;           // system, compilers, CUDA, driver, GPUs, BLAS, Gloo (false: only
                                     // the debs, pythons, libs and hashes asked for)
  bool hash_libraries = true;        // [loaded]: sha256 of every loaded shared library
  std::string created_by;            // header.created-by; default "dl-envlock <version>"
};

// Never throws for a failed probe (it is recorded); the lock comes back sealed.
Lock take_snapshot(const SnapshotOptions& options);

// The options that probe what `lock` recorded without running or loading anything it names (a
// lock is shared like a requirements file): its deb packages (names for dpkg-query), its [lib]
// entries as lib_files, library hashes when it has [loaded], and each interpreter it names that
// one of `interpreters` is (same_interpreter): those the user named (--python), else python3 on
// PATH. An interpreter of the lock that none of them is stays out of `pythons`.
SnapshotOptions snapshot_options_for(const Lock& lock, const std::vector<std::string>& interpreters);

// Whether running `program` (named by the user, or found by the tool) runs the interpreter a lock
// recorded as `locked`, decided on the names: the same text, or the same file once PATH has been
// searched for either (which stats files; it runs nothing).
bool same_interpreter(const std::string& locked, const std::string& program);

// ---- parsers for probe output (exposed for tests) ----
struct OsRelease {
  std::string id, version_id, pretty_name;
};
OsRelease parse_os_release(std::string_view text);

struct CpuInfo {
  std::string model;
  std::vector<std::string> flags;  // sorted, unique
};
CpuInfo parse_cpuinfo(std::string_view text);

std::string parse_nvcc_version(std::string_view text);  // "Cuda compilation tools, release 13.0, V13.0.88" -> "13.0.88"
std::string parse_tool_version(std::string_view text);  // first dotted number of the first line ("3.25.1")

struct SmiGpu {
  std::string name;
  int64_t memory_mib = -1;
  std::string compute_capability;
  std::string driver;
};
// nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version
//            --format=csv,noheader,nounits
std::vector<SmiGpu> parse_nvidia_smi_csv(std::string_view text);
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ..." -> "580.95.05"
std::string parse_proc_driver_version(std::string_view text);

// pip list --format json -> (normalised name, version), sorted by name. Throws dl::Error(runtime)
// on malformed output.
std::vector<std::pair<std::string, std::string>> parse_pip_list_json(std::string_view text);

// dpkg-query -S output -> file path -> owning package ("libopenblas0-pthread:amd64").
std::map<std::string, std::string> parse_dpkg_search(std::string_view text);

struct DpkgEntry {
  std::string binary_package;  // ${binary:Package}: "libssl3:amd64" for Multi-Arch: same packages
  std::string package, arch, version;
  bool installed = false;  // status "ii"
};
// dpkg-query -W -f='${binary:Package}\t${Package}\t${Architecture}\t${Version}\t${db:Status-Abbrev}\n'
std::vector<DpkgEntry> parse_dpkg_query(std::string_view text);

// The CUDA major a NCCL build is for: "+cudaX.Y" in its Debian version, else a pip wheel's
// nvidia_nccl_cuNN dist-info next to the library; "" when unknown.
std::string nccl_built_for(const std::string& library_path, const std::string& package_version);

}  // namespace dl
