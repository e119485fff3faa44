#include "dl/env/env.hpp"

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
  SnapshotOptions so = snapshot_options_for(lr.lock);
  so.hash_libraries = so.hash_libraries && level == Level::exact;
  so.probe_timeout_s = options.probe_timeout_s;
  Lock found = take_snapshot(so);
  CompareOptions co;
  co.level = level;
  co.ignore = options.ignore;
  co.report_added = lr.lock.kind == "snapshot";
  co.compare_loaded = so.hash_libraries;
  r.report = compare_locks(lr.lock, found, co);
  r.drift = r.report.drift();
  r.breaking = r.report.breaking();
  r.table = render_drift(r.report, EnvFormat::table);
  return r;
}

}  // namespace dl
