#include "dl/env/env.hpp"

#include <algorithm>

#include "dl/cli/app.hpp"
#include "dl/core/error.hpp"
#include "dl/env/snapshot.hpp"

namespace dl {

void write_env_snapshot(const std::filesystem::path& file, const EnvSnapshotOptions& options) {
  SnapshotOptions so;
  so.probe_timeout_s = options.probe_timeout_s;
  so.hash_libraries = options.hash_libraries;
  so.pythons = options.pythons;
  so.debs = options.debs;
  so.created_by = options.created_by;
  Lock lock = take_snapshot(so);
  write_lock(file, lock);
}

namespace {

// For each interpreter `locked` names that `so` does not run: a found row "unknown" whose probe
// says why, and its packages left out of the comparison (one row, not one per package).
void mark_not_run(Lock& locked, Lock& found, const SnapshotOptions& so) {
  std::vector<std::string> not_run;
  for (const auto& c : locked.components)
    if (c.path.size() == 2 && c.path[0] == "python" &&
        std::find(so.pythons.begin(), so.pythons.end(), c.path[1]) == so.pythons.end())
      not_run.push_back(c.path[1]);
  for (const auto& py : not_run) {
    auto packages = std::erase_if(locked.components, [&](const Component& c) {
      return c.path.size() == 4 && c.path[0] == "python" && c.path[1] == py && c.path[2] == "packages";
    });
    found.add({"python", py}, kVersionUnknown);
    found.set_probe("python:" + py, str("not run: ", py, " is named only by the lock",
                                        packages ? str("; its ", packages, " packages not compared") : std::string(),
                                        " (dl-envlock check --python ", py, " runs it)"));
  }
}

}  // namespace

EnvCheckResult check_env_lock(const std::filesystem::path& lock_path, Level level, const EnvCheckOptions& options) {
  LockRead lr = read_lock(lock_path);
  EnvCheckResult r;
  r.hash_ok = lr.hash_ok;
  if (!lr.hash_ok) {
    std::string why = lr.lock.header.content_hash.empty()
                          ? "has no header.content-hash"
                          : "content does not match its header.content-hash (" + lr.lock.header.content_hash +
                                "; the content hashes to " + lr.computed_hash + "): it was edited after it was written";
    if (options.strict_hash)
      throw_usage(lock_path.string(), ": ", why, " (regenerate it with dl-envlock snapshot, or drop --strict)");
    log_warn(lock_path.string() + ": " + why + "; comparing its content as it is");
  }
  SnapshotOptions so = snapshot_options_for(lr.lock, options.pythons.empty() ? std::vector<std::string>{"python3"} : options.pythons);
  for (const auto& py : options.pythons)
    if (std::none_of(so.pythons.begin(), so.pythons.end(), [&](const std::string& l) { return same_interpreter(l, py); }))
      log_warn(lock_path.string() + " names no interpreter that " + py + " is (--python): it is not run");
  so.hash_libraries = so.hash_libraries && level == Level::exact;
  so.probe_timeout_s = options.probe_timeout_s;
  Lock found = take_snapshot(so);
  Lock locked = lr.lock;
  mark_not_run(locked, found, so);
  CompareOptions co;
  co.level = level;
  co.ignore = options.ignore;
  co.report_added = lr.lock.kind == "snapshot";
  co.compare_loaded = so.hash_libraries;
  r.report = compare_locks(locked, found, co);
  r.drift = r.report.drift();
  r.breaking = r.report.breaking();
  r.table = render_drift(r.report, EnvFormat::table);
  return r;
}

}  // namespace dl
