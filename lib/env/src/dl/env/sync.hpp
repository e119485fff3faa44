// dl-envlock sync: the commands that make this machine match a lock.
//
// Debian packages (deb.*, and every library component whose owning package the lock recorded) are
// pinned with `apt-get install -y pkg=version ...` (--allow-downgrades when one is older than the
// installed version; through sudo when not root). dl-envlock runs that command only with explicit
// consent (--yes). Python packages that differ from what the interpreter has installed get a
// `python -m pip install name==version` command that it prints but never runs; a locked local
// version (1.13.0a0+gitunknown, 2.1.0+cpu) is listed as manual work instead, since no public
// index serves local versions (PEP 440). What apt cannot install (the NVIDIA driver,
// CUDA/cuDNN/NCCL from outside Debian) is listed with what to do instead, not guessed at.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "dl/env/compare.hpp"
#include "dl/env/lock.hpp"

namespace dl {

struct SyncItem {
  std::string component;  // "deb.libopenblas-dev", "driver"
  std::string version;    // the locked version
  std::string detail;     // installed version, or what to do by hand
};

struct SyncPlan {
  std::vector<std::string> apt_argv;  // {"apt-get","install","-y",...}; empty when nothing to install
  bool use_sudo = false;              // not root: the command runs as sudo apt-get ...
  std::vector<SyncItem> install;      // Debian packages the apt-get command changes
  std::vector<SyncItem> satisfied;    // Debian packages already at the locked version
  std::vector<std::pair<std::string, std::vector<std::string>>> pip;  // interpreter -> pip argv (not run)
  std::vector<SyncItem> pip_install;    // Python packages the pip commands change
  std::vector<SyncItem> pip_satisfied;  // Python packages already at the locked version
  std::vector<std::string> pythons_not_run;  // interpreters whose installed packages were not compared
  std::vector<SyncItem> manual;       // what dl-envlock cannot install, and how to
  std::vector<std::string> command() const;  // apt_argv with sudo in front when needed
};

// Throws dl::Error(usage) naming lock_name, the line and the component when a package name or
// version that would reach apt-get's or pip's argv is not a valid Debian / PEP 508 name or
// version (shell syntax, a leading '-', a line break).
void check_sync_lock(const Lock& lock, const std::string& lock_name);
// Interpreter (as the lock names it) -> its installed packages (PEP 503 name -> version), for the
// interpreters that were run; an interpreter absent from the map was not run, and every one of its
// locked packages is proposed.
using PythonInstalled = std::map<std::string, std::map<std::string, std::string>>;
// installed: Debian package -> installed version ("" or absent when not installed). Checks the
// lock first (check_sync_lock).
SyncPlan plan_sync(const Lock& lock, const std::map<std::string, std::string>& installed, bool is_root,
                   const std::string& lock_name = "the lock", const PythonInstalled& python_installed = {});
// The Debian packages a plan for this lock would pin (to look up their installed versions).
std::vector<std::string> sync_packages(const Lock& lock);
// dpkg-query -W for those packages; missing ones are left out.
std::map<std::string, std::string> installed_deb_versions(const std::vector<std::string>& packages, double timeout_s);

// table: a shell-like listing (commands, and '#' comments for everything else); json/toml: the plan.
std::string render_sync_plan(const SyncPlan& plan, const std::string& lock_name, EnvFormat format);

// Runs the apt-get command (stdout/stderr to ours, no timeout); returns its exit code.
int run_sync_plan(const SyncPlan& plan);

}  // namespace dl
