#include "dl/cost/estimate.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/cost/format.hpp"
#include "dl/plan/bench_input.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/plan/speed.hpp"

namespace dl::cost {

namespace fs = std::filesystem;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// `option`: the placeholder naming it ("{mfu}").
void check_fraction(double v, const char* option) {
  if (!(v > 0 && v <= 1)) throw_option_error(option, ": a fraction in (0, 1], got ", v);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Scaling and spot

double ScalingModel::per_doubling(Interconnect c) const {
  switch (c) {
    case Interconnect::nvlink: return nvlink;
    case Interconnect::pcie: return pcie;
    case Interconnect::consumer: return consumer;
  }
  return pcie;
}

double ScalingModel::efficiency(Interconnect c, int64_t gpus, int64_t gpus_per_instance) const {
  if (gpus <= 1) return 1.0;
  const int64_t within = std::min(gpus, std::max<int64_t>(gpus_per_instance, 1));
  const double across = static_cast<double>(gpus) / static_cast<double>(within);
  return std::pow(per_doubling(c), std::log2(static_cast<double>(within))) * std::pow(internode, std::log2(across));
}

SpotOutcome spot_outcome(double compute_hours, double interval_hours, int64_t instances, const SpotModel& m) {
  SpotOutcome o;
  const double rate = m.preempt_per_hour * static_cast<double>(std::max<int64_t>(instances, 1));
  const double loss = interval_hours / 2.0 + m.restart_hours;
  const double keep = 1.0 - rate * loss;
  if (!(keep > 0)) {
    o.finishes = false;
    o.wall_hours = kInf;
    o.preemptions = kInf;
    o.overhead_hours = kInf;
    return o;
  }
  o.wall_hours = compute_hours / keep;
  o.preemptions = rate * o.wall_hours;
  o.overhead_hours = o.wall_hours - compute_hours;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Speed

std::vector<SpeedSource> parse_speed_sources(const std::string& s) {
  if (s.empty() || s == "auto") return kAllSpeedSources;
  std::vector<SpeedSource> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string t = s.substr(i, j - i);
    const std::optional<SpeedSource> source = parse_choice<SpeedSource>(t);
    if (!source) throw_option_error("{speed_sources}: '", t, "' is not a speed source (auto, or a list of ", choice_list<SpeedSource>(), ")");
    if (std::find(out.begin(), out.end(), *source) == out.end()) out.push_back(*source);
    i = j + 1;
  }
  return out;
}

namespace {

// Datasheet peak at the precision (falling back as the planner does) x MFU: the calibrated MFU
// for the GPU and the model's size (mfu 0), or the fixed --mfu.
std::optional<GpuSpeed> analytic_speed(const std::string& model, Precision precision, double mfu,
                                       double params) {
  auto spec = plan::gpu_spec(model);
  if (!spec) return std::nullopt;
  std::string fallback;
  plan::Hardware hw = plan::hardware_for_gpu(*spec, precision, &fallback);
  GpuSpeed s;
  s.source = "analytic";
  if (mfu > 0) {
    s.flops = hw.peak_flops * mfu;
    s.detail = str(format_si(hw.peak_flops, "FLOP/s"), " ", precision, " peak x MFU ", format_fixed(mfu, 2));
  } else {
    s.flops = hw.peak_flops * plan::calibrated_mfu(*spec, params);
    s.detail = str(format_si(hw.peak_flops, "FLOP/s"), " ", precision, " peak x ", plan::describe_mfu(*spec, params));
    s.measured = plan::has_published_runs(model);
  }
  s.model_flops = s.flops;
  if (!fallback.empty()) s.detail += " (" + fallback + ")";
  return s;
}

// A measured speed against the model's: "; x1.45 the model's 83.9 TFLOP/s".
void show_adjustment(GpuSpeed& s, const std::optional<GpuSpeed>& model) {
  s.measured = true;
  if (!model || !(model->flops > 0)) return;
  s.model_flops = model->flops;
  s.detail += str("; x", format_fixed(s.flops / model->flops, 3), " the model's ", format_si(model->flops, "FLOP/s"));
}

}  // namespace

std::optional<GpuSpeed> SpeedModel::speed(const std::string& model, std::string* why) const {
  std::vector<std::string> reasons;
  const bool calibrated = !(mfu > 0);
  if (auto spec = plan::gpu_spec(model)) {
    if (std::string refusal = plan::precision_refusal(*spec, precision); !refusal.empty()) {
      if (why) *why = "no speed (" + name_options(refusal, flags) + ")";
      return std::nullopt;
    }
  }
  const auto model_speed = analytic_speed(model, precision, mfu, params);
  for (const SpeedSource src : sources) {
    // dl-bench and the relative table measure 16-bit training: no measure of FP8 speed.
    if (precision == Precision::fp8 && src != SpeedSource::analytic) {
      reasons.push_back(str(choice_name(src), ": measures 16-bit training, not fp8"));
      continue;
    }
    if (src == SpeedSource::bench) {
      auto it = measured.find(model);
      if (it != measured.end()) {
        GpuSpeed s = it->second;
        show_adjustment(s, model_speed);
        return s;
      }
      reasons.push_back(measured.empty() ? "no " + option_flag(flags, "bench") : "no bench rows for " + model);
    } else if (src == SpeedSource::relative) {
      if (!relative) {
        reasons.push_back("no relative-throughput table");
        continue;
      }
      // Published LLM training runs of this GPU calibrate the model directly; Lambda's small
      // benchmarks understate large-transformer speed-ups (docs/COST.md), so they do not adjust it.
      if (calibrated && plan::has_published_runs(model)) {
        reasons.push_back(model + " has published training runs: the calibrated model, not the relative table");
        continue;
      }
      const RelativeEntry* e = relative->find(model, precision);
      if (!e) {
        reasons.push_back(str(model, " is not in the ", throughput_precision(precision), " relative-throughput table"));
        continue;
      }
      // Anchor: a measured GPU of the table (train measurements first), else the reference GPU's
      // analytic speed.
      std::string anchor;
      const GpuSpeed* anchor_speed = nullptr;
      for (int pass = 0; pass < 2 && !anchor_speed; ++pass)
        for (const auto& [m, s] : measured) {
          if (!relative->find(m, precision)) continue;
          if (pass == 0 && s.detail.rfind("train", 0) != 0) continue;
          anchor = m;
          anchor_speed = &s;
          break;
        }
      GpuSpeed base;
      if (anchor_speed) {
        base = *anchor_speed;
      } else {
        // Calibrated: the table's GPU with published runs of the same architecture anchors (the
        // H100-SXM for Hopper), else the reference GPU.
        anchor = relative->reference;
        if (calibrated)
          if (auto spec = plan::gpu_spec(model))
            for (const auto& g : plan::gpu_table())
              if (g.arch == spec->arch && plan::has_published_runs(g.model) && relative->find(g.model, precision)) {
                anchor = g.model;
                break;
              }
        auto a = analytic_speed(anchor, precision, mfu, params);
        if (!a) {
          reasons.push_back("the reference GPU " + anchor + " has no datasheet entry");
          continue;
        }
        base = *a;
      }
      const RelativeEntry* ea = relative->find(anchor, precision);
      const double ra = ea ? ea->ratio : 1.0;
      GpuSpeed s;
      s.flops = base.flops * e->ratio / ra;
      s.source = "relative";
      s.detail = str("x", format_fixed(e->ratio / ra, 3), " vs ", anchor, " (", base.source, ": ", base.detail, "); ",
                     throughput_precision(precision), " ratio from ", e->file.empty() ? relative->path : e->file);
      show_adjustment(s, model_speed);
      return s;
    } else if (src == SpeedSource::analytic) {
      if (model_speed) return model_speed;
      reasons.push_back("no datasheet entry for " + model);
    }
  }
  if (why) *why = "no speed (" + join(reasons, "; ") + ")";
  return std::nullopt;
}

SpeedModel make_speed_model(const std::vector<std::string>& bench, const std::vector<std::string>& throughput,
                            const std::string& reference_gpu, const std::vector<SpeedSource>& sources,
                            Precision precision, double mfu, double params, const OptionNames& flags) {
  SpeedModel sm;
  sm.precision = precision;
  sm.mfu = mfu;
  sm.params = params;
  sm.flags = flags;
  sm.sources = sources.empty() ? kAllSpeedSources : sources;
  if (mfu != 0) check_fraction(mfu, "{mfu}");
  auto uses = [&](SpeedSource s) { return std::find(sm.sources.begin(), sm.sources.end(), s) != sm.sources.end(); };
  if (std::count(bench.begin(), bench.end(), "-") > 1) throw_option_error("{bench} -: stdin can be read once");
  // Measured: every file's rows, grouped by canonical GPU model.
  std::map<std::string, std::vector<nlohmann::json>> by_model;
  std::map<std::string, std::set<std::string>> files_of;
  for (const auto& path : bench) {
    const std::string name = path == "-" ? "stdin" : path;
    size_t cpu_rows = 0;
    for (auto& row : plan::read_bench_rows(path)) {
      // Each GPU model's rows price that model's offers; CPU rows price none (plan/bench_input.hpp).
      const std::string canon = plan::bench_row_gpu(row);
      if (canon.empty()) {
        ++cpu_rows;
        continue;
      }
      by_model[canon].push_back(std::move(row));
      files_of[canon].insert(name);
    }
    if (cpu_rows) sm.notes.push_back(plan::ignored_bench_rows_note(cpu_rows, "CPU (no gpu_model)", name));
  }
  for (const auto& [model, rows] : by_model) {
    std::string files;
    for (const auto& f : files_of[model]) files += (files.empty() ? "" : ", ") + f;
    if (!plan::gpu_spec(model)) sm.notes.push_back("bench: rows for '" + model + "', not a GPU in dlkit's table, still matched by name");
    plan::BenchSummary b = plan::summarize_bench(rows, precision, model, files);
    GpuSpeed s;
    s.source = "bench";
    if (b.train_flops) {
      s.flops = *b.train_flops;
      s.detail = str("train: ", format_si(*b.train_flops, "FLOP/s"), " per GPU achieved (",
                     b.train_config.empty() ? std::string("train row") : b.train_config, ", ", files, ")");
    } else if (b.gemm_flops && mfu > 0) {
      s.flops = *b.gemm_flops * mfu;
      s.detail = str("gemm: ", format_si(*b.gemm_flops, "FLOP/s"), " ", b.gemm_dtype, " measured x MFU ",
                     format_fixed(mfu, 2), " (", files, ")");
    } else if (b.gemm_flops) {
      // Calibrated: the calibrated MFU counts datasheet peaks, and a large GEMM reaches about
      // plan::kGemmOfPeak of one; a GEMM above or below that moves training speed with it.
      auto spec = plan::gpu_spec(model);
      const double f = spec ? plan::calibrated_mfu(*spec, params) : plan::size_mfu(params);
      s.flops = *b.gemm_flops * f / plan::kGemmOfPeak;
      s.detail = str("gemm: ", format_si(*b.gemm_flops, "FLOP/s"), " ", b.gemm_dtype, " measured x calibrated MFU ",
                     format_fixed(f, 3), " / ", format_fixed(plan::kGemmOfPeak, 2), " (a large GEMM's usual fraction of peak) (",
                     files, ")");
    } else {
      sm.notes.push_back("bench: rows for " + model + " have no gemm or train results: not used for speed");
      continue;
    }
    sm.measured[model] = s;
  }
  if (uses(SpeedSource::relative)) {
    try {
      sm.relative = load_relative_throughput(throughput, reference_gpu);
    } catch (const Error& e) {
      if (!throughput.empty()) throw;
      sm.notes.push_back("relative-throughput table not found (" + named_message(e, flags) + "): not used");
    }
  } else if (!throughput.empty()) {
    sm.notes.push_back(str(option_flag(flags, "throughput"), " given but ", option_flag(flags, "speed_sources"),
                           " leaves out relative: not used"));
  }
  return sm;
}

// ---------------------------------------------------------------------------------------------
// Experiment

Experiment make_experiment(const EstimateInputs& in) {
  Experiment e;
  const bool config = !in.config_path.empty();
  const bool hints = in.layers || in.hidden || in.heads || in.seq || in.vocab;
  const auto flag = [&](const char* option) { return option_flag(in.flags, option); };
  if (config && (in.tokens || in.params || in.flops || in.hours))
    throw_option_error("give a config or {tokens}/{params}, {flops} or {hours}, not both");
  if (config && hints)
    throw_option_error("{layers}/{hidden}/{heads}/{seq}/{vocab} describe a {params} model; change a config with {sets}");
  if (config && in.arch.any())
    throw_option_error("{arch}/{kv_heads}/{ffn_hidden}/{untied_head}/{hf_config} describe a model without a config; "
                       "change a config's model with {sets} model.n_kv_head=...");
  const bool hf = !in.arch.hf_config.empty();
  if (!config && !in.sets.empty()) throw_option_error("{sets} changes a config: give the config too");
  if (in.flops && in.hours) throw_option_error("give {flops} or {hours}, not both");
  if (in.hours && in.on_offer.empty()) throw_option_error("{hours} needs {on_offer} OFFER: the offer the reference run used");
  if (!in.hours && !in.on_offer.empty()) throw_option_error("{on_offer} names the offer of a reference run: give {hours} too");
  if (in.on_gpus && !in.hours) throw_option_error("{on_gpus} goes with {hours} and {on_offer}");
  if (in.hours && !(*in.hours > 0)) throw_option_error("{hours}: need a positive duration, got ", *in.hours);
  if (in.tokens && !(*in.tokens > 0)) throw_option_error("{tokens}: need a positive token count, got ", *in.tokens);
  if (in.flops && !(*in.flops > 0)) throw_option_error("{flops}: need a positive FLOP count, got ", *in.flops);
  if (in.params && !(*in.params > 0)) throw_option_error("{params}: need a positive parameter count, got ", *in.params);
  if (in.on_gpus && *in.on_gpus < 1) throw_option_error("{on_gpus}: need at least 1");
  if (in.micro_batch && *in.micro_batch < 1) throw_option_error("{micro_batch}: need at least 1");
  if (!config && !in.tokens && !in.params && !in.flops && !in.hours)
    throw_option_error("no experiment: give a dl-train config, {tokens} N {params} P, {flops} F, or {hours} H {on_offer} OFFER "
                       "(see --help)");
  if (!config && (hints || in.arch.any()) && !in.params && !hf) throw_option_error("{layers}/{hidden}/... need {params}");

  if (config) {
    plan::PlanConfig pc = plan::load_plan_config(in.config_path, in.sets);
    const Config& c = pc.config;
    const std::string name = fs::path(in.config_path).filename().string();
    e.model = std::move(pc.model);
    e.precision = in.precision ? plan::parse_precision(*in.precision) : c.train.precision.get();
    e.micro_batch = in.micro_batch.value_or(c.train.batch_size);
    e.micro_batch_given = true;
    e.optimizer = plan::optimizer_state(c.optim);
    e.steps = c.train.steps;
    e.checkpoint_every = c.train.checkpoint_every;
    if (e.steps < 1) throw_usage(in.config_path, ": train.steps = 0: nothing to train, nothing to price");
    int64_t dp = c.parallel.dp;
    if (dp < 1) {
      dp = 1;
      e.notes.push_back("parallel.dp = auto: tokens counted for one data-parallel replica; pass " + flag("tokens") + " for the total");
    }
    const int64_t accum = micro_batches_per_step(c);
    const bool gpt = is_token_model(c.model.type);  // gpt or llama: sequences of block_size tokens
    const int64_t seq = gpt ? c.model.block_size : 1;
    const double global = static_cast<double>(c.train.batch_size) * static_cast<double>(accum) * static_cast<double>(dp);
    e.tokens = static_cast<double>(e.steps) * global * static_cast<double>(seq);
    e.flops_per_token = plan::flops_per_token(*e.model, in.formula);
    e.formula = plan::flop_formula_name(in.formula);
    e.flops = *e.tokens * e.flops_per_token;
    e.description = str(name, ": ", e.steps, " steps x ", c.train.batch_size, " x ", accum, " x dp ", dp,
                        gpt ? str(" x ", seq, " tokens") : std::string(" examples"), " = ", format_count(*e.tokens),
                        gpt ? " tokens" : " examples");
    if (!gpt) e.notes.push_back("mlp: one 'token' is one example; FLOPs per example 6N");
  } else {
    e.precision = in.precision ? plan::parse_precision(*in.precision) : Precision::bf16;
    e.micro_batch = in.micro_batch.value_or(1);
    e.micro_batch_given = in.micro_batch.has_value();
    if (in.params || hf) {
      e.model = plan::model_from_hints(in.params, in.layers, in.hidden, in.heads, in.seq, in.vocab, in.arch);
      if (!e.model->note.empty()) e.notes.push_back(name_options(e.model->note, in.flags));
    }
    e.tokens = in.tokens;
    if (in.flops) {
      e.flops = *in.flops;
      e.formula = "given (" + flag("flops") + ")";
      if (e.tokens) e.flops_per_token = e.flops / *e.tokens;
      e.description = str(format_flop(e.flops), " (", flag("flops"), ")");
    } else if (in.hours) {
      e.formula = str("from the reference run (", flag("hours"), " ", flag("on_offer"), ")");
      e.description = str(format_fixed(*in.hours, 2), " h on ", in.on_offer);
    } else {
      if (!in.tokens)
        throw_option_error("{params} needs {tokens} (or {flops}, or {hours} {on_offer} OFFER): the work is tokens x FLOPs per token");
      if (!e.model) throw_option_error("{tokens} needs {params}: FLOPs per token come from the model size");
      e.flops_per_token = plan::flops_per_token(*e.model, in.formula);
      e.formula = e.model->is_transformer() ? plan::flop_formula_name(in.formula)
                                            : str("6N (no ", flag("layers"), "/", flag("hidden"), "/", flag("heads"), "/",
                                                  flag("seq"), ": attention not counted)");
      e.flops = *e.tokens * e.flops_per_token;
      e.description = str(format_count(*e.tokens), " tokens x ", e.model->name);
    }
    if (e.model && !e.model->is_transformer())
      e.notes.push_back(str("memory: model states only (give ", flag("layers"), " ", flag("hidden"), " ", flag("heads"), " ",
                            flag("seq"), " for activations)"));
  }
  // The model as dl-shard takes it (check_fit adds the GPUs): the same config or flags.
  e.plan.config_path = in.config_path;
  e.plan.sets = in.sets;
  if (!config) {
    e.plan.params = in.params;
    e.plan.layers = in.layers, e.plan.hidden = in.hidden, e.plan.heads = in.heads, e.plan.seq = in.seq, e.plan.vocab = in.vocab;
    e.plan.arch = in.arch;
  }
  e.plan.precision = std::string(e.precision.name());
  if (in.micro_batch) e.plan.micro_batch = *in.micro_batch;
  e.plan.fixed = in.layout;
  if (in.recompute) e.plan.fixed.recompute = *in.recompute;
  e.plan.moe_overlap = in.moe_overlap;
  e.plan.uneven_stages = in.uneven_stages;
  e.plan.formula = in.formula;
  e.plan.fabric = in.fabric;  // the same fabric between nodes ranks the layouts
  if (in.mfu != 0) e.plan.mfu = in.mfu;
  e.plan.flags = in.flags;
  if (in.batch_tokens && !(*in.batch_tokens >= 1)) throw_option_error("{batch_tokens}: need at least 1 token per step");
  if (in.batch_tokens) {
    e.batch_tokens = *in.batch_tokens;
  } else if (config && e.tokens && e.steps > 0) {
    e.batch_tokens = *e.tokens / static_cast<double>(e.steps);
  } else {
    e.batch_tokens = kDefaultBatchTokens;
    if (e.model) e.notes.push_back(str("communication: ", format_count(kDefaultBatchTokens),
                                       " tokens per optimizer step assumed (", flag("batch_tokens"), " to change)"));
  }
  return e;
}

int64_t fit_global_batch(const Experiment& e, int64_t gpus, bool whole) {
  const int64_t mb = std::max<int64_t>(e.micro_batch, 1);
  const double per_seq = e.model ? static_cast<double>(std::max<int64_t>(e.model->seq, 1)) : 1.0;
  const int64_t seqs = std::max<int64_t>(1, static_cast<int64_t>(std::llround(e.batch_tokens / per_seq)));
  const int64_t unit = whole ? std::max<int64_t>(gpus, 1) * mb : mb;
  const int64_t rounded = (seqs + unit - 1) / unit * unit;
  // A transformer's batch of fewer sequences than GPUs stays as given: the layouts with fewer
  // replicas (tp, pp, cp) take it, as Llama 3 405B's 2,048 sequences on 16,384 GPUs (dp 128).
  // Rounding it up would hide the DP loss of a fixed run at scale.
  if (!whole && e.model && e.model->is_transformer()) return rounded;
  return std::max(rounded, std::max<int64_t>(gpus, 1) * mb);
}

FitResult check_fit(const Experiment& e, const Offer& o, int64_t gpus) {
  FitResult r;
  if (!e.model) return r;
  plan::PlanInputs in = e.plan;
  in.gpus = gpus;
  in.gpus_per_node = std::max<int64_t>(1, std::min(gpus, o.gpu_count));
  in.gpu_mem = o.gpu_mem_bytes;
  if (plan::gpu_spec(o.gpu_model)) in.gpu = o.gpu_model;  // else datasheet defaults rank the layouts
  // The step's sequences as given (whole micro-batches); when no data-parallel width divides
  // them, rounded up to a multiple of gpus x micro-batch.
  // A bare parameter count has no sequences: a "sequence" is a token, and without a given
  // micro-batch each GPU takes its share of the step as one micro-batch (no accumulation).
  Experiment shares = e;
  if (!e.model->is_transformer() && !e.micro_batch_given) {
    shares.micro_batch = std::max<int64_t>(1, std::llround(e.batch_tokens / static_cast<double>(gpus)));
    in.micro_batch = shares.micro_batch;
  }
  plan::PlanReport rep;
  for (bool whole : {false, true}) {
    r.global_batch = fit_global_batch(shares, gpus, whole);
    in.global_batch = r.global_batch;
    try {
      rep = plan::make_recommendation(in);
      break;
    } catch (const Error& err) {
      if (whole || err.kind() != ErrorKind::usage) throw;
    }
  }
  r.explain = plan::explain_ladder(rep.rows);
  if (const plan::Estimate* best = rep.best()) {
    r.fits = true;
    r.layout = plan::compact_layout(best->layout);
    r.plan_layout = best->layout;
    r.mem_per_gpu = best->memory.total();
    r.recompute_factor = best->hardware_flops > 0 ? best->model_flops / best->hardware_flops : 1.0;
    return r;
  }
  // Nothing fits: the valid layout needing the least memory (ranked rows put it first among
  // those that do not fit).
  const plan::Estimate* closest = nullptr;
  for (const auto& x : rep.rows)
    if (x.valid && (!closest || x.memory.total() < closest->memory.total())) closest = &x;
  r.fits = false;
  if (closest) {
    r.layout = plan::compact_layout(closest->layout);
    // Its time is still priced (communication, bubble, recompute), so a row that does not fit
    // (a published layout the memory model rejects) shows what that layout would take.
    r.plan_layout = closest->layout;
    r.mem_per_gpu = closest->memory.total();
    r.recompute_factor = closest->hardware_flops > 0 ? closest->model_flops / closest->hardware_flops : 1.0;
  }
  r.why_not = str("needs ", format_bytes(r.mem_per_gpu), " per GPU even with ", r.layout, "; has ", format_bytes(o.gpu_mem_bytes));
  return r;
}

namespace {

// 100 Gb Ethernet, shared by an instance's GPUs.
constexpr double kEthernetBytesPerSecond = 12.5e9;

// Multi-GPU NVLink (HGX-class) instances carry an InfiniBand/EFA NIC per GPU. A 1-GPU instance
// of an NVLink GPU is a slice of such a board: no NVLink peer and no cluster fabric, so 64 of
// them talk over Ethernet where 8 full boards have NVLink inside and 50 GB/s per GPU between.
bool cluster_fabric(const Offer& o) { return o.interconnect == Interconnect::nvlink && o.gpu_count > 1; }

}  // namespace

CommScaling comm_efficiency(const Experiment& e, const Offer& o, int64_t gpus, const FitResult& fit, double per_gpu_flops,
                            std::optional<double> inter_node_bw) {
  CommScaling out;
  // One GPU has no communication, but an offloaded layout still waits for the host each step.
  if (!e.model || !(per_gpu_flops > 0) || !fit.plan_layout || (gpus <= 1 && !fit.plan_layout->offload_cpu)) return out;
  plan::Layout l = *fit.plan_layout;
  l.gpus_per_node = std::max<int64_t>(1, std::min(gpus, o.gpu_count));
  plan::Hardware hw;
  hw.peak_flops = per_gpu_flops;
  hw.achievable_fraction = 1.0;
  hw.gpu_mem_bytes = std::numeric_limits<double>::max();
  if (auto spec = plan::gpu_spec(o.gpu_model)) hw.intra_node_bw = spec->intra_node_busbw;
  // Between instances: plan::Hardware's 50 GB/s per GPU, or a shared 100 Gb Ethernet.
  if (!cluster_fabric(o)) hw.inter_node_bw = kEthernetBytesPerSecond / static_cast<double>(std::max<int64_t>(o.gpu_count, 1));
  if (inter_node_bw) hw.inter_node_bw = *inter_node_bw;
  const plan::Estimate est = plan::estimate(*e.model, l, hw, fit.global_batch);
  // Compute without the bubble over the whole step: communication, the bubble and offload lower it.
  if (est.valid && est.step_seconds > 0 && std::isfinite(est.step_seconds)) {
    const double compute = est.compute_seconds * (1.0 - est.bubble);
    out.efficiency = compute / est.step_seconds;
    out.dp_efficiency = compute / (compute + est.dp_exposed_seconds);
    out.microbatches = est.layout.microbatches;
    out.replica_tokens = static_cast<double>(fit.global_batch) * static_cast<double>(std::max<int64_t>(e.model->seq, 1)) /
                         static_cast<double>(std::max<int64_t>(est.layout.dp, 1));
    out.dp_detail = str("DP efficiency ", format_fixed(out.dp_efficiency, 3), ": ", plan::group_digits(std::round(out.replica_tokens)),
                        " tokens per replica per step (dp ", est.layout.dp, ", ", out.microbatches, " micro-batch",
                        out.microbatches == 1 ? "" : "es", "); DP traffic ", format_fixed(est.dp_seconds, 3), " s, ",
                        format_fixed(est.dp_exposed_seconds, 3), " s of it exposed against ", format_fixed(compute, 3),
                        " s of compute per step");
    if (est.ep_seconds > 0)
      out.ep_detail = str("all-to-alls ", format_fixed(est.ep_seconds, 3), " s, ", format_fixed(est.ep_exposed_seconds, 3),
                          " s of it exposed against ", format_fixed(compute, 3), " s of compute per step; ",
                          name_options(plan::describe_all_to_all(*e.model, est.layout), e.plan.flags));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Estimate

CostReport make_estimate(const EstimateInputs& in) {
  CostReport rep;
  rep.experiment = make_experiment(in);
  Experiment& ex = rep.experiment;
  const auto flag = [&](const char* option) { return option_flag(in.flags, option); };
  if (in.mfu != 0) check_fraction(in.mfu, "{mfu}");
  for (auto [v, option] : {std::pair{in.scaling.nvlink, "{nvlink}"}, std::pair{in.scaling.pcie, "{pcie}"},
                           std::pair{in.scaling.consumer, "{consumer}"}, std::pair{in.scaling.internode, "{internode}"}})
    check_fraction(v, option);
  if (!(in.spot_model.preempt_per_hour >= 0)) throw_option_error("{preempt_per_hour}: need a rate >= 0 per hour");
  if (!(in.spot_model.restart_hours >= 0)) throw_option_error("{restart_hours}: need a duration >= 0");
  if (in.checkpoint_hours && !(*in.checkpoint_hours > 0)) throw_option_error("{checkpoint_hours}: need a positive duration");
  check_goodput_model(in.goodput);
  const std::optional<plan::Fabric> fabric = in.fabric ? std::optional(plan::find_fabric(*in.fabric)) : std::nullopt;
  if (in.budget && !(*in.budget > 0)) throw_option_error("{budget}: need a positive amount of USD, got ", *in.budget);
  if (in.deadline && !(*in.deadline > 0)) throw_option_error("{deadline}: need a positive duration, got ", *in.deadline);
  for (int64_t g : in.gpus)
    if (g < 1) throw_option_error("{gpus}: GPU counts must be >= 1, got ", g);

  Catalog cat = load_catalogs(in.catalogs, {in.strict});
  cat.offers.insert(cat.offers.end(), in.offers.begin(), in.offers.end());
  rep.warnings = cat.warnings;
  auto offers = filter_offers(cat, in.gpu_filter, in.provider_filter);
  if (offers.empty())
    throw_option_error("no offer matches", in.gpu_filter.empty() ? "" : " {gpu_filter} " + in.gpu_filter,
                       in.provider_filter.empty() ? "" : " {provider_filter} " + in.provider_filter, " (see `dl-cost offers`)");
  SpeedModel sm = make_speed_model(in.bench, in.throughput, in.reference_gpu, in.speed_sources, ex.precision, in.mfu,
                                   ex.model ? plan::active_param_count(*ex.model) : 0.0, in.flags);
  for (const auto& n : sm.notes) rep.notes.push_back("# " + n);
  auto efficiency = [&](const Offer& o, int64_t n, const FitResult& fit, double per_gpu) {
    if (in.scaling.fixed) {
      CommScaling fixed;
      fixed.efficiency = in.scaling.efficiency(o.interconnect, n, o.gpu_count);
      return fixed;
    }
    return comm_efficiency(ex, o, n, fit, per_gpu, fabric ? std::optional(fabric->bytes_per_s) : std::nullopt);
  };

  // The checkpoint interval given or configured (nullopt: goodput's optimal one), and the
  // goodput of `compute_hours` on n GPUs.
  auto checkpoint_interval = [&](double compute_hours) -> std::optional<double> {
    if (in.checkpoint_hours) return *in.checkpoint_hours;
    if (ex.checkpoint_every > 0 && ex.steps > 0)
      return compute_hours * static_cast<double>(std::min(ex.checkpoint_every, ex.steps)) / static_cast<double>(ex.steps);
    if (ex.checkpoint_every == 0) return compute_hours;
    return std::nullopt;
  };
  auto run_goodput = [&](double compute_hours, int64_t n) {
    return goodput(compute_hours, n, ex.model ? checkpoint_bytes(ex.model->params, ex.precision, ex.optimizer) : 0,
                   checkpoint_interval(compute_hours), in.goodput);
  };

  // --hours H --on X: the work is what X's GPUs do in H hours at their modelled speed, less the
  // goodput overhead those H hours included (so X's row comes back at H hours).
  if (in.hours) {
    const Offer& ref = find_offer(cat, in.on_offer);
    if (ref.gpu_model.empty()) throw_option_error("{on_offer} ", ref.id, ": ", ref.why_unusable(false));
    std::string why;
    auto s = sm.speed(ref.gpu_model, &why);
    if (!s) throw_option_error("{on_offer} ", ref.id, ": ", why);
    const int64_t n = in.on_gpus.value_or(ref.gpu_count);
    const FitResult fit = check_fit(ex, ref, n);
    const double eff = efficiency(ref, n, fit, s->flops).efficiency;
    double compute_hours = *in.hours;  // the fixed point of compute = H x goodput(compute)
    for (int i = 0; i < 50; ++i) {
      const Goodput g = run_goodput(compute_hours, n);
      if (!g.finishes) throw_option_error("{hours}: ", describe_goodput(g));
      compute_hours = *in.hours * g.factor;
    }
    ex.flops = compute_hours * 3600.0 * static_cast<double>(n) * s->flops * eff * fit.recompute_factor;
    if (ex.tokens) ex.flops_per_token = ex.flops / *ex.tokens;
    ex.description = str(format_fixed(*in.hours, 2), " h on ", ref.id, " (", n, " x ", ref.gpu_model, ", ", s->source,
                         " speed, scaling ", format_fixed(eff, 3), ") = ", format_flop(ex.flops));
  }

  std::map<std::string, std::vector<std::string>> skipped;  // reason -> offer ids
  std::vector<bool> pricings = {false};
  if (in.spot) pricings.push_back(true);
  for (const Offer* o : offers) {
    for (bool spot : pricings) {
      std::string why = o->why_unusable(spot);
      std::optional<GpuSpeed> speed;
      if (why.empty()) {
        auto it = rep.speeds.find(o->gpu_model);
        if (it != rep.speeds.end()) {
          speed = it->second;
        } else {
          speed = sm.speed(o->gpu_model, &why);
          if (speed) rep.speeds[o->gpu_model] = *speed;
        }
      }
      if (!why.empty()) {
        skipped[(spot ? "spot: " : "") + why].push_back(o->id);
        continue;
      }
      std::vector<int64_t> counts = in.gpus.empty() ? std::vector<int64_t>{o->gpu_count} : in.gpus;
      std::sort(counts.begin(), counts.end());
      counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
      for (int64_t n : counts) {
        CostRow row;
        row.offer = *o;
        row.spot = spot;
        row.gpus = n;
        row.instances = (n + o->gpu_count - 1) / o->gpu_count;
        row.billed_gpus = row.instances * o->gpu_count;
        const double price = *o->price(spot);
        row.usd_per_hour = price * static_cast<double>(row.instances);
        row.usd_per_gpu_hour = price / static_cast<double>(o->gpu_count);
        row.speed = *speed;
        FitResult fit = check_fit(ex, *o, n);
        const CommScaling scaling = efficiency(*o, n, fit, speed->flops);
        row.efficiency = scaling.efficiency;
        row.dp_efficiency = scaling.dp_efficiency;
        row.replica_tokens = scaling.replica_tokens;
        row.microbatches = scaling.microbatches;
        row.dp_detail = scaling.dp_detail;
        row.ep_detail = scaling.ep_detail;
        row.fits = fit.fits;
        row.layout = fit.layout;
        row.explain = fit.explain;
        row.mem_per_gpu = fit.mem_per_gpu;
        row.why_not = fit.why_not;
        row.recompute_factor = fit.recompute_factor;
        row.flops_per_s = static_cast<double>(n) * speed->flops * row.efficiency * row.recompute_factor;
        row.compute_hours = ex.flops / row.flops_per_s / 3600.0;
        if (ex.tokens) row.tokens_per_s = *ex.tokens / (row.compute_hours * 3600.0);
        row.goodput = run_goodput(row.compute_hours, n);
        row.hours = row.goodput.wall_hours;
        if (!row.goodput.finishes && row.why_not.empty()) row.why_not = describe_goodput(row.goodput);
        if (spot) {
          row.checkpoint_hours = checkpoint_interval(row.compute_hours).value_or(1.0);
          row.spot_outcome = spot_outcome(row.hours, row.checkpoint_hours, row.instances, in.spot_model);
          row.hours = row.spot_outcome.wall_hours;
          if (!row.spot_outcome.finishes)
            row.why_not = str("expected never to finish on spot: ", format_fixed(in.spot_model.preempt_per_hour, 3),
                              " preemptions per instance-hour x ", row.instances, " instances x (",
                              format_fixed(row.checkpoint_hours, 2), " h / 2 + ", format_fixed(in.spot_model.restart_hours, 2),
                              " h restart) >= 1");
        }
        row.total_usd = row.hours * row.usd_per_hour;
        // The range: the calibration's own spread of measured / modelled speed.
        const plan::SpeedCalibration& cal = plan::speed_calibration();
        row.hours_low = row.hours / cal.high;
        row.hours_high = row.hours / cal.low;
        row.usd_low = row.hours_low * row.usd_per_hour;
        row.usd_high = row.hours_high * row.usd_per_hour;
        if (ex.tokens && std::isfinite(row.total_usd)) row.usd_per_1b_tokens = row.total_usd / *ex.tokens * 1e9;
        rep.rows.push_back(std::move(row));
      }
    }
  }
  for (const auto& [why, ids] : skipped) {
    for (const auto& id : ids) rep.skipped.push_back(id + ": " + why);
  }
  if (rep.rows.empty()) {
    std::string reasons;
    for (const auto& [why, ids] : skipped)
      reasons += str(reasons.empty() ? "" : "; ", ids.size(), " offer", ids.size() == 1 ? "" : "s", ": ", why);
    throw_usage("no offer can be estimated: ", reasons);
  }

  // Order: eligible (fits, finishes) first, each group by total cost, then hours, then id.
  std::stable_sort(rep.rows.begin(), rep.rows.end(), [](const CostRow& a, const CostRow& b) {
    if (a.eligible() != b.eligible()) return a.eligible();
    if (a.total_usd != b.total_usd) return a.total_usd < b.total_usd;
    if (a.hours != b.hours) return a.hours < b.hours;
    if (a.offer.id != b.offer.id) return a.offer.id < b.offer.id;
    return a.gpus < b.gpus;
  });
  CostRow* cheapest = nullptr;
  CostRow* fastest = nullptr;
  CostRow* per_hour = nullptr;
  CostRow* best = nullptr;
  for (auto& r : rep.rows) {
    if (!r.eligible()) continue;
    if (!cheapest) cheapest = &r;
    if (!fastest || r.hours < fastest->hours) fastest = &r;
    if (!per_hour || r.usd_per_gpu_hour < per_hour->usd_per_gpu_hour) per_hour = &r;
    const bool ok = (!in.budget || r.total_usd <= *in.budget) && (!in.deadline || r.hours <= *in.deadline);
    if (ok && (in.budget || in.deadline)) {
      // Budget only: the fastest within it. Deadline (with or without budget): the cheapest.
      if (!best) best = &r;
      else if (in.budget && !in.deadline && r.hours < best->hours) best = &r;
    }
  }
  auto label = [&](const CostRow& r) {
    return str(r.offer.id, r.gpus != r.offer.gpu_count || r.instances > 1 ? str(" x", r.gpus, " GPUs") : std::string(),
               r.spot ? " (spot)" : "");
  };
  auto summary = [&](const CostRow& r) {
    return str(label(r), ": ", format_usd(r.total_usd), " in ", format_hours(r.hours), " (", r.gpus, " x ", r.offer.gpu_model,
               ", ", format_usd(r.usd_per_hour), "/h)");
  };
  if (cheapest) {
    cheapest->cheapest = true;
    rep.callouts.push_back("cheapest: " + summary(*cheapest));
  }
  if (fastest) {
    fastest->fastest = true;
    rep.callouts.push_back("fastest: " + summary(*fastest));
  }
  if (in.budget || in.deadline) {
    std::string limits = str(in.budget ? "budget " + format_usd(*in.budget) : "", in.budget && in.deadline ? ", " : "",
                             in.deadline ? "deadline " + format_hours(*in.deadline) : "");
    if (best) {
      best->best = true;
      rep.callouts.push_back(str("best within ", limits, ": ", summary(*best)));
    } else {
      rep.constraints_met = false;
      rep.callouts.push_back(str("nothing meets the ", limits, cheapest ? "; the cheapest: " + summary(*cheapest) : "",
                                 fastest ? "; the fastest: " + summary(*fastest) : ""));
    }
  }
  if (per_hour) {
    per_hour->cheapest_per_gpu_hour = true;
    if (cheapest && per_hour != cheapest && per_hour->offer.id != cheapest->offer.id)
      rep.callouts.push_back(str("the cheapest per GPU-hour, ", label(*per_hour), " (", format_usd(per_hour->usd_per_gpu_hour),
                                 "/GPU-h, ", per_hour->offer.gpu_model, "), is not the cheapest per experiment: it costs ",
                                 format_usd(per_hour->total_usd), " where ", label(*cheapest), " (",
                                 format_usd(cheapest->usd_per_gpu_hour), "/GPU-h, ", cheapest->offer.gpu_model, ") costs ",
                                 format_usd(cheapest->total_usd)));
  }
  if (!cheapest) rep.callouts.push_back("no offer fits: every row is marked with why not");
  if (cheapest) {
    // Rows whose range reaches below the cheapest's top: the order among them is within the error.
    std::vector<std::string> overlap;
    for (const auto& r : rep.rows)
      if (&r != cheapest && r.eligible() && r.usd_low <= cheapest->usd_high)
        overlap.push_back(str(label(r), " ", format_usd(r.usd_low), "-", format_usd(r.usd_high)));
    if (!overlap.empty()) {
      std::string list;
      for (size_t i = 0; i < overlap.size() && i < 4; ++i) list += (i ? ", " : "") + overlap[i];
      if (overlap.size() > 4) list += str(", ... (", overlap.size() - 4, " more)");
      rep.callouts.push_back(str("ranges overlap: the cheapest's ", format_usd(cheapest->usd_low), "-",
                                 format_usd(cheapest->usd_high), " overlaps ", overlap.size(), " other row",
                                 overlap.size() == 1 ? "" : "s", " (", list, "): their order is within the model's error"));
    }
  }

  // Notes: what the numbers assume.
  auto& notes = rep.notes;
  std::vector<std::string> head;
  head.push_back("# experiment: " + ex.description);
  if (ex.model)
    head.push_back(str("# model: ", plan::group_digits(ex.model->params), " parameters",
                       ex.model->is_transformer()
                           ? str(" (L=", ex.model->n_layer, " D=", ex.model->hidden, " heads=", ex.model->heads, " T=", ex.model->seq,
                                 plan::describe_block(*ex.model), ")")
                           : std::string()));
  // A mixture of experts: memory holds every expert, the work counts the active ones (6 N_active).
  if (ex.model && ex.model->is_moe())
    head.push_back(str("# params ", plan::describe_moe_params(*ex.model), ": memory (and checkpoints) count the total, "
                       "FLOPs per token the active; dl-shard's planner chooses the expert-parallel layout"));
  head.push_back(str("# work: ", format_flop(ex.flops), ex.flops_per_token > 0 ? str(" = tokens x ", format_flop(ex.flops_per_token), " per token") : std::string(),
                     ", FLOPs per token: ", ex.formula));
  for (const auto& n : ex.notes) head.push_back("# " + n);
  std::string order;
  for (const SpeedSource s : sm.sources) order += (order.empty() ? "" : " > ") + std::string(choice_name(s));
  const plan::SpeedCalibration& cal = plan::speed_calibration();
  if (in.mfu > 0)
    head.push_back(str("# speed per GPU, preferred source first: ", order, "; precision ", ex.precision, ", MFU ",
                       format_fixed(in.mfu, 2), " (", flag("mfu"), ": analytic and gemm-based speeds)"));
  else
    head.push_back(str("# speed per GPU, preferred source first: ", order, "; precision ", ex.precision,
                       "; analytic = datasheet peak x the calibrated MFU (size and GPU, fitted on ",
                       plan::published_runs().size(), " published runs: docs/COST.md), which bench rows and the relative "
                       "table adjust (x shown per GPU)"));
  head.push_back(str("# range: hours x ", format_fixed(1 / cal.high, 2), " .. x ", format_fixed(1 / cal.low, 2),
                     " (the calibration's spread of measured / modelled speed), in hours_low/high and usd_low/high"));
  if (ex.precision == Precision::fp8)
    head.push_back("# fp8: FP8 datasheet peaks x the MFU calibrated on bf16 runs, optimistic: FP8 training rarely runs "
                   "twice as fast as bf16 (" + flag("mfu") + " from a measured FP8 run); memory: bf16 weights and "
                   "gradients plus an FP8 copy of the weights (3+2+12 bytes per parameter, Transformer Engine)");
  head.push_back(goodput_note(in.goodput, in.flags));
  if (fabric)
    head.push_back(str("# fabric between instances: ", fabric->name, ": ", fabric->description, " (",
                       format_fixed(fabric->bytes_per_s / 1e9, 2), " GB/s per GPU; ", fabric->source, ")"));
  if (ex.precision == Precision::fp32)
    head.push_back("# fp32: FP32 datasheet peaks (no TF32), as dl-train computes; GPU runs usually train in bf16 "
                   "(" + flag("precision") + " bf16)");
  std::set<std::string> used;
  for (const auto& row : rep.rows) used.insert(row.speed.source);
  if (used.size() > 1 && in.mfu > 0)
    head.push_back("# rows use different speed sources (column 'speed from'), which compare imperfectly; "
                   + flag("speed_sources") + " analytic (or relative) ranks all on one basis");
  if (sm.relative)
    head.push_back(str("# relative throughput: ", sm.relative->path, " (", sm.relative->source, "), reference ",
                       sm.relative->reference, ", ", throughput_precision(ex.precision), " table"));
  if (in.scaling.fixed)
    head.push_back(str("# scaling: efficiency = e^log2(GPUs in an instance) x ", format_fixed(in.scaling.internode, 2),
                       "^log2(instances); e = ", format_fixed(in.scaling.nvlink, 2), " nvlink, ", format_fixed(in.scaling.pcie, 2),
                       " pcie, ", format_fixed(in.scaling.consumer, 2), " consumer; cost = hours x instance $/h x instances"));
  else
    head.push_back(str("# scaling: efficiency = compute / step of the row's layout (plan::estimate: exposed communication, "
                       "pipeline bubble, offload): ",
                       ex.model ? str(format_count(ex.batch_tokens), " tokens per step; gradient and parameter traffic over the "
                                      "GPU's intra-instance busbw, between instances ",
                                      fabric ? str(format_fixed(fabric->bytes_per_s / 1e9, 2), " GB/s per GPU (",
                                                   flag("fabric"), " ", fabric->name, ")")
                                             : str("50 GB/s per GPU (multi-GPU NVLink instances: ", flag("fabric"),
                                                   " ib-ndr) or 12.5 GB/s per instance (100 Gb Ethernet)"))
                                : std::string("no model, so no communication counted (efficiency 1)"),
                       "; cost = hours x instance $/h x instances"));
  if (!in.scaling.fixed) {
    // Said where it decides a row: single NVLink-GPU instances spread over several.
    std::set<std::string> slices;
    for (const auto& row : rep.rows)
      if (row.instances > 1 && row.offer.gpu_count == 1 && row.offer.interconnect == Interconnect::nvlink)
        slices.insert(row.offer.id);
    if (!slices.empty())
      head.push_back(str("# ", join(std::vector(slices.begin(), slices.end()), ", "),
                         ": 1-GPU instances have no NVLink peer and no per-GPU cluster fabric: several of them talk "
                         "over 100 Gb Ethernet (12.5 GB/s each), slower than the same GPUs in multi-GPU NVLink instances"));
  }
  head.push_back(str("# memory and layout: dl-shard recommend's choice for each offer and GPU count (the same planner "
                     "and defaults: flash attention, micro-batch ", ex.micro_batch,
                     "; DP, ZeRO-1..3, selective then full recompute, TP, PP, CPU offload last, the first within ",
                     format_fixed(plan::kSimplerWithin * 100, 0), "% of the fastest); recompute repeats work (the "
                     "recompute factor); a row that does not fit is never cheapest, fastest or best"));
  if (in.spot) {
    std::string interval = in.checkpoint_hours ? format_hours(*in.checkpoint_hours) + " (" + flag("checkpoint_hours") + ")"
                           : ex.checkpoint_every > 0 ? str("every ", ex.checkpoint_every, " of ", ex.steps, " steps (train.checkpoint_every)")
                           : ex.checkpoint_every == 0 ? std::string("only at the end (train.checkpoint_every = 0): a preemption loses the run so far")
                                                      : "1 h (assumed; " + flag("checkpoint_hours") + ")";
    head.push_back(str("# spot: ", format_fixed(in.spot_model.preempt_per_hour, 3), " preemptions per instance-hour, ",
                       format_hours(in.spot_model.restart_hours), " restart, checkpoints ", interval,
                       "; wall = compute / (1 - rate x instances x (interval/2 + restart))"));
  }
  head.push_back("# prices: USD list prices of the catalogs (dates: `dl-cost offers`); hours are modelled, not measured");
  notes.insert(notes.begin(), head.begin(), head.end());
  if (!skipped.empty()) {
    for (const auto& [why, ids] : skipped) {
      std::string list;
      for (size_t i = 0; i < ids.size() && i < 4; ++i) list += (i ? ", " : "") + ids[i];
      if (ids.size() > 4) list += str(", ... (", ids.size() - 4, " more)");
      notes.push_back(str("# skipped ", ids.size(), ids.size() == 1 ? " offer" : " offers", ": ", why, ": ", list));
    }
  }
  return rep;
}

}  // namespace dl::cost
