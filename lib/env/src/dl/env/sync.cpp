#include "dl/env/sync.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/env/dpkg_version.hpp"
#include "dl/env/pep440.hpp"
#include "dl/env/process.hpp"
#include "dl/env/snapshot.hpp"

namespace dl {

namespace {

bool real_version(const std::string& v) { return !v.empty() && v != kVersionNone && v != kVersionUnknown; }

// (package, version) a component pins through apt, if any.
bool apt_pin(const Component& c, std::string& pkg, std::string& ver) {
  if (c.path.size() == 2 && c.path[0] == "deb") {
    pkg = c.path[1];
    ver = c.version;
    return real_version(ver);
  }
  pkg = c.field_text("package");
  ver = c.field_text("package-version");
  return !pkg.empty() && real_version(ver) && real_version(c.version);
}

std::string manual_advice(const Component& c) {
  const auto& p = c.path;
  if (p == std::vector<std::string>{"driver"})
    return "install NVIDIA driver " + c.version + " from your distribution or NVIDIA's packages, then reboot; dl-envlock does not install drivers";
  if (p.size() == 2 && p[0] == "cuda") {
    if (p[1] == "toolkit") return "install the CUDA toolkit whose nvcc is " + c.version + " (NVIDIA's installer or repository)";
    if (p[1] == "runtime") return "install CUDA " + c.version + " (NVIDIA's installer or repository); it is not a Debian package here";
    std::string what = p[1] == "cudnn" ? "cuDNN" : (p[1] == "nccl" ? "NCCL" : "cuBLAS");
    std::string built = c.field_text("built-for-cuda");
    return "install " + what + " " + c.version + (built.empty() ? "" : " built for CUDA " + built) +
           " from NVIDIA (not from a Debian package here" +
           (c.field_text("library").empty() ? ")" : "; locked file " + c.field_text("library") + ")");
  }
  return "install " + c.key() + " " + c.version + " by hand (no Debian package owns " +
         (c.field_text("library").empty() ? "it" : c.field_text("library")) + ")";
}

bool manual_candidate(const Component& c) {
  if (c.path.empty() || !real_version(c.version)) return false;
  const std::string& top = c.path[0];
  return top == "driver" || (top == "cuda" && c.path.size() == 2) || ((top == "blas" || top == "comm" || top == "lib") && c.path.size() == 2);
}

// Debian Policy 5.6.1: lowercase letters, digits, '+', '-', '.', starting with a letter or
// digit, at least two characters; dpkg adds an optional ":arch".
bool debian_package_name(const std::string& s) {
  const size_t colon = s.find(':');
  const std::string name = s.substr(0, colon);
  auto name_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'; };
  if (name.size() < 2 || !std::isalnum(static_cast<unsigned char>(name[0])) || !std::all_of(name.begin(), name.end(), name_char))
    return false;
  if (colon == std::string::npos) return true;
  const std::string arch = s.substr(colon + 1);
  return !arch.empty() && std::all_of(arch.begin(), arch.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// Debian versions use letters, digits and . + ~ : - only (Policy 5.6.12), and start with a digit.
bool debian_version(const std::string& v) {
  return !v.empty() && std::isdigit(static_cast<unsigned char>(v[0])) && valid_dpkg_version(v) &&
         std::all_of(v.begin(), v.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || std::strchr(".+~:-", c); });
}

// PEP 508 names: letters, digits, '.', '_', '-', starting and ending with a letter or digit.
bool python_package_name(const std::string& s) {
  return !s.empty() && std::isalnum(static_cast<unsigned char>(s.front())) && std::isalnum(static_cast<unsigned char>(s.back())) &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._-", c); });
}

bool has_control_char(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// Lock text shown in '#' comment lines, with control characters escaped so that no line break
// in a hand-edited lock can end the comment and leave a command on a line of its own.
std::string comment_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

bool same_pep440(const std::string& a, const std::string& b) {
  const auto va = parse_pep440(a), vb = parse_pep440(b);
  return va && vb ? pep440_compare(*va, *vb) == 0 : a == b;
}

// PEP 440: a local version (+label) is a build of its own; public indexes (PyPI) refuse them,
// so pip install name==1.13.0a0+gitunknown cannot succeed from PyPI.
std::string local_version_advice(const std::string& package, const std::string& version, const std::string& found) {
  return str("a local version (+", version.substr(version.find('+') + 1), "): no public package index serves it; ",
             found, "; install that build by hand (from its source, or pip's --index-url of the index that built it: ",
             "PyTorch's for +cpu/+cuXXX) or re-lock with a public version of ", package);
}

}  // namespace

std::vector<std::string> SyncPlan::command() const {
  if (apt_argv.empty()) return {};
  std::vector<std::string> argv;
  if (use_sudo) argv.push_back("sudo");
  argv.insert(argv.end(), apt_argv.begin(), apt_argv.end());
  return argv;
}

std::vector<std::string> sync_packages(const Lock& lock) {
  std::set<std::string> out;
  for (const auto& c : lock.components) {
    std::string pkg, ver;
    if (apt_pin(c, pkg, ver)) out.insert(pkg);
  }
  return {out.begin(), out.end()};
}

std::map<std::string, std::string> installed_deb_versions(const std::vector<std::string>& packages, double timeout_s) {
  std::map<std::string, std::string> out;
  if (packages.empty()) return out;
  std::vector<std::string> q{"dpkg-query", "-W", "-f=${binary:Package}\\t${Package}\\t${Architecture}\\t${Version}\\t${db:Status-Abbrev}\\n", "--"};
  q.insert(q.end(), packages.begin(), packages.end());
  ProcessOptions po;
  po.timeout_s = timeout_s;
  ProcessResult r = run_process(q, po);
  if (!r.started || r.timed_out) return out;
  for (const auto& e : parse_dpkg_query(r.out)) {
    if (!e.installed) continue;
    for (const std::string& n : {e.binary_package, e.package, e.package + ":" + e.arch}) out.emplace(n, e.version);
  }
  return out;
}

void check_sync_lock(const Lock& lock, const std::string& lock_name) {
  // Every name and version that reaches an argv is checked first: no shell ever sees them, but
  // a name like "-oAPT::..." would still be an option to apt-get, and "x\nrm -rf ~" would break
  // the printed listing.
  auto refuse = [&](const Component& c, const std::string& what, const std::string& value, const char* rule) {
    throw_usage(lock_name, c.line ? str(":", c.line) : "", ": ", c.key(), ": ", what, " ", nlohmann::json(value).dump(),
                " is not ", rule, "; dl-envlock sync will not pass it to apt-get or pip (fix or remove the entry)");
  };
  for (const auto& c : lock.components) {
    std::string pkg, ver;
    if (apt_pin(c, pkg, ver)) {
      if (!debian_package_name(pkg))
        refuse(c, "package", pkg, "a Debian package name (a-z, 0-9, '+', '-', '.', optionally :arch)");
      if (!debian_version(ver)) refuse(c, "version", ver, "a Debian version (0-9, A-Z, a-z, '.', '+', '~', ':', '-')");
    } else if (c.path.size() == 4 && c.path[0] == "python" && c.path[2] == "packages" && real_version(c.version)) {
      if (has_control_char(c.path[1])) refuse(c, "interpreter", c.path[1], "a path without control characters");
      if (!python_package_name(c.path[3])) refuse(c, "package", c.path[3], "a Python package name (PEP 508)");
      if (!parse_pep440(c.version)) refuse(c, "version", c.version, "a PEP 440 version");
    }
  }
}

SyncPlan plan_sync(const Lock& lock, const std::map<std::string, std::string>& installed, bool is_root,
                   const std::string& lock_name, const PythonInstalled& python_installed) {
  check_sync_lock(lock, lock_name);
  SyncPlan plan;
  std::vector<std::string> pins;
  std::set<std::string> pinned;
  bool downgrade = false;
  std::map<std::string, std::vector<std::string>> pip_pins;
  std::vector<std::string> pip_order;
  for (const auto& c : lock.components) {
    std::string pkg, ver;
    if (apt_pin(c, pkg, ver)) {
      if (!pinned.insert(pkg).second) continue;
      auto it = installed.find(pkg);
      std::string have = it == installed.end() ? "" : it->second;
      if (have == ver) {
        plan.satisfied.push_back({c.key(), ver, "installed " + have});
        continue;
      }
      if (!have.empty()) {
        try {
          if (dpkg_compare(have, ver) > 0) downgrade = true;
        } catch (const Error&) {
        }
      }
      pins.push_back(pkg + "=" + ver);
      plan.install.push_back({c.key(), ver, have.empty() ? "not installed" : "installed " + have});
      continue;
    }
    if (c.path.size() == 2 && c.path[0] == "deb" && c.version == kVersionNone) {
      plan.manual.push_back({c.key(), c.version, "locked as not installed; remove it by hand if it must not be there"});
      continue;
    }
    if (c.path.size() == 4 && c.path[0] == "python" && c.path[2] == "packages" && real_version(c.version)) {
      const std::string& py = c.path[1];
      const auto run = python_installed.find(py);
      std::string have;
      if (run == python_installed.end()) {
        if (std::find(plan.pythons_not_run.begin(), plan.pythons_not_run.end(), py) == plan.pythons_not_run.end())
          plan.pythons_not_run.push_back(py);
      } else {
        const auto it = run->second.find(c.path[3]);
        if (it != run->second.end()) have = it->second;
        if (!have.empty() && same_pep440(have, c.version)) {
          plan.pip_satisfied.push_back({c.key(), c.version, "installed " + have});
          continue;
        }
      }
      const std::string found = run == python_installed.end() ? "not compared" : have.empty() ? "not installed" : "installed " + have;
      if (parse_pep440(c.version)->has_local()) {
        plan.manual.push_back({c.key(), c.version, local_version_advice(c.path[3], c.version, found)});
        continue;
      }
      if (!pip_pins.count(py)) pip_order.push_back(py);
      pip_pins[py].push_back(c.path[3] + "==" + c.version);
      plan.pip_install.push_back({c.key(), c.version, found});
      continue;
    }
    if (manual_candidate(c)) plan.manual.push_back({c.key(), c.version, manual_advice(c)});
  }
  if (!pins.empty()) {
    plan.apt_argv = {"apt-get", "install", "-y"};
    if (downgrade) plan.apt_argv.push_back("--allow-downgrades");
    plan.apt_argv.insert(plan.apt_argv.end(), pins.begin(), pins.end());
    plan.use_sudo = !is_root;
  }
  for (const auto& py : pip_order) {
    std::vector<std::string> argv{py, "-m", "pip", "install"};
    argv.insert(argv.end(), pip_pins[py].begin(), pip_pins[py].end());
    plan.pip.push_back({py, argv});
  }
  return plan;
}

namespace {

// The plan as rows for jsonl, csv and md: each package (install, satisfied, pip-install,
// pip-satisfied, manual) and each command the plan prints (apt, pip), the command's words
// shell-quoted in `detail`.
Table sync_table(const SyncPlan& plan) {
  Table t({{"action", "action", false}, {"component", "component", false}, {"version", "version", false},
           {"detail", "detail", false}});
  auto items = [&](const char* action, const std::vector<SyncItem>& v) {
    for (const auto& i : v) t.add_row({Cell::str(action), Cell::str(i.component), Cell::str(i.version), Cell::str(i.detail)});
  };
  items("install", plan.install);
  items("satisfied", plan.satisfied);
  items("pip-install", plan.pip_install);
  items("pip-satisfied", plan.pip_satisfied);
  items("manual", plan.manual);
  if (!plan.apt_argv.empty())
    t.add_row({Cell::str("apt-command"), Cell::str("deb"), Cell::null(""), Cell::str(shell_quote_command(plan.command()))});
  for (const auto& [py, argv] : plan.pip)
    t.add_row({Cell::str("pip-command"), Cell::str(py), Cell::null(""), Cell::str(shell_quote_command(argv))});
  return t;
}

}  // namespace

std::string render_sync_plan(const SyncPlan& plan, const std::string& lock_name, EnvFormat format) {
  if (format != EnvFormat::table)
    if (const auto rows = table_format(format)) return sync_table(plan).render(*rows);
  if (format == EnvFormat::json) {
    nlohmann::ordered_json j;
    j["lock"] = lock_name;
    j["apt_command"] = plan.command();
    auto items = [](const std::vector<SyncItem>& v) {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& i : v) a.push_back({{"component", i.component}, {"version", i.version}, {"detail", i.detail}});
      return a;
    };
    j["install"] = items(plan.install);
    j["satisfied"] = items(plan.satisfied);
    nlohmann::ordered_json pip = nlohmann::ordered_json::array();
    for (const auto& [py, argv] : plan.pip) pip.push_back({{"interpreter", py}, {"command", argv}});
    j["pip_commands"] = pip;
    j["pip_install"] = items(plan.pip_install);
    j["pip_satisfied"] = items(plan.pip_satisfied);
    j["pythons_not_run"] = plan.pythons_not_run;
    j["manual"] = items(plan.manual);
    return j.dump(2) + "\n";
  }
  if (format == EnvFormat::toml) {
    auto arr = [](const std::vector<std::string>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ", ";
      s += toml_string(v[i]);
    }
      return s + "]";
    };
    std::string out = "lock = " + toml_string(lock_name) + "\n";
    out += "apt-command = " + arr(plan.command()) + "\n";
    out += "pythons-not-run = " + arr(plan.pythons_not_run) + "\n";
    auto items = [&](const char* name, const std::vector<SyncItem>& v) {
      for (const auto& i : v) {
        out += std::string("\n[[") + name + "]]\n";
        out += "component = " + toml_string(i.component) + "\nversion = " + toml_string(i.version) + "\ndetail = " + toml_string(i.detail) + "\n";
      }
    };
    items("install", plan.install);
    items("satisfied", plan.satisfied);
    for (const auto& [py, argv] : plan.pip) out += "\n[[pip]]\ninterpreter = " + toml_string(py) + "\ncommand = " + arr(argv) + "\n";
    items("pip-install", plan.pip_install);
    items("pip-satisfied", plan.pip_satisfied);
    items("manual", plan.manual);
    return out;
  }
  std::string out = "# dl-envlock sync plan for " + comment_text(lock_name) + "\n";
  out += str("# Debian packages: ", plan.install.size(), " to install or change, ", plan.satisfied.size(),
             " already at the locked version\n");
  for (const auto& i : plan.install)
    out += "#   " + comment_text(i.component + " " + i.version + " (" + i.detail + ")") + "\n";
  if (!plan.apt_argv.empty()) out += shell_quote_command(plan.command()) + "\n";
  if (!plan.pip_install.empty() || !plan.pip_satisfied.empty())
    out += str("# Python packages: ", plan.pip_install.size(), " to install or change, ", plan.pip_satisfied.size(),
               " already at the locked version\n");
  for (const auto& i : plan.pip_install)
    out += "#   " + comment_text(i.component + " " + i.version + " (" + i.detail + ")") + "\n";
  for (const auto& py : plan.pythons_not_run)
    out += "# " + comment_text(py) + ": installed packages not read (an interpreter runs only when --python names it, "
           "else when it is python3 on PATH): all its locked packages are proposed; dl-envlock sync --python " +
           comment_text(py) + " compares them\n";
  for (const auto& [py, argv] : plan.pip) {
    out += "# Python packages of " + comment_text(py) + " (dl-envlock prints this command but never runs it):\n";
    out += shell_quote_command(argv) + "\n";
  }
  if (!plan.manual.empty()) {
    out += "# Cannot install (do these by hand):\n";
    for (const auto& i : plan.manual) out += "#   " + comment_text(i.component + " " + i.version + ": " + i.detail) + "\n";
  }
  return out;
}

int run_sync_plan(const SyncPlan& plan) {
  if (plan.apt_argv.empty()) return 0;
  ProcessOptions po;
  po.timeout_s = 0;
  po.inherit_output = true;
  po.env = {"DEBIAN_FRONTEND=noninteractive"};
  ProcessResult r = run_process(plan.command(), po);
  if (!r.started) throw_runtime("cannot run ", plan.command()[0], ": ", r.describe());
  return r.exit_code;
}

}  // namespace dl
