#include "dl/env/compare.hpp"

#include <fnmatch.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

Level parse_level(const std::string& s) {
  if (auto l = parse_choice<Level>(s)) return *l;
  throw_usage("unknown --level '", s, "' (use major, minor, patch or exact)");
}

std::string level_name(Level l) { return std::string(choice_name(l)); }

bool counts_at(Magnitude m, Level l) {
  switch (m) {
    case Magnitude::none: return false;
    case Magnitude::unknown:
    case Magnitude::major: return true;
    case Magnitude::minor: return l != Level::major;
    case Magnitude::patch: return l == Level::patch || l == Level::exact;
    case Magnitude::build: return l == Level::exact;
  }
  return true;
}

EnvFormat parse_env_format(const std::string& s) {
  if (auto f = parse_choice<EnvFormat>(s)) return *f;
  throw_usage("unknown --format '", s, "' (use table, json, jsonl, csv, md or toml)");
}

std::optional<OutputFormat> table_format(EnvFormat f) {
  switch (f) {
    case EnvFormat::table: return OutputFormat::table;
    case EnvFormat::jsonl: return OutputFormat::jsonl;
    case EnvFormat::csv: return OutputFormat::csv;
    case EnvFormat::md: return OutputFormat::md;
    case EnvFormat::json:
    case EnvFormat::toml: return std::nullopt;
  }
  return std::nullopt;
}

bool DriftReport::breaking() const {
  for (const auto& r : rows)
    if (r.breaking) return true;
  return false;
}

std::string probe_for(const std::vector<std::string>& path) {
  if (path.empty()) return "";
  const std::string& top = path[0];
  std::string sub = path.size() > 1 ? path[1] : "";
  if (top == "system") {
    if (sub == "cxx" || sub == "cmake") return sub;
    return "system";
  }
  if (top == "cuda") {
    if (sub == "toolkit") return "nvcc";
    if (sub == "runtime") return "cudart";
    return sub;
  }
  if (top == "driver" || top == "gpu") return "driver";
  if (top == "blas") return sub;
  if (top == "comm") return sub;
  if (top == "lib") return "lib:" + sub;
  if (top == "python") return "python:" + sub;
  return top;  // deb, loaded
}

bool key_ignored(const Component& c, const std::vector<std::string>& patterns) {
  if (patterns.empty()) return false;
  std::vector<std::string> forms;
  for (size_t n = 1; n <= c.path.size(); ++n) {
    std::vector<std::string> prefix(c.path.begin(), c.path.begin() + static_cast<long>(n));
    forms.push_back(toml_key(prefix));
    forms.push_back(plain_key(prefix));
  }
  for (const auto& p : patterns)
    for (const auto& f : forms)
      if (fnmatch(p.c_str(), f.c_str(), 0) == 0) return true;
  return false;
}

namespace {

std::string set_note(const std::string& locked, const std::string& found) {
  const auto locked_words = split_words(locked), found_words = split_words(found);
  const std::set<std::string> a(locked_words.begin(), locked_words.end()), b(found_words.begin(), found_words.end());
  std::string missing, added;
  size_t nm = 0, na = 0;
  for (const auto& w : a)
    if (!b.count(w) && nm++ < 8) missing += (missing.empty() ? "" : " ") + w;
  for (const auto& w : b)
    if (!a.count(w) && na++ < 8) added += (added.empty() ? "" : " ") + w;
  std::string note;
  if (nm) note += "missing: " + missing + (nm > 8 ? " ..." : "");
  if (na) note += std::string(note.empty() ? "" : "; ") + "new: " + added + (na > 8 ? " ..." : "");
  return note;
}

// What to show for a long value in a table cell.
std::string cell_text(Scheme scheme, const std::string& v) {
  if (scheme == Scheme::set) {
    return std::to_string(split_words(v).size()) + " flags";
  }
  if (scheme == Scheme::hash && v.size() > 19 && v.rfind("sha256:", 0) == 0) return v.substr(0, 19) + "...";
  return v;
}

bool stack_component(const std::vector<std::string>& path) {
  return !path.empty() && (path[0] == "cuda" || path[0] == "driver");
}

}  // namespace

