// The cores of the dl-envlock subcommands: tools/dl-envlock/main.cpp parses flags and calls one of
// these. Each writes its data (a lock, a table, a plan) to `out`, logs to stderr, returns the exit
// code (0 ok, 1 drift / unsatisfiable / failure, 2 bad input via dl::Error(usage)).
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace dl {

struct SnapshotArgs {
  std::string output;  // -o FILE; "" prints to stdout
  std::vector<std::string> pythons, debs, libs;
  double probe_timeout_s = 10;
  bool hash_libraries = true;
  std::string format;  // "" = toml to stdout, nothing on stdout with -o
};
int envlock_snapshot(const SnapshotArgs& args, std::ostream& out);

struct CheckArgs {
  std::string lock;
  std::vector<std::string> pythons;  // --python: the interpreters that may run (default python3 on PATH)
  std::vector<std::string> ignore;
  std::string level = "patch";
  std::string format = "table";
  double probe_timeout_s = 10;
  bool strict_hash = false;
};
int envlock_check(const CheckArgs& args, std::ostream& out);

struct DiffArgs {
  std::string a, b;
  std::vector<std::string> ignore;
  std::string level = "exact";
  std::string format = "table";
};
int envlock_diff(const DiffArgs& args, std::ostream& out);

struct ResolveArgs {
  std::string constraints;
  std::string output;  // -o FILE
  std::string format;  // "" = toml to stdout, nothing on stdout with -o
  std::string python;  // overrides python-interpreter of the file
  double probe_timeout_s = 10;
  bool prefer_installed = false;
};
int envlock_resolve(const ResolveArgs& args, std::ostream& out, std::ostream& err);

struct SyncArgs {
  std::string lock;
  bool dry_run = false;
  bool yes = false;  // consent to run the apt-get command
  // Interpreters whose installed packages are compared (--python); empty: python3 on PATH. A lock's
  // interpreter runs only when one of these is it (same_interpreter).
  std::vector<std::string> pythons;
  std::string format = "table";
  double probe_timeout_s = 10;
};
int envlock_sync(const SyncArgs& args, std::ostream& out);

}  // namespace dl
