// dl-envlock: snapshot, check, diff, resolve and sync the training environment (driver, CUDA,
// cuDNN, NCCL, cuBLAS, BLAS, Debian and Python packages).
#include <CLI/CLI.hpp>
#include <iostream>

#include "dl/backend/build_info.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/command_line.hpp"
#include "dl/core/error.hpp"
#include "dl/core/version.hpp"
#include "dl/env/envlock.hpp"

namespace {

// The library's option errors name {option}; these are dl-envlock's flags for them.
const dl::OptionNames kFlags = {{"probe_timeout_s", "--probe-timeout"}, {"dry_run", "--dry-run"}, {"yes", "--yes"}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dl-envlock: pin the whole training stack (driver, CUDA, cuDNN, NCCL, cuBLAS, BLAS, Debian and\n"
               "Python packages) in a TOML lock, check a machine against it, and say how to make it match."};
  app.set_version_flag("--version", [] { return "dl-envlock " + dl::version_string() + "\n" + dl::build_info(); });
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  dl-envlock snapshot -o env.lock                       # pin this machine\n"
      "  dl-envlock check env.lock                             # exit 0 if it still matches, 1 on drift\n"
      "  dl-envlock diff mine.lock yours.lock                  # why does my run differ from yours\n"
      "  dl-envlock resolve env.toml -o env.lock               # constraints -> pinned lock, or why not\n"
      "  dl-envlock sync env.lock --dry-run                    # the apt-get/pip commands that make it match\n"
      "\n"
      "Exit codes: 0 ok/matching, 1 drift, unsatisfiable constraints or a failure, 2 bad input (unreadable\n"
      "or invalid file, unknown option). Data goes to stdout, logs to stderr. See docs/ENVLOCK.md.");

  // snapshot
  auto* snap = app.add_subcommand("snapshot", "Probe this machine and write its lock (TOML)");
  dl::SnapshotArgs sa;
  bool no_hashes = false;
  snap->add_option("-o,--output", sa.output,
                   "Write the lock to FILE (atomically; a device, FIFO or - written through) instead of stdout");
  snap->add_option("--python", sa.pythons, "Also record this interpreter's packages (pip list); repeatable")->type_name("PATH");
  snap->add_option("--deb", sa.debs, "Also record this Debian package's version (dpkg-query); repeatable")->type_name("PKG");
  snap->add_option("--lib", sa.libs, "Also load and record this shared library (libz.so.1); repeatable")->type_name("NAME");
  snap->add_option("--probe-timeout", sa.probe_timeout_s, "Seconds each probe may take before it is killed (default 10)")
      ->type_name("SECONDS");
  snap->add_flag("--no-hashes", no_hashes, "Skip the sha256 of every loaded shared library ([loaded])");
  snap->add_option("--format", sa.format, "table | json | jsonl | csv | md | toml (default toml on stdout; with -o nothing unless given)");
  snap->footer(
      "Examples:\n"
      "  dl-envlock snapshot -o env.lock\n"
      "  dl-envlock snapshot --python /usr/bin/python3 --deb libopenblas-dev --deb libgloo-dev -o env.lock\n"
      "  dl-envlock snapshot --format table --no-hashes     # look, do not pin\n"
      "  dl-envlock snapshot --probe-timeout 2 -o env.lock  # a hung nvidia-smi costs 2 s, recorded as failed");

  // check
  auto* check = app.add_subcommand("check", "Compare this machine with a lock: exit 0 if it matches, 1 on drift");
  dl::CheckArgs ca;
  check->add_option("lock", ca.lock, "Lock file")->required();
  check->add_option("--python", ca.pythons,
                    "Run this interpreter for the lock's python.* entries that name it (default: python3 on PATH); repeatable")
      ->type_name("PATH");
  check->add_option("--ignore", ca.ignore, "Skip components matching KEY (a glob; a table name skips all inside); repeatable")
      ->type_name("KEY");
  check->add_option("--level", ca.level, "major | minor | patch | exact: smallest difference that counts (default patch)");
  check->add_option("--format", ca.format, "table | json | jsonl | csv | md | toml (default table)");
  check->add_option("--probe-timeout", ca.probe_timeout_s, "Seconds each probe may take (default 10)")->type_name("SECONDS");
  check->add_flag("--strict", ca.strict_hash, "A lock edited after it was written (content-hash mismatch) is an error (exit 2)");
  check->footer(
      "Examples:\n"
      "  dl-envlock check env.lock\n"
      "  dl-envlock check env.lock --level major            # only major changes (and failed probes)\n"
      "  dl-envlock check env.lock --ignore system.kernel --ignore 'python.*.packages.pip'\n"
      "  dl-envlock check env.lock --format json | jq '.rows[] | select(.breaking)'\n"
      "  dl-envlock check env.lock --python .venv/bin/python  # compare the packages of the lock's .venv/bin/python\n"
      "\n"
      "Nothing the lock names is run or loaded: its [lib] entries are looked up as files, and an\n"
      "interpreter it names runs only when --python (or, without it, python3 on PATH) is that program.\n"
      "A CUDA (cuda.*) or driver major change, or a driver below the minimum for the CUDA runtime, is\n"
      "\"breaking\". A lock whose content no longer matches its content-hash is compared as it is, with a\n"
      "warning (--strict makes that exit 2).");

