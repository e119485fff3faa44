#include "dl/sweep/spec.hpp"

#include <cstdio>
#include <cstdlib>

#include <toml++/toml.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/data/sources.hpp"
#include "dl/io/input_file.hpp"
#include "dl/sweep/toml_literal.hpp"

namespace dl::sweep {

namespace fs = std::filesystem;

std::string method_name(Method m) { return std::string(choice_name(m)); }

std::string distribution_name(Distribution d) {
  switch (d) {
    case Distribution::values: return "values";
    case Distribution::uniform: return "uniform";
    case Distribution::log_uniform: return "log_uniform";
    case Distribution::int_uniform: return "int_uniform";
    case Distribution::choice: return "choice";
  }
  return "?";
}

std::vector<int64_t> Asha::rungs() const {
  std::vector<int64_t> r;
  for (int64_t s = min_steps; s < max_steps; s *= eta) {
    r.push_back(s);
    if (s > max_steps / eta) break;  // the next rung would pass max_steps (or overflow)
  }
  r.push_back(max_steps);
  return r;
}

std::string display_value(const std::string& lit) {
  if (lit.size() >= 2 && lit.front() == '"' && lit.back() == '"') return lit.substr(1, lit.size() - 2);
  return lit;
}

Cell value_cell(const std::string& lit) {
  char* end = nullptr;
  const double x = std::strtod(lit.c_str(), &end);
  if (lit.empty() || !end || *end != '\0') return Cell::str(display_value(lit));
  if (lit.find_first_of(".eE") == std::string::npos) return Cell::num(x, lit);  // an integer
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return Cell::num(x, buf);
}

std::vector<std::string> reported_metrics(const Config& base) {
  // As train/metrics.cpp writes them: step_record() every log.every steps and at the last step,
  // eval_record() at each evaluation when there is a validation split.
  std::vector<std::string> m = {"loss", "lr", "grad_norm", "tokens_per_sec", "elapsed_s", "step_s",
                                "time_data_s", "time_compute_s", "time_comm_s", "time_pipeline_wait_s",
                                "time_optimizer_s"};
  if (base.train.precision == Precision::fp16) m.insert(m.end(), {"loss_scale", "skipped_steps"});
  if (!base.data.val_source.empty() || base.data.val_fraction > 0) {
    m.insert(m.end(), {"val_loss", "val_accuracy"});
    // Only the synthetic task (addition) has exact answers to match.
    if (data::parse_source(base.data.source, "data.source").kind == SourceKind::synthetic) m.push_back("val_exact_match");
  }
  return m;
}

namespace {

std::string at(const fs::path& file, const toml::source_region& r) {
  return r.begin.line ? str(file.string(), ":", r.begin.line) : file.string();
}

// Rejects keys of `table` not in `allowed`, naming the first unknown one and what is allowed.
void only_keys(const fs::path& file, const toml::table& table, const std::string& section,
               const std::vector<std::string>& allowed) {
  for (auto&& [k, node] : table) {
    std::string key(k.str());
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == key;
    if (!ok)
      throw_usage(at(file, k.source()), ": unknown key '", section.empty() ? key : section + "." + key,
                  "' (", section.empty() ? "top level" : "[" + section + "]", " takes ", join(allowed, ", "), ")");
  }
}

struct Reader {
  const fs::path& file;
  const toml::table& table;
  std::string section;

  std::string name(const std::string& key) const { return section.empty() ? key : section + "." + key; }
  std::string where(const std::string& key) const {
    const toml::node* n = table.get(key);
    return n ? at(file, n->source()) : file.string();
  }
  std::optional<std::string> string(const std::string& key) const {
    const toml::node* n = table.get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) throw_usage(where(key), ": ", name(key), " must be a string");
    return n->value<std::string>();
  }
  // lo <= value <= hi; hi bounds what the sweep allocates or starts per unit of the value.
  std::optional<int64_t> integer(const std::string& key, int64_t lo,
                                 int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const toml::node* n = table.get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) throw_usage(where(key), ": ", name(key), " must be an integer");
    int64_t v = *n->value<int64_t>();
    if (v < lo) throw_usage(where(key), ": ", name(key), " must be >= ", lo, ", got ", v);
    if (v > hi) throw_usage(where(key), ": ", name(key), " = ", v, " is beyond the limit of ", hi);
    return v;
  }
};

