#include "dl/env/sync.hpp"

#include <unistd.h>

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/env/dpkg_version.hpp"
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

SyncPlan plan_sync(const Lock& lock, const std::map<std::string, std::string>& installed, bool is_root) {
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
      if (!pip_pins.count(c.path[1])) pip_order.push_back(c.path[1]);
      pip_pins[c.path[1]].push_back(c.path[3] + "==" + c.version);
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

std::string render_sync_plan(const SyncPlan& plan, const std::string& lock_name, EnvFormat format) {
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
    auto items = [&](const char* name, const std::vector<SyncItem>& v) {
      for (const auto& i : v) {
        out += std::string("\n[[") + name + "]]\n";
        out += "component = " + toml_string(i.component) + "\nversion = " + toml_string(i.version) + "\ndetail = " + toml_string(i.detail) + "\n";
      }
    };
    items("install", plan.install);
    items("satisfied", plan.satisfied);
    for (const auto& [py, argv] : plan.pip) out += "\n[[pip]]\ninterpreter = " + toml_string(py) + "\ncommand = " + arr(argv) + "\n";
    items("manual", plan.manual);
    return out;
  }
  std::string out = "# dl-envlock sync plan for " + lock_name + "\n";
  out += str("# Debian packages: ", plan.install.size(), " to install or change, ", plan.satisfied.size(),
             " already at the locked version\n");
  for (const auto& i : plan.install) out += "#   " + i.component + " " + i.version + " (" + i.detail + ")\n";
  if (!plan.apt_argv.empty()) out += shell_quote_command(plan.command()) + "\n";
  for (const auto& [py, argv] : plan.pip) {
    out += "# Python packages of " + py + " (dl-envlock prints this command but never runs it):\n";
    out += shell_quote_command(argv) + "\n";
  }
  if (!plan.manual.empty()) {
    out += "# Cannot install (do these by hand):\n";
    for (const auto& i : plan.manual) out += "#   " + i.component + " " + i.version + ": " + i.detail + "\n";
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