DriftReport compare_locks(const Lock& locked, const Lock& found, const CompareOptions& o) {
  DriftReport rep;
  rep.level = o.level;
  std::map<std::vector<std::string>, const Component*> found_by_path, locked_by_path;
  for (const auto& c : found.components) found_by_path[c.path] = &c;
  for (const auto& c : locked.components) locked_by_path[c.path] = &c;
  const Component* found_cuda = found.find("cuda.runtime");

  auto consider = [&](const Component* l, const Component* f) {
    const Component& any = l ? *l : *f;
    if (!o.compare_loaded && !any.path.empty() && any.path[0] == "loaded") return;
    if (key_ignored(any, o.ignore)) {
      ++rep.ignored;
      return;
    }
    ++rep.compared;
    Scheme scheme = scheme_for(any.path);
    std::string lv = l ? l->version : kVersionAbsent;
    std::string fv = f ? f->version : kVersionAbsent;
    Magnitude m = change_magnitude(scheme, lv, fv);
    if (m == Magnitude::none) return;
    DriftRow row;
    row.component = any.key();
    row.locked = lv;
    row.found = fv;
    row.magnitude = m;
    row.scheme = scheme;
    if (!l) row.note = "new (not in the lock)";
    else if (!f) row.note = "missing";
    else if (fv == kVersionNone) row.note = "not installed";
    else if (lv == kVersionNone) row.note = "installed since";
    else if (m == Magnitude::unknown) {
      const Lock& side = fv == kVersionUnknown ? found : locked;
      std::string status = side.probe(probe_for(any.path));
      if (status.rfind("failed: ", 0) == 0) status = status.substr(8);
      if (status.rfind("not run: ", 0) == 0) row.note = status;  // check runs nothing a lock names
      else row.note = "probe failed" + (status.empty() ? std::string() : ": " + status);
    } else if (scheme == Scheme::set) {
      row.note = set_note(lv, fv);
    } else if (scheme == Scheme::hash) {
      row.note = "file changed";
    } else if (scheme == Scheme::text) {
      row.note = "changed";
    } else {
      try {
        row.note = compare_versions(scheme, fv, lv) > 0 ? "upgrade" : "downgrade";
      } catch (const Error&) {
        row.note = "changed";
      }
    }
    row.breaking = stack_component(any.path) && m == Magnitude::major;
    // The driver must be new enough for the CUDA runtime found with it (REFERENCE.md).
    if (any.path == std::vector<std::string>{"driver"} && f && found_cuda) {
      auto min = min_driver_for_cuda(found_cuda->version);
      if (min && fv != kVersionUnknown && fv != kVersionAbsent) {
        bool below = fv == kVersionNone || numeric_compare(fv, *min) < 0;
        if (below && fv != kVersionNone) {
          row.breaking = true;
          row.note += "; below the minimum " + *min + " for CUDA " + found_cuda->version;
        }
      }
    }
    row.severity = row.breaking ? "breaking" : magnitude_name(m);
    if (!row.breaking && !counts_at(m, o.level)) {
      ++rep.below_level;
      return;
    }
    rep.rows.push_back(std::move(row));
  };

  for (const auto& c : locked.components) {
    auto it = found_by_path.find(c.path);
    consider(&c, it == found_by_path.end() ? nullptr : it->second);
  }
  if (o.report_added)
    for (const auto& c : found.components)
      if (!locked_by_path.count(c.path)) consider(nullptr, &c);
  return rep;
}

Table drift_table(const DriftReport& rep) {
  Table out({{"component", "component", false},
             {"locked", "locked", false},
             {"found", "found", false},
             {"severity", "severity", false},
             {"note", "note", false}});
  for (const auto& r : rep.rows)
    out.add_row({Cell::str(r.component), Cell{r.locked, cell_text(r.scheme, r.locked)},
                 Cell{r.found, cell_text(r.scheme, r.found)}, Cell::str(r.severity), Cell::str(r.note)});
  std::string summary = str(rep.compared, " components compared at level ", level_name(rep.level), ": ");
  if (rep.rows.empty()) summary += "no drift";
  else summary += str(rep.rows.size(), " differ", rep.breaking() ? " (breaking)" : "");
  if (rep.below_level) summary += str("; ", rep.below_level, " smaller differences not counted at this level");
  if (rep.ignored) summary += str("; ", rep.ignored, " ignored");
  out.add_note("# " + summary);
  return out;
}

std::string render_drift(const DriftReport& rep, EnvFormat format) {
  if (const auto rows = table_format(format)) return drift_table(rep).render(*rows);
  switch (format) {
    case EnvFormat::json: {
      nlohmann::ordered_json j;
      j["level"] = level_name(rep.level);
      j["drift"] = rep.drift();
      j["breaking"] = rep.breaking();
      j["compared"] = rep.compared;
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const auto& r : rep.rows) {
        nlohmann::ordered_json o;
        o["component"] = r.component;
        o["locked"] = r.locked;
        o["found"] = r.found;
        o["severity"] = r.severity;
        o["breaking"] = r.breaking;
        o["note"] = r.note;
        rows.push_back(o);
      }
      j["rows"] = rows;
      return j.dump(2) + "\n";
    }
    case EnvFormat::toml: {
      std::string out = "level = " + toml_string(level_name(rep.level)) + "\n";
      out += std::string("drift = ") + (rep.drift() ? "true" : "false") + "\n";
      out += std::string("breaking = ") + (rep.breaking() ? "true" : "false") + "\n";
      out += "compared = " + std::to_string(rep.compared) + "\n";
      for (const auto& r : rep.rows) {
        out += "\n[[drift]]\n";
        out += "component = " + toml_string(r.component) + "\n";
        out += "locked = " + toml_string(r.locked) + "\n";
        out += "found = " + toml_string(r.found) + "\n";
        out += "severity = " + toml_string(r.severity) + "\n";
        out += "note = " + toml_string(r.note) + "\n";
      }
      return out;
    }
    default: return "";  // the table formats, above
  }
}

}  // namespace dl