std::string literal(const toml::node& n, const std::string& where, const std::string& key) {
  if (auto v = toml_literal(n)) return *v;
  throw_usage(where, ": ", key, ": a value must be a number, string, bool or array");
}

struct ParamCheck {
  const fs::path& base;
  std::map<std::string, ConfigKeyDoc> keys;

  // The value applied to the base config as dl-train's --set would: the schema's checks name
  // what is wrong with it.
  void value(const Param& p, const std::string& lit) const {
    try {
      (void)load_config(base, {p.key + "=" + lit});
    } catch (const Error& e) {
      throw_usage(p.where, ": parameters.", p.key, " = ", lit, " is not a valid value: ", e.what());
    }
  }
};

Param read_param(const fs::path& file, const std::string& key, const toml::node& node, const toml::source_region& src,
                 const ParamCheck& check) {
  Param p;
  p.key = key;
  p.where = at(file, src.begin.line ? src : node.source());
  auto doc = check.keys.find(key);
  if (doc == check.keys.end())
    throw_usage(p.where, ": parameters.", key, " is not a config key (dl-train --help-keys lists them)");
  if (key == "train.steps")
    throw_usage(p.where, ": parameters.train.steps: the sweep sets a trial's steps (the base config's train.steps, "
                         "or early_stopping.max_steps); sweep the other keys");
  p.is_int = doc->second.type.rfind("int", 0) == 0 && doc->second.type != "int array";
  const bool numeric = p.is_int || doc->second.type == "float";
  if (auto a = node.as_array()) {
    p.distribution = Distribution::values;
    if (a->empty()) throw_usage(p.where, ": parameters.", key, " is an empty list: give at least one value");
    for (auto&& v : *a) p.values.push_back(literal(v, p.where, "parameters." + key));
  } else if (auto t = node.as_table()) {
    only_keys(file, *t, "parameters." + key, {"distribution", "min", "max", "values"});
    Reader r{file, *t, "parameters." + key};
    auto dist = r.string("distribution");
    if (!dist) throw_usage(p.where, ": parameters.", key, " needs distribution = uniform | log_uniform | int_uniform | choice");
    const std::map<std::string, Distribution> names = {{"uniform", Distribution::uniform},
                                                       {"log_uniform", Distribution::log_uniform},
                                                       {"int_uniform", Distribution::int_uniform},
                                                       {"choice", Distribution::choice}};
    auto it = names.find(*dist);
    if (it == names.end())
      throw_usage(r.where("distribution"), ": parameters.", key, ".distribution = \"", *dist,
                  "\": use uniform, log_uniform, int_uniform or choice");
    p.distribution = it->second;
    if (p.distribution == Distribution::choice) {
      const toml::node* v = t->get("values");
      if (t->get("min") || t->get("max"))
        throw_usage(p.where, ": parameters.", key, ": a choice takes values = [...], not min/max");
      if (!v || !v->is_array() || v->as_array()->empty())
        throw_usage(v ? at(file, v->source()) : p.where, ": parameters.", key, ".values: a choice needs a non-empty list of values");
      for (auto&& x : *v->as_array()) p.values.push_back(literal(x, p.where, "parameters." + key));
    } else {
      if (t->get("values")) throw_usage(r.where("values"), ": parameters.", key, ": ", *dist, " takes min and max, not values");
      for (const char* b : {"min", "max"}) {
        const toml::node* n = t->get(b);
        if (!n) throw_usage(p.where, ": parameters.", key, ": distribution ", *dist, " needs bounds: min and max");
        if (!n->is_number()) throw_usage(at(file, n->source()), ": parameters.", key, ".", b, " must be a number");
      }
      p.min = *t->get("min")->value<double>();
      p.max = *t->get("max")->value<double>();
      if (!numeric)
        throw_usage(p.where, ": parameters.", key, " is a ", doc->second.type, " key: ", *dist,
                    " needs a number key; use a list or a choice");
      if (!(p.min < p.max))
        throw_usage(r.where("min"), ": parameters.", key, ": min (", p.min, ") must be below max (", p.max, ")");
      if (p.distribution == Distribution::log_uniform && p.min <= 0)
        throw_usage(r.where("min"), ": parameters.", key, ": log_uniform needs min > 0, got ", p.min);
      if (p.distribution == Distribution::int_uniform &&
          (p.min != std::floor(p.min) || p.max != std::floor(p.max)))
        throw_usage(r.where("min"), ": parameters.", key, ": int_uniform needs integer bounds");
      if (p.distribution == Distribution::int_uniform) p.is_int = true;
    }
  } else {
    throw_usage(p.where, ": parameters.", key, " must be a list of values or a table with a distribution");
  }
  for (const auto& v : p.values) check.value(p, v);
  if (!p.categorical())
    for (double b : {p.min, p.max}) check.value(p, p.is_int ? std::to_string(std::llround(b)) : toml_float(b));
  return p;
}

