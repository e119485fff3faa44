// dl/env for other tools: what dl-train calls to record and to enforce the environment.
//
//   dl::write_env_snapshot(run_dir / "env.lock");                 // every run directory
//   auto r = dl::check_env_lock("env.lock", dl::Level::major);    // dl-train --env-lock env.lock
//   if (r.breaking) { std::cerr << r.table; dl::throw_usage(...); } // exit 2 with the table
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "dl/env/compare.hpp"
#include "dl/env/lock.hpp"

namespace dl {

struct EnvSnapshotOptions {
  double probe_timeout_s = 3;        // short: a hung nvidia-smi must not hold up training for long
  bool hash_libraries = true;        // [loaded]: sha256 of every library loaded in this process
  std::vector<std::string> pythons;  // pip listings only when asked (about a second each)
  std::vector<std::string> debs;
  std::string created_by;            // default "dl-envlock <version>"; dl-train passes "dl-train <version>"
};

// Probes this machine and writes the lock to `file` atomically. Probe failures are recorded in the
// file ([probes]), never thrown; throws dl::Error(runtime) only when the file cannot be written.
void write_env_snapshot(const std::filesystem::path& file, const EnvSnapshotOptions& options = {});

struct EnvCheckOptions {
  double probe_timeout_s = 3;
  // Interpreters that may run for the lock's python.* entries (dl-envlock check --python); empty:
  // python3 as PATH finds it. An interpreter the lock names that none of them is, is never run
  // (a lock is shared like a requirements file): its row says "not run" and how to compare it.
  std::vector<std::string> pythons;
  std::vector<std::string> ignore;  // --ignore patterns (see key_ignored)
  bool strict_hash = false;         // a lock whose content-hash does not match is dl::Error(usage)
};

struct EnvCheckResult {
  DriftReport report;
  bool drift = false;     // something differs at the level
  bool breaking = false;  // a CUDA/driver major change, or a driver below CUDA's minimum
  bool hash_ok = true;    // false: the lock was edited after it was written (a warning is logged)
  std::string table;      // the drift table (render_drift(report, EnvFormat::table))
};

// Reads `lock` (dl::Error(usage) naming file:line when it is missing or invalid), probes what it
// recorded on this machine, and compares. Library hashes are only probed at Level::exact. Runs
// and loads nothing the lock names: its [lib] entries are looked up as files, its interpreters
// compared with options.pythons by name (snapshot_options_for).
EnvCheckResult check_env_lock(const std::filesystem::path& lock, Level level = Level::major,
                              const EnvCheckOptions& options = {});

}  // namespace dl
