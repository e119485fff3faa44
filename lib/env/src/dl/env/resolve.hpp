// dl-envlock resolve: constraints (env.toml) -> a pinned lock, or an explanation of why not.
//
//   python-interpreter = "/usr/bin/python3"   # whose packages python.* refers to (default python3)
//   cuda = ">=12.4,<14"                       # CUDA runtime
//   driver = ">=550"                          # NVIDIA driver
//   cudnn = ">=9"   nccl = "*"   cublas = "*"
//   deb.libopenblas-dev = "*"                 # Debian packages (dpkg ordering)
//   python.numpy = ">=1.24"                   # Python packages (PEP 440)
//
// Candidates come from a CandidateSource: what is installed and what apt offers (SystemCandidates),
// or a fixed list (FixedCandidates, for tests and what-if questions). Among the admitted candidates
// the newest wins (as pip-tools does), unless prefer_installed. Compatibility rules enforced between
// constrained components: the driver must be at least the minimum for the CUDA major
// (min_driver_for_cuda), cuDNN and NCCL must be built for the CUDA major in use, cuBLAS's major
// must be the CUDA major.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dl/env/lock.hpp"
#include "dl/env/versions.hpp"

namespace dl {

struct ConstraintEntry {
  std::string key;   // "cuda" | "driver" | "cudnn" | "nccl" | "cublas" | "deb.<package>" | "python.<package>"
  std::string spec;  // as written: ">=12.4,<14"
  VersionConstraint constraint;
  int line = 0;
};

struct Constraints {
  std::string source = "env.toml";  // file name used in messages
  std::string python = "python3";   // interpreter whose packages python.* constrains
  int python_line = 0;              // the line of python-interpreter; 0: the file sets none
  std::vector<ConstraintEntry> entries;
  const ConstraintEntry* find(std::string_view key) const;
  // "env.toml line 3"
  std::string where(const ConstraintEntry& e) const;
};

// Keys and their schemes: cuda/driver/cudnn/nccl/cublas numeric, deb.* dpkg, python.* PEP 440.
// Throws dl::Error(usage) as "<file>:<line>: <key>: <what is wrong and what to write instead>".
// (Implemented in lock_read.cpp, the TOML-reading translation unit.)
Constraints parse_constraints(std::string_view text, std::string_view source_name);
Constraints read_constraints(const std::filesystem::path& path);

struct Candidate {
  std::string version;          // in the key's scheme: "13.0", "9.19.0", "0.3.21+ds-4", "1.26.4"
  std::string origin;           // "installed", "apt bookworm-security/main", ...
  std::string package;          // the Debian package that provides it ("" when not from apt)
  std::string package_version;  // that package's full version, for apt-get install pkg=version
  std::string built_for_cuda;   // cuDNN/NCCL: the CUDA version the build is for ("13.0"); "" unknown
  bool installed = false;
  std::string label() const;  // "13.0 (installed)", "3.0.22-1~deb12u2 (apt bookworm-security/main)"
};

class CandidateSource {
 public:
  virtual ~CandidateSource() = default;
  // Every version of `key` the machine has or can install (any order; duplicates are merged).
  virtual std::vector<Candidate> candidates(const std::string& key) = 0;
};

// Fixed candidates, for tests and for asking "would this resolve on that machine?".
class FixedCandidates : public CandidateSource {
 public:
  void add(const std::string& key, Candidate c) { map_[key].push_back(std::move(c)); }
  std::vector<Candidate> candidates(const std::string& key) override;

 private:
  std::map<std::string, std::vector<Candidate>> map_;
};

// The real machine: installed versions from a snapshot (CUDA libraries, driver, Python packages
// of the interpreter, dpkg), and what apt offers from `apt-cache policy` (each query run without a
// shell and with a timeout). CUDA stack packages apt may offer: driver nvidia-driver, cuda-drivers;
// cuda nvidia-cuda-toolkit, cuda-toolkit; cudnn cudnn9-cuda-13, cudnn9-cuda-12, cudnn9-cuda-11;
// nccl libnccl2 (built-for from "+cudaX.Y" in its version); cublas libcublas13, libcublas12.
struct SystemCandidateOptions {
  double probe_timeout_s = 10;
  std::string python = "python3";
};
class SystemCandidates : public CandidateSource {
 public:
  explicit SystemCandidates(SystemCandidateOptions options);
  ~SystemCandidates() override;
  std::vector<Candidate> candidates(const std::string& key) override;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// `apt-cache policy PKG...` output (LC_ALL=C).
struct AptPolicyVersion {
  std::string version;
  bool installed = false;            // marked *** (or listed from /var/lib/dpkg/status)
  std::vector<std::string> origins;  // "bookworm-security/main", "/var/lib/dpkg/status"
};
struct AptPolicy {
  std::string package;
  std::string installed;  // "" when "(none)"
  std::string candidate;
  std::vector<AptPolicyVersion> versions;
};
std::vector<AptPolicy> parse_apt_policy(std::string_view text);
// Runs apt-cache policy; an empty list when apt-cache is missing or fails (logged as a warning).
std::vector<AptPolicy> query_apt_policy(const std::vector<std::string>& packages, double timeout_s);

struct ResolveOptions {
  bool prefer_installed = false;  // take an installed version that satisfies over a newer one
  std::string created_by;  // default "dl-envlock <version>"
};

struct ResolveResult {
  bool ok = false;
  Lock lock;                // kind "resolved", sealed, when ok
  std::string explanation;  // when !ok: every unsatisfied constraint, the candidates tried, and why each failed
};
ResolveResult resolve(const Constraints& constraints, CandidateSource& source, const ResolveOptions& options = {});

// Where a constraint key lands in a lock: cuda -> cuda.runtime, driver -> driver, cudnn ->
// cuda.cudnn, deb.X -> deb.X, python.X -> python."<interpreter>".packages.X.
std::vector<std::string> lock_path_for(const std::string& key, const std::string& python);

}  // namespace dl
