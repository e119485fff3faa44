// Drift between a lock and a machine (check) or between two locks (diff): one row per component
// that differs, with how much (major/minor/patch/build, see change_magnitude) and whether it is
// breaking: a major change (or appearance/disappearance) of any cuda.* component or the driver, or
// a driver below the minimum for the CUDA runtime found next to it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dl/cli/table.hpp"
#include "dl/env/lock.hpp"

namespace dl {

// --level: which differences count. major: major changes only; minor: and minor; patch (the
// default of check): and patch; exact: every difference, including library hashes and builds.
// A failed probe ("unknown") and a breaking change count at every level.
enum class Level { major, minor, patch, exact };
inline constexpr std::string_view kLevelNames[] = {"major", "minor", "patch", "exact"};
constexpr std::span<const std::string_view> choice_names(Level) { return kLevelNames; }
Level parse_level(const std::string& s);  // throws dl::Error(usage) listing the choices
std::string level_name(Level l);
bool counts_at(Magnitude m, Level l);

// --format for dl-envlock: every tool's five (table | json | jsonl | csv | md) and toml, a lock's
// own format. json is one document (a lock, a drift report, a sync plan); jsonl, csv and md are
// the rows of the table format, rendered by the shared Table.
enum class EnvFormat { table, json, jsonl, csv, md, toml };
inline constexpr std::string_view kEnvFormatNames[] = {"table", "json", "jsonl", "csv", "md", "toml"};
constexpr std::span<const std::string_view> choice_names(EnvFormat) { return kEnvFormatNames; }
EnvFormat parse_env_format(const std::string& s);  // throws dl::Error(usage) listing the choices
// The Table rendering of table, jsonl, csv and md; nullopt for json and toml (documents).
std::optional<OutputFormat> table_format(EnvFormat f);

struct DriftRow {
  std::string component;  // TOML key: "cuda.cudnn"
  std::string locked;     // "(absent)" when the lock does not have it
  std::string found;      // "(absent)" when the machine (or the second lock) does not have it
  Magnitude magnitude = Magnitude::none;
  Scheme scheme = Scheme::numeric;
  bool breaking = false;
  std::string severity;  // "breaking" or the magnitude's name
  std::string note;      // "upgrade", "downgrade", "not installed", "new", "probe failed: ...", a rule
};

struct DriftReport {
  std::vector<DriftRow> rows;  // only differences that count at the level
  Level level = Level::patch;
  size_t compared = 0;   // components compared
  size_t ignored = 0;    // components skipped by --ignore
  size_t below_level = 0;  // differences that do not count at the level
  bool drift() const { return !rows.empty(); }
  bool breaking() const;
};

struct CompareOptions {
  Level level = Level::patch;
  std::vector<std::string> ignore;  // --ignore patterns
  bool report_added = true;         // rows for components only in `found`
  bool compare_loaded = true;       // compare [loaded] library hashes
};

// `found` against `locked`. For check, `found` is a snapshot taken with snapshot_options_for(locked).
DriftReport compare_locks(const Lock& locked, const Lock& found, const CompareOptions& options);

// --ignore PATTERN matches a component when the pattern (fnmatch glob) matches its TOML key or
// its plain dotted key, or names one of its parent tables: "system", "loaded", "deb.lib*",
// "python./usr/bin/python3.packages.pip".
bool key_ignored(const Component& c, const std::vector<std::string>& patterns);

// Columns component, locked, found, severity, note; a footer line saying what was compared.
Table drift_table(const DriftReport& report);
std::string render_drift(const DriftReport& report, EnvFormat format);

// Which [probes] entry reports on a component ("cuda.cudnn" -> "cudnn", gpu.* -> "driver").
std::string probe_for(const std::vector<std::string>& path);

}  // namespace dl