// Parameters may be written as quoted keys ("optim.lr" = [...]) or as TOML's dotted keys
// (optim.lr = [...], i.e. nested tables): a table without `distribution` is a section.
void collect_params(const fs::path& file, const toml::table& t, const std::string& prefix, const ParamCheck& check,
                    std::vector<Param>& out) {
  for (auto&& [k, node] : t) {
    std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    auto sub = node.as_table();
    if (sub && !sub->contains("distribution") && check.keys.find(key) == check.keys.end()) {
      collect_params(file, *sub, key, check, out);
      continue;
    }
    out.push_back(read_param(file, key, node, k.source(), check));
  }
}

std::string read_sweep_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw_usage("sweep file not found: ", file.string());
  return read_input_file(file, "cannot read sweep file");
}

}  // namespace

bool is_sweep_file(const fs::path& file) {
  try {
    toml::table t = toml::parse(read_sweep_file(file), file.string());
    return t.contains("parameters");
  } catch (const toml::parse_error&) {
    return false;
  }
}

SweepSpec load_sweep(const fs::path& file, const std::optional<std::string>& given_text, int64_t steps) {
  const std::string text = given_text ? *given_text : read_sweep_file(file);
  toml::table root;
  try {
    root = toml::parse(text, file.string());
  } catch (const toml::parse_error& e) {
    throw_usage(file.string(), ":", e.source().begin.line, ":", e.source().begin.column,
                ": TOML syntax error: ", e.description());
  }
  SweepSpec s;
  s.file = file;
  only_keys(file, root, "", {"base", "metric", "goal", "jobs", "nproc_per_node", "method", "parameters", "early_stopping"});
  Reader top{file, root, ""};
  auto base = top.string("base");
  if (!base) throw_usage(file.string(), ": base is missing: base = \"CONFIG.toml\" (relative to the sweep file)");
  s.base_config = (fs::absolute(file).parent_path() / *base).lexically_normal();
  Config base_cfg;
  try {
    base_cfg = load_config(s.base_config);
  } catch (const Error& e) {
    throw_usage(top.where("base"), ": base = \"", *base, "\": ", e.what());
  }
  s.base_steps = steps > 0 ? steps : base_cfg.train.steps;
  s.steps_override = steps > 0 ? steps : 0;
  s.base_decay_steps_set = base_cfg.schedule.decay_steps > 0;
  if (auto m = top.string("metric")) s.metric = *m;
  const auto metrics = reported_metrics(base_cfg);
  bool known = false;
  for (const auto& m : metrics) known = known || m == s.metric;
  if (!known)
    throw_usage(top.where("metric"), ": metric = \"", s.metric, "\" is not a metric dl-train reports for ",
                s.base_config.filename().string(), " (it reports ", join(metrics, ", "), ")");
  if (auto g = top.string("goal")) {
    const std::optional<Goal> goal = parse_choice<Goal>(*g);
    if (!goal) throw_usage(top.where("goal"), ": goal = \"", *g, "\": use minimize or maximize");
    s.goal = *goal;
  }
  s.jobs = top.integer("jobs", 1, kMaxJobs).value_or(1);
  s.nproc_per_node = top.integer("nproc_per_node", 1, kMaxRanksPerTrial).value_or(1);

  const toml::table empty;
  const toml::node* mnode = root.get("method");
  if (mnode && !mnode->is_table()) throw_usage(at(file, mnode->source()), ": method must be a section: [method] name = \"grid\"");
  const toml::table& mt = mnode ? *mnode->as_table() : empty;
  only_keys(file, mt, "method", {"name", "seed", "trials", "startup", "batch"});
  Reader m{file, mt, "method"};
  const std::string mname = m.string("name").value_or("grid");
  const std::optional<Method> method = parse_choice<Method>(mname);
  if (!method) throw_usage(m.where("name"), ": method.name = \"", mname, "\": use grid, random or tpe");
  s.method = *method;
  s.seed = static_cast<uint64_t>(m.integer("seed", 0).value_or(0));
  s.startup = m.integer("startup", 1).value_or(10);
  s.batch = m.integer("batch", 1).value_or(4);
  auto trials = m.integer("trials", 1, kMaxTrials);

  const toml::node* pnode = root.get("parameters");
  if (!pnode || !pnode->is_table() || pnode->as_table()->empty())
    throw_usage(pnode ? at(file, pnode->source()) : file.string(), ": parameters: give at least one config key to sweep, "
                "e.g. [parameters] \"optim.lr\" = [1e-3, 3e-3]");
  ParamCheck check{s.base_config, {}};
  for (auto& d : config_key_docs()) check.keys[d.key] = d;
  collect_params(file, *pnode->as_table(), "", check, s.params);
  std::set<std::string> seen;
  for (const auto& p : s.params)
    if (!seen.insert(p.key).second) throw_usage(p.where, ": parameters.", p.key, " is given twice");

  if (s.method == Method::grid) {
    if (trials) throw_usage(m.where("trials"), ": method.trials: a grid runs every combination; drop trials");
    int64_t n = 1;
    for (const auto& p : s.params) {
      if (!p.categorical())
        throw_usage(p.where, ": parameters.", p.key, ": a grid needs a list of values, not a ",
                    distribution_name(p.distribution), " distribution (use method.name = \"random\" or \"tpe\")");
      n *= static_cast<int64_t>(p.values.size());
      if (n > kMaxTrials) throw_usage(p.where, ": the grid has more than ", kMaxTrials, " points (the limit of a sweep's trials)");
    }
    s.trials = n;
  } else {
    if (!trials) throw_usage(mnode ? at(file, mnode->source()) : file.string(), ": method.trials is missing: how many trials ",
                             method_name(s.method), " runs");
    s.trials = *trials;
  }

  if (const toml::node* e = root.get("early_stopping")) {
    if (!e->is_table()) throw_usage(at(file, e->source()), ": early_stopping must be a section");
    only_keys(file, *e->as_table(), "early_stopping", {"type", "min_steps", "eta", "max_steps"});
    Reader r{file, *e->as_table(), "early_stopping"};
    const std::string type = r.string("type").value_or("none");
    const std::optional<EarlyStopping> stopping = parse_choice<EarlyStopping>(type);
    if (stopping == EarlyStopping::asha) {
      Asha a;
      auto min = r.integer("min_steps", 1, kMaxTrainSteps);
      if (!min) throw_usage(at(file, e->source()), ": early_stopping.min_steps is missing: the first rung's steps");
      a.min_steps = *min;
      a.eta = r.integer("eta", 2, kMaxTrainSteps).value_or(3);
      a.max_steps = r.integer("max_steps", 1, kMaxTrainSteps).value_or(s.base_steps);
      if (steps > 0) {
        if (steps < a.min_steps)
          throw_option_error("{steps} ", steps, " is below early_stopping.min_steps = ", a.min_steps, " (",
                             r.where("min_steps"), "), the first rung: give at least ", a.min_steps, " steps");
        a.max_steps = steps;
      }
      if (a.max_steps < a.min_steps)
        throw_usage(r.where(r.table.get("max_steps") ? "max_steps" : "min_steps"), ": early_stopping: max_steps (",
                    a.max_steps, ") must be >= min_steps (", a.min_steps, ")");
      s.asha = a;
    } else if (!stopping) {
      throw_usage(r.where("type"), ": early_stopping.type = \"", type, "\": use asha or none");
    } else if (e->as_table()->size() > 1) {
      throw_usage(r.where("type"), ": early_stopping.type = \"none\" takes no other keys");
    }
  }
  if (s.full_steps() < 1) throw_usage(s.base_config.string(), ": train.steps = 0: the trials would train nothing");
  return s;
}

}  // namespace dl::sweep
