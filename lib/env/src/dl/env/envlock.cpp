#include "dl/env/envlock.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/env/compare.hpp"
#include "dl/env/env.hpp"
#include "dl/env/lock.hpp"
#include "dl/env/resolve.hpp"
#include "dl/env/snapshot.hpp"
#include "dl/env/sync.hpp"
#include "dl/io/atomic_file.hpp"

namespace dl {

namespace {

nlohmann::ordered_json lock_json(const Lock& lock) {
  nlohmann::ordered_json j;
  j["header"] = {{"format", lock.header.format},
                 {"created-by", lock.header.created_by},
                 {"date", lock.header.date},
                 {"host", lock.header.host},
                 {"content-hash", lock.header.content_hash}};
  j["kind"] = lock.kind;
  nlohmann::ordered_json comps = nlohmann::ordered_json::array();
  for (const auto& c : lock.components) {
    nlohmann::ordered_json o;
    o["component"] = c.key();
    o["version"] = c.version;
    o["scheme"] = scheme_name(scheme_for(c.path));
    for (const auto& f : c.fields) {
      if (auto* s = std::get_if<std::string>(&f.value)) o[f.key] = *s;
      else o[f.key] = std::get<int64_t>(f.value);
    }
    comps.push_back(o);
  }
  j["components"] = comps;
  nlohmann::ordered_json probes = nlohmann::ordered_json::object();
  for (const auto& p : lock.probes) probes[p.name] = p.status;
  j["probes"] = probes;
  return j;
}

// One row per component; failed probes and the counts as notes.
Table lock_table(const Lock& lock) {
  Table t({{"component", "component", false}, {"version", "version", false}, {"details", "details", false}});
  for (const auto& c : lock.components) {
    std::string details;
    for (const auto& f2 : c.fields) {
      std::string v = std::holds_alternative<std::string>(f2.value) ? std::get<std::string>(f2.value)
                                                                    : std::to_string(std::get<int64_t>(f2.value));
      details += (details.empty() ? "" : ", ") + f2.key + "=" + v;
    }
    std::string shown = c.version;
    if (scheme_for(c.path) == Scheme::set) shown = str(std::count(c.version.begin(), c.version.end(), ' ') + 1, " flags");
    t.add_row({Cell::str(c.key()), Cell{c.version, shown}, Cell::str(details)});
  }
  size_t failed = 0;
  for (const auto& p : lock.probes)
    if (p.status.rfind("ok", 0) != 0) {
      t.add_note("# probe " + p.name + ": " + p.status);
      ++failed;
    }
  t.add_note(str("# ", lock.components.size(), " components, ", lock.probes.size(), " probes (", failed, " not ok)"));
  return t;
}

std::string render_lock(const Lock& lock, EnvFormat f) {
  if (const auto rows = table_format(f)) return lock_table(lock).render(*rows);
  return f == EnvFormat::json ? lock_json(lock).dump(2) + "\n" : lock_to_toml(lock);
}

void warn_hash(const std::string& path, const LockRead& lr) {
  if (lr.hash_ok) return;
  std::string why = lr.lock.header.content_hash.empty()
                        ? "has no header.content-hash"
                        : "content does not match its header.content-hash: it was edited after it was written";
  log_warn(path + ": " + why + "; using its content as it is");
}

// The packages of each interpreter the lock names that may run: one --python names (else python3
// on PATH) is it. Interpreters left out were not run, or their pip list failed.
PythonInstalled installed_python_packages(const Lock& lock, const std::vector<std::string>& pythons, double timeout_s) {
  const SnapshotOptions named = snapshot_options_for(lock, pythons.empty() ? std::vector<std::string>{"python3"} : pythons);
  SnapshotOptions so;
  so.probe_stack = false;
  so.hash_libraries = false;
  so.pythons = named.pythons;
  so.python_runs = named.python_runs;
  so.probe_timeout_s = timeout_s;
  const Lock found = take_snapshot(so);
  PythonInstalled out;
  for (const auto& py : so.pythons) {
    if (found.probe("python:" + py) != "ok") continue;
    auto& packages = out[py];
    for (const auto& c : found.components)
      if (c.path.size() == 4 && c.path[0] == "python" && c.path[1] == py && c.path[2] == "packages")
        packages[c.path[3]] = c.version;
  }
  return out;
}

}  // namespace

int envlock_snapshot(const SnapshotArgs& a, std::ostream& out) {
  EnvFormat fmt = parse_env_format(a.format.empty() ? "toml" : a.format);
  if (a.probe_timeout_s <= 0) throw_option_error("{probe_timeout_s} must be more than 0 seconds");
  SnapshotOptions so;
  so.pythons = a.pythons;
  so.debs = a.debs;
  so.libs = a.libs;
  so.probe_timeout_s = a.probe_timeout_s;
  so.hash_libraries = a.hash_libraries;
  // Refused before probing: a device, a folder, an interpreter it runs (README "Outputs").
  const std::vector<std::filesystem::path> inputs(a.pythons.begin(), a.pythons.end());
  const OutputTarget target = a.output.empty() ? OutputTarget{} : output_target(a.output, inputs);
  Lock lock = take_snapshot(so);
  if (!a.output.empty()) {
    write_output(target, lock_to_toml(lock));
    size_t bad = 0;
    for (const auto& p : lock.probes) bad += p.status.rfind("failed", 0) == 0;
    log_info(str("wrote ", a.output, ": ", lock.components.size(), " components",
                 bad ? str(", ", bad, " probe(s) failed (see [probes])") : std::string()));
    if (!a.format.empty()) out << render_lock(lock, fmt);
  } else {
    out << render_lock(lock, fmt);
  }
  return kExitOk;
}

int envlock_check(const CheckArgs& a, std::ostream& out) {
  Level level = parse_level(a.level);
  EnvFormat fmt = parse_env_format(a.format);
  if (a.probe_timeout_s <= 0) throw_option_error("{probe_timeout_s} must be more than 0 seconds");
  EnvCheckOptions o;
  o.probe_timeout_s = a.probe_timeout_s;
  o.ignore = a.ignore;
  o.pythons = a.pythons;
  o.strict_hash = a.strict_hash;
  EnvCheckResult r = check_env_lock(a.lock, level, o);
  out << render_drift(r.report, fmt);
  if (r.breaking) log_warn("breaking drift: this machine's CUDA stack or driver is not the one " + a.lock + " pins");
  return r.drift ? kExitFailure : kExitOk;
}

int envlock_diff(const DiffArgs& a, std::ostream& out) {
  Level level = parse_level(a.level);
  EnvFormat fmt = parse_env_format(a.format);
  LockRead la = read_lock(a.a);
  LockRead lb = read_lock(a.b);
  warn_hash(a.a, la);
  warn_hash(a.b, lb);
  CompareOptions co;
  co.level = level;
  co.ignore = a.ignore;
  co.report_added = true;
  co.compare_loaded = true;
  DriftReport rep = compare_locks(la.lock, lb.lock, co);
  out << render_drift(rep, fmt);
  return rep.drift() ? kExitFailure : kExitOk;
}

int envlock_resolve(const ResolveArgs& a, std::ostream& out, std::ostream& err) {
  EnvFormat fmt = parse_env_format(a.format.empty() ? "toml" : a.format);
  if (a.probe_timeout_s <= 0) throw_option_error("{probe_timeout_s} must be more than 0 seconds");
  const std::vector<std::filesystem::path> inputs{a.constraints, a.python};
  const OutputTarget target = a.output.empty() ? OutputTarget{} : output_target(a.output, inputs);
  Constraints c = read_constraints(a.constraints);
  if (!a.python.empty()) c.python = a.python;
  else if (c.python_line && !same_interpreter(c.python, "python3") &&
           std::any_of(c.entries.begin(), c.entries.end(), [](const ConstraintEntry& e) { return e.key.rfind("python.", 0) == 0; }))
    // A constraints file is shared like a lock: the interpreter it names runs only when named again.
    throw_usage(a.constraints, ":", c.python_line, ": python-interpreter \"", c.python,
                "\" is not run: it is named only by this file and is not python3 on PATH (pass --python ", c.python,
                " to resolve against it)");
  SystemCandidateOptions so;
  so.probe_timeout_s = a.probe_timeout_s;
  so.python = c.python;
  SystemCandidates src(so);
  ResolveOptions ro;
  ro.prefer_installed = a.prefer_installed;
  ResolveResult r = resolve(c, src, ro);
  if (!r.ok) {
    out.flush();
    err << r.explanation;
    err.flush();
    return kExitFailure;
  }
  if (!a.output.empty()) {
    write_output(target, lock_to_toml(r.lock));
    log_info(str("wrote ", a.output, ": ", r.lock.components.size(), " pinned components"));
    if (!a.format.empty()) out << render_lock(r.lock, fmt);
  } else {
    out << render_lock(r.lock, fmt);
  }
  return kExitOk;
}

int envlock_sync(const SyncArgs& a, std::ostream& out) {
  EnvFormat fmt = parse_env_format(a.format);
  if (a.dry_run && a.yes) throw_option_error("{dry_run} and {yes} contradict each other: choose one");
  LockRead lr = read_lock(a.lock);
  warn_hash(a.lock, lr);
  check_sync_lock(lr.lock, a.lock);  // hostile names are refused before dpkg-query sees them
  auto installed = installed_deb_versions(sync_packages(lr.lock), a.probe_timeout_s);
  SyncPlan plan = plan_sync(lr.lock, installed, ::geteuid() == 0, a.lock,
                            installed_python_packages(lr.lock, a.pythons, a.probe_timeout_s));
  out << render_sync_plan(plan, a.lock, fmt);
  out.flush();
  if (a.dry_run || plan.apt_argv.empty()) return kExitOk;
  if (!a.yes) {
    log_info("nothing was run: add --yes to run the apt-get command above (--dry-run only prints it)");
    return kExitOk;
  }
  int rc = run_sync_plan(plan);
  if (rc != 0) {
    log_warn(str("apt-get exited with code ", rc));
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace dl