  // diff
  auto* diff = app.add_subcommand("diff", "Compare two locks: the drift table between them");
  dl::DiffArgs da;
  diff->add_option("a", da.a, "First lock (\"locked\" column)")->required();
  diff->add_option("b", da.b, "Second lock (\"found\" column)")->required();
  diff->add_option("--ignore", da.ignore, "Skip components matching KEY; repeatable")->type_name("KEY");
  diff->add_option("--level", da.level, "major | minor | patch | exact (default exact: every difference)");
  diff->add_option("--format", da.format, "table | json | jsonl | csv | md | toml (default table)");
  diff->footer(
      "Examples:\n"
      "  dl-envlock diff mine.lock yours.lock\n"
      "  dl-envlock diff runs/a/env.lock runs/b/env.lock --level minor --ignore loaded");

  // resolve
  auto* res = app.add_subcommand("resolve", "Pin constraints (env.toml) to versions this machine has or apt offers");
  dl::ResolveArgs ra;
  res->add_option("constraints", ra.constraints, "Constraints file (TOML)")->required();
  res->add_option("-o,--output", ra.output, "Write the lock to FILE (atomically; not the constraints file) instead of stdout");
  res->add_option("--python", ra.python, "Interpreter for python.* constraints (overrides python-interpreter, which runs only when it is python3 on PATH)")->type_name("PATH");
  res->add_flag("--prefer-installed", ra.prefer_installed, "Take an installed version that satisfies over a newer one");
  res->add_option("--format", ra.format, "table | json | jsonl | csv | md | toml (default toml)");
  res->add_option("--probe-timeout", ra.probe_timeout_s, "Seconds each probe or apt-cache query may take (default 10)")
      ->type_name("SECONDS");
  res->footer(
      "Examples:\n"
      "  dl-envlock resolve env.toml -o env.lock\n"
      "  dl-envlock resolve env.toml --prefer-installed --format table\n"
      "\n"
      "env.toml:\n"
      "  cuda = \">=12.4,<14\"\n"
      "  driver = \">=550\"\n"
      "  deb.libopenblas-dev = \"*\"\n"
      "  python.numpy = \">=1.24\"\n"
      "\n"
      "Exit 1 with the reason (which constraint, which candidate, which rule) when nothing satisfies.");

  // sync
  auto* sync = app.add_subcommand("sync", "Print (or with --yes run) the apt-get command that installs a lock's versions");
  dl::SyncArgs ya;
  sync->add_option("lock", ya.lock, "Lock file")->required();
  sync->add_flag("--dry-run", ya.dry_run, "Only print the commands (the default unless --yes)");
  sync->add_flag("--yes,--run", ya.yes, "Run the apt-get command (through sudo when not root); pip commands are never run");
  sync->add_option("--python", ya.pythons,
                   "Compare the packages of the lock's interpreter that this is (default: python3 on PATH); repeatable")
      ->type_name("PATH");
  sync->add_option("--format", ya.format, "table | json | jsonl | csv | md | toml (default table)");
  sync->add_option("--probe-timeout", ya.probe_timeout_s, "Seconds dpkg-query or the interpreter may take (default 10)")
      ->type_name("SECONDS");
  sync->footer(
      "Examples:\n"
      "  dl-envlock sync env.lock --dry-run\n"
      "  dl-envlock sync env.lock --yes                     # runs: [sudo] apt-get install -y pkg=version ...\n"
      "\n"
      "Python packages already at their locked version are left out; local versions (1.13.0a0+gitunknown)\n"
      "no index serves, the NVIDIA driver and CUDA/cuDNN/NCCL from outside Debian are listed, not installed.");

  if (const auto code = dl::parse_command_line(app, argc, argv, "dl-envlock")) return *code;

  return dl::run_tool("dl-envlock", [&]() -> int {
    if (*snap) {
      sa.hash_libraries = !no_hashes;
      return dl::envlock_snapshot(sa, std::cout);
    }
    if (*check) return dl::envlock_check(ca, std::cout);
    if (*diff) return dl::envlock_diff(da, std::cout);
    if (*res) return dl::envlock_resolve(ra, std::cout, std::cerr);
    return dl::envlock_sync(ya, std::cout);
  }, kFlags);
}
