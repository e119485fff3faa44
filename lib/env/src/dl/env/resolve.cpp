#include "dl/env/resolve.hpp"

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "dl/cli/app.hpp"
#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/core/version.hpp"
#include "dl/env/dpkg_version.hpp"
#include "dl/env/process.hpp"
#include "dl/env/snapshot.hpp"

namespace dl {

const ConstraintEntry* Constraints::find(std::string_view key) const {
  for (const auto& e : entries)
    if (e.key == key) return &e;
  return nullptr;
}

std::string Constraints::where(const ConstraintEntry& e) const { return str(source, " line ", e.line); }

std::string Candidate::label() const {
  std::string s = version + " (" + origin;
  if (!package.empty() && origin.rfind("apt", 0) == 0) s += ", package " + package;
  if (!built_for_cuda.empty()) s += ", built for CUDA " + built_for_cuda;
  return s + ")";
}

std::vector<Candidate> FixedCandidates::candidates(const std::string& key) {
  auto it = map_.find(key);
  return it == map_.end() ? std::vector<Candidate>{} : it->second;
}

std::vector<std::string> lock_path_for(const std::string& key, const std::string& python) {
  if (key == "cuda") return {"cuda", "runtime"};
  if (key == "driver") return {"driver"};
  if (key == "cudnn" || key == "nccl" || key == "cublas") return {"cuda", key};
  if (key.rfind("deb.", 0) == 0) return {"deb", key.substr(4)};
  if (key.rfind("python.", 0) == 0) return {"python", python, "packages", key.substr(7)};
  return {key};
}

namespace {

Scheme scheme_of(const std::string& key) {
  if (key.rfind("deb.", 0) == 0) return Scheme::dpkg;
  if (key.rfind("python.", 0) == 0) return Scheme::pep440;
  return Scheme::numeric;
}

// The first `count` dotted numbers of s ("12.4.131~12.4.1" -> "12.4" for 2).
std::string leading_numbers(const std::string& s, size_t count) {
  auto nv = parse_numeric_version(s);
  if (!nv) return "";
  std::string out;
  for (size_t i = 0; i < std::min(count, nv->parts.size()); ++i) {
      if (i) out += ".";
      out += std::to_string(nv->parts[i]);
    }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- apt-cache policy

std::vector<AptPolicy> parse_apt_policy(std::string_view text) {
  std::vector<AptPolicy> out;
  std::istringstream is{std::string(text)};
  std::string line;
  static const std::regex version_line(R"(^ (\*\*\*|   ) (\S+) (-?[0-9]+)\s*$)");
  static const std::regex source_line(R"(^\s+(-?[0-9]+) (\S+)(?: (\S+))?.*$)");
  bool in_table = false;
  while (std::getline(is, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line[0] != ' ' && line.back() == ':') {
      out.push_back(AptPolicy{line.substr(0, line.size() - 1), "", "", {}});
      in_table = false;
      continue;
    }
    if (out.empty()) continue;
    AptPolicy& p = out.back();
    std::string t = trim(line);
    if (t.rfind("Installed:", 0) == 0) {
      std::string v = trim(t.substr(10));
      p.installed = v == "(none)" ? "" : v;
    } else if (t.rfind("Candidate:", 0) == 0) {
      std::string v = trim(t.substr(10));
      p.candidate = v == "(none)" ? "" : v;
    } else if (t.rfind("Version table:", 0) == 0) {
      in_table = true;
    } else if (in_table) {
      std::smatch m;
      if (std::regex_match(line, m, version_line)) {
        AptPolicyVersion v;
        v.version = m[2].str();
        v.installed = m[1].str() == "***";
        p.versions.push_back(v);
      } else if (!p.versions.empty() && std::regex_match(line, m, source_line)) {
        std::string where = m[2].str();
        if (where.rfind("/", 0) == 0) {
          if (where == "/var/lib/dpkg/status") p.versions.back().installed = true;
          p.versions.back().origins.push_back(where);
        } else if (m[3].matched) {
          p.versions.back().origins.push_back(m[3].str());
        } else {
          p.versions.back().origins.push_back(where);
        }
      }
    }
  }
  return out;
}

std::vector<AptPolicy> query_apt_policy(const std::vector<std::string>& packages, double timeout_s) {
  if (packages.empty()) return {};
  std::vector<std::string> argv{"apt-cache", "policy", "--"};
  argv.insert(argv.end(), packages.begin(), packages.end());
  ProcessOptions po;
  po.timeout_s = timeout_s;
  po.env = {"LC_ALL=C", "LANG=C", "LANGUAGE="};
  ProcessResult r = run_process(argv, po);
  if (!r.ok()) {
    log_warn("apt-cache policy: " + r.describe() + "; apt candidates are left out");
    return {};
  }
  return parse_apt_policy(r.out);
}

// ---------------------------------------------------------------- the machine as a candidate source

namespace {

struct AptStack {
  const char* package;
  size_t numbers;          // how many leading numbers of the upstream version make the version
  const char* built_for;   // CUDA version the package is built for ("" unknown, or "+cuda" from the version)
};

const std::vector<AptStack>& apt_stack(const std::string& key) {
  static const std::map<std::string, std::vector<AptStack>> table{
      {"driver", {{"nvidia-driver", 3, ""}, {"cuda-drivers", 3, ""}}},
      {"cuda", {{"nvidia-cuda-toolkit", 2, ""}, {"cuda-toolkit", 2, ""}}},
      {"cudnn", {{"cudnn9-cuda-13", 3, "13"}, {"cudnn9-cuda-12", 3, "12"}, {"cudnn9-cuda-11", 3, "11"}}},
      {"nccl", {{"libnccl2", 3, "+cuda"}}},
      {"cublas", {{"libcublas13", 3, "13"}, {"libcublas12", 3, "12"}}},
  };
  static const std::vector<AptStack> none;
  auto it = table.find(key);
  return it == table.end() ? none : it->second;
}

std::string origin_of(const AptPolicyVersion& v) {
  std::string s;
  for (const auto& o : v.origins)
    if (o.rfind("/", 0) != 0) s += (s.empty() ? "" : ", ") + o;
  if (s.empty()) return v.installed ? "installed" : "apt";
  return (v.installed ? "installed, apt " : "apt ") + s;
}

}  // namespace

struct SystemCandidates::State {
  SystemCandidateOptions o;
  bool have_stack = false;
  Lock stack;
  bool have_python = false;
  Lock python;
};

SystemCandidates::SystemCandidates(SystemCandidateOptions options) : s_(std::make_unique<State>()) { s_->o = std::move(options); }
SystemCandidates::~SystemCandidates() = default;

std::vector<Candidate> SystemCandidates::candidates(const std::string& key) {
  std::vector<Candidate> out;
  auto& s = *s_;
  if (key.rfind("python.", 0) == 0) {
    if (!s.have_python) {
      SnapshotOptions so;
      so.probe_stack = false;
      so.hash_libraries = false;
      so.pythons = {s.o.python};
      so.probe_timeout_s = s.o.probe_timeout_s;
      s.python = take_snapshot(so);
      s.have_python = true;
    }
    std::string name = key.substr(7);
    if (const Component* c = s.python.find_path({"python", s.o.python, "packages", name}))
      out.push_back(Candidate{c->version, "installed", "", "", "", true});
    return out;
  }
  if (key.rfind("deb.", 0) == 0) {
    std::string pkg = key.substr(4);
    for (const auto& p : query_apt_policy({pkg}, s.o.probe_timeout_s)) {
      if (p.package != pkg && p.package.substr(0, p.package.find(':')) != pkg.substr(0, pkg.find(':'))) continue;
      for (const auto& v : p.versions)
        out.push_back(Candidate{v.version, origin_of(v), pkg, v.version, "", v.installed || v.version == p.installed});
    }
    return out;
  }
  // The CUDA stack: what is installed (a snapshot of the stack) and what apt offers.
  if (!s.have_stack) {
    SnapshotOptions so;
    so.hash_libraries = false;
    so.probe_timeout_s = s.o.probe_timeout_s;
    s.stack = take_snapshot(so);
    s.have_stack = true;
  }
  auto path = lock_path_for(key, s.o.python);
  if (const Component* c = s.stack.find_path(path);
      c && c->version != kVersionNone && c->version != kVersionUnknown) {
    Candidate cand{c->version, "installed", c->field_text("package"), c->field_text("package-version"),
                   c->field_text("built-for-cuda"), true};
    out.push_back(cand);
  }
  const auto& stack = apt_stack(key);
  std::vector<std::string> names;
  for (const auto& a : stack) names.push_back(a.package);
  if (!names.empty()) {
    for (const auto& p : query_apt_policy(names, s.o.probe_timeout_s)) {
      for (const auto& a : stack) {
        if (p.package != a.package) continue;
        for (const auto& v : p.versions) {
          std::string upstream;
          try {
            upstream = parse_dpkg_version(v.version).upstream;
          } catch (const Error&) {
            continue;
          }
          std::string ver = leading_numbers(upstream, a.numbers);
          if (ver.empty()) continue;
          std::string built = a.built_for;
          if (built == "+cuda") {
            static const std::regex re(R"(\+cuda([0-9]+(?:\.[0-9]+)?))");
            std::smatch m;
            built = std::regex_search(v.version, m, re) ? m[1].str() : "";
          }
          out.push_back(Candidate{ver, origin_of(v), a.package, v.version, built, v.installed});
        }
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- resolution

namespace {

struct Pool {
  const ConstraintEntry* entry;
  std::vector<Candidate> all;       // merged, newest first (installed first with prefer_installed)
  std::vector<Candidate> admitted;  // those the constraint admits, same order
  std::vector<std::pair<Candidate, std::string>> rejected;  // and why not
};

std::vector<Candidate> merge(const std::string& key, std::vector<Candidate> in, bool prefer_installed) {
  Scheme scheme = scheme_of(key);
  std::vector<Candidate> out;
  for (auto& c : in) {
    std::string why;
    if (c.version.empty() || !valid_version(scheme, c.version, &why)) continue;
    auto same = std::find_if(out.begin(), out.end(), [&](const Candidate& o) {
      return o.version == c.version && o.built_for_cuda == c.built_for_cuda;
    });
    if (same == out.end()) {
      out.push_back(std::move(c));
      continue;
    }
    // One version from several places: installed and offered by apt.
    same->installed = same->installed || c.installed;
    if (same->package.empty()) {
      same->package = c.package;
      same->package_version = c.package_version;
    }
    if (same->origin != c.origin && same->origin.find(c.origin) == std::string::npos) {
      if (c.origin == "installed") same->origin = "installed, " + same->origin;
      else same->origin += ", " + c.origin;
    }
  }
  std::stable_sort(out.begin(), out.end(), [&](const Candidate& a, const Candidate& b) {
    if (prefer_installed && a.installed != b.installed) return a.installed;
    return compare_versions(scheme, a.version, b.version) > 0;
  });
  return out;
}

Pool make_pool(const ConstraintEntry& e, CandidateSource& src, bool prefer_installed) {
  Pool p;
  p.entry = &e;
  p.all = merge(e.key, src.candidates(e.key), prefer_installed);
  for (const auto& c : p.all) {
    std::string why = e.constraint.rejection(c.version, c.installed);
    if (why.empty()) p.admitted.push_back(c);
    else p.rejected.push_back({c, why});
  }
  if (p.admitted.empty() && e.constraint.scheme == Scheme::pep440) {
    // PEP 440: pre-releases are acceptable when nothing else satisfies the specifier.
    std::vector<std::pair<Candidate, std::string>> still;
    for (auto& [c, why] : p.rejected) {
      if (e.constraint.admits(c.version, true)) p.admitted.push_back(c);
      else still.push_back({c, why});
    }
    p.rejected = std::move(still);
  }
  return p;
}

// The rule a stack component must meet next to a CUDA version; "" when it does.
std::string rule_violation(const std::string& key, const Candidate& c, const std::string& cuda, std::string* rule_text) {
  int64_t cm = version_major(cuda);
  if (key == "driver") {
    auto min = min_driver_for_cuda(cuda);
    if (rule_text) *rule_text = min ? "CUDA " + std::to_string(cm) + ".x needs driver >= " + *min : "";
    if (min && numeric_compare(c.version, *min) < 0) return "below " + *min;
    return "";
  }
  if (key == "cudnn" || key == "nccl") {
    if (rule_text) *rule_text = (key == "cudnn" ? std::string("cuDNN") : std::string("NCCL")) + " must be built for CUDA " + std::to_string(cm);
    if (!c.built_for_cuda.empty() && version_major(c.built_for_cuda) != cm) return "built for CUDA " + c.built_for_cuda;
    return "";
  }
  if (key == "cublas") {
    if (rule_text) *rule_text = "cuBLAS major must be the CUDA major " + std::to_string(cm);
    if (version_major(c.version) != cm) return "cuBLAS " + std::to_string(version_major(c.version)) + ".x belongs to CUDA " + std::to_string(version_major(c.version));
    return "";
  }
  return "";
}

std::string quoted_spec(const ConstraintEntry& e) { return e.key + " \"" + e.spec + "\""; }

std::string no_candidates_text(const std::string& key, const std::string& python) {
  if (key == "driver")
    return "no NVIDIA driver is installed (nvidia-smi, NVML and /proc/driver/nvidia found none) and apt offers no "
           "nvidia-driver or cuda-drivers package";
  if (key == "cuda") return "no CUDA runtime is installed and apt offers no nvidia-cuda-toolkit or cuda-toolkit package";
  if (key == "cudnn" || key == "nccl" || key == "cublas")
    return "no " + key + " library is installed and apt offers no package for it";
  if (key.rfind("deb.", 0) == 0)
    return "apt knows no package " + key.substr(4) + " (check the name, or run apt-get update)";
  return "the package " + key.substr(key.find('.') + 1) + " is not installed in " + python +
         " (resolve only sees the interpreter's installed packages: pip install it there, or name another with "
         "--python PATH)";
}

}  // namespace

ResolveResult resolve(const Constraints& cons, CandidateSource& src, const ResolveOptions& opt) {
  ResolveResult res;
  std::vector<Pool> pools;
  for (const auto& e : cons.entries) pools.push_back(make_pool(e, src, opt.prefer_installed));
  std::vector<std::string> problems;

  for (const auto& p : pools) {
    if (!p.admitted.empty()) continue;
    std::string s = "Could not find a version that satisfies " + quoted_spec(*p.entry) + " (from " + cons.where(*p.entry) + ")\n";
    if (p.all.empty()) s += "  No candidates: " + no_candidates_text(p.entry->key, cons.python) + "\n";
    else
      for (const auto& [c, why] : p.rejected) s += "  Tried " + c.label() + ": rejected by " + why + "\n";
    problems.push_back(s);
  }

  std::map<std::string, Candidate> chosen;
  auto pool_of = [&](const std::string& key) -> const Pool* {
    for (const auto& p : pools)
      if (p.entry->key == key) return &p;
    return nullptr;
  };
  const Pool* cuda = pool_of("cuda");
  std::set<std::string> handled;
  if (cuda && !cuda->admitted.empty()) {
    std::vector<const Pool*> deps;
    for (const char* k : {"driver", "cudnn", "nccl", "cublas"})
      if (const Pool* d = pool_of(k); d && !d->admitted.empty()) deps.push_back(d);
    std::string conflict;
    bool found = false;
    for (const auto& cc : cuda->admitted) {
      std::map<std::string, Candidate> picks;
      std::string why_not;
      for (const Pool* d : deps) {
        const Candidate* pick = nullptr;
        std::string rule;
        std::string tried;
        for (const auto& dc : d->admitted) {
          std::string v = rule_violation(d->entry->key, dc, cc.version, &rule);
          if (v.empty()) {
            pick = &dc;
            break;
          }
          tried += "      " + d->entry->key + " " + dc.label() + " satisfies \"" + d->entry->spec + "\" but is " + v + "\n";
        }
        if (!pick) {
          why_not += "    cuda " + cc.label() + " -> rule: " + rule + "; no candidate of " + quoted_spec(*d->entry) +
                     " (from " + cons.where(*d->entry) + ") meets it:\n" + tried;
          break;
        }
        picks[d->entry->key] = *pick;
      }
      if (why_not.empty()) {
        chosen["cuda"] = cc;
        for (auto& [k, v] : picks) chosen[k] = v;
        found = true;
        break;
      }
      conflict += why_not;
    }
    handled.insert("cuda");
    for (const Pool* d : deps) handled.insert(d->entry->key);
    if (!found) {
      std::string s = "Could not resolve " + quoted_spec(*cuda->entry) + " (from " + cons.where(*cuda->entry) +
                      ") with the compatibility rules:\n" + conflict;
      problems.push_back(s);
    }
  }
  for (const auto& p : pools)
    if (!handled.count(p.entry->key) && !p.admitted.empty()) chosen[p.entry->key] = p.admitted.front();

  if (!problems.empty()) {
    std::string text = "Could not resolve " + cons.source + ":\n";
    for (const auto& p : problems) text += "\n" + p;
    res.explanation = text;
    return res;
  }

  Lock& lock = res.lock;
  lock.kind = "resolved";
  lock.header.created_by = opt.created_by.empty() ? "dl-envlock " + version_string() : opt.created_by;
  lock.header.date = utc_timestamp();
  lock.header.host = host_name();
  for (const auto& e : cons.entries) {
    const Candidate& c = chosen.at(e.key);
    auto path = lock_path_for(e.key, cons.python);
    Component& comp = lock.add(path, c.version);
    std::string why = "\"" + e.spec + "\" (" + cons.where(e) + "); " + c.origin;
    bool list_section = path[0] == "deb" || path[0] == "python";
    if (list_section) {
      comp.comment = e.key + " " + why;
    } else {
      comp.set("constraint", e.spec);
      comp.set("origin", c.origin);
      if (!c.package.empty()) {
        comp.set("package", c.package);
        if (!c.package_version.empty()) comp.set("package-version", c.package_version);
      }
      if (!c.built_for_cuda.empty()) comp.set("built-for-cuda", c.built_for_cuda);
    }
  }
  seal(lock);
  res.ok = true;
  return res;
}

}  // namespace dl
