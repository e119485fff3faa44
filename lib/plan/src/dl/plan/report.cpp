#include "dl/plan/report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <filesystem>
#include <span>
#include <sstream>

#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/plan/bench_input.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/plan/speed.hpp"

namespace dl::plan {

namespace {

std::string gbps(double bytes_per_s) { return format_fixed(bytes_per_s / 1e9, bytes_per_s < 100e9 ? 1 : 0) + " GB/s"; }

// Everything make_plan and make_recommendation share: the model, the hardware, the base layout,
// the global batch, and the notes that state the assumptions.
struct Setup {
  PlanReport report;
  std::optional<Config> config;
};

Setup setup(const PlanInputs& in) {
  Setup s;
  PlanReport& r = s.report;
  const bool hints = in.layers || in.hidden || in.heads || in.seq || in.vocab;
  const auto flag = [&](const char* option) { return option_flag(in.flags, option); };
  r.flags = in.flags;
  if (!in.config_path.empty() && in.params)
    throw_option_error("give a config or {params}, not both");
  if (in.config_path.empty() && !in.params && in.arch.hf_config.empty())
    throw_option_error("no model: give a dl-train config (dl-shard plan CONFIG.toml ...), {params} N or {hf_config} "
                       "config.json (see --help)");
  if (!in.config_path.empty() && hints)
    throw_option_error("{layers}/{hidden}/{heads}/{seq}/{vocab} describe a {params} model; change a config's model with "
                       "{sets} model.n_layer=... instead");
  if (!in.config_path.empty() && in.arch.any())
    throw_option_error("{arch}/{kv_heads}/{ffn_hidden}/{untied_head}/{hf_config} describe a model without a config; "
                       "change a config's model with {sets} model.n_kv_head=... instead");
  if (in.config_path.empty() && !in.sets.empty()) throw_option_error("{sets} changes a config: give the config too");
  if (in.gpus < 1) throw_option_error("{gpus}: give the number of GPUs (>= 1)");
  if (in.fixed.ep && *in.fixed.ep < 1) throw_option_error("{ep}: need at least 1, got ", *in.fixed.ep);

  if (!in.config_path.empty()) {
    PlanConfig pc = load_plan_config(in.config_path, in.sets);
    s.config = std::move(pc.config);
    r.model = std::move(pc.model);
  } else {
    r.model = model_from_hints(in.params, in.layers, in.hidden, in.heads, in.seq, in.vocab, in.arch);
    r.model.note = name_options(r.model.note, in.flags);
  }
  const Config* c = s.config ? &*s.config : nullptr;
  if (in.fixed.ep && *in.fixed.ep > 1) {
    if (!r.model.is_moe()) throw_option_error("{ep} ", *in.fixed.ep, ": expert parallelism needs a mixture of experts ({experts} N)");
    if (r.model.experts % *in.fixed.ep != 0)
      throw_option_error("{ep} ", *in.fixed.ep, " does not divide the ", r.model.experts, " experts (each rank holds experts / ep)");
    if (in.gpus % *in.fixed.ep != 0)
      throw_option_error("{ep} ", *in.fixed.ep, " does not divide the ", in.gpus, " GPUs (nor can it divide dp)");
  }

  Layout& b = r.base;
  b.gpus = in.gpus;
  b.gpus_per_node = in.gpus_per_node.value_or(8);
  if (b.gpus_per_node < 1) throw_option_error("{gpus_per_node}: need at least 1");
  b.micro_batch = in.micro_batch.value_or(c ? c->train.batch_size : 1);
  if (b.micro_batch < 1) throw_option_error("{micro_batch}: need at least 1");
  b.precision = in.precision ? parse_precision(*in.precision) : c ? c->train.precision.get() : Precision::bf16;
  if (in.schedule) {
    const std::optional<PipelineSchedule> schedule = parse_choice<PipelineSchedule>(*in.schedule);
    if (!schedule) throw_option_error("{schedule}: 1f1b or gpipe, got '", *in.schedule, "'");
    b.schedule = *schedule;
  } else if (c) {
    b.schedule = c->parallel.schedule;
  }
  if (c) b.optimizer = optimizer_state(c->optim);
  // Attention: what the run stores. A config says where dl-train runs it (the CPU backend keeps
  // the scores, the CUDA kernels a log-sum-exp state); a bare --params model is planned for a
  // GPU, where flash-style attention is what current frameworks run.
  std::string attention_why;
  if (in.attention) {
    b.attention = *in.attention;
    attention_why = flag("attention");
  } else if (c) {
    b.attention = attention_for_device(c->train.device);
    attention_why = str("train.device = \"", c->train.device, "\"",
                        c->train.device == DeviceChoice::automatic ? ": the GPU when present" : "");
  } else {
    b.attention = Attention::flash;
    attention_why = "the GPU default without a config";
  }

  // Sequence parallelism comes with tensor parallelism in the frameworks a bare model is planned
  // for; dl-train (a config) does not run it.
  b.sequence_parallel = in.sequence_parallel.value_or(c == nullptr);
  b.moe_overlap = in.moe_overlap;
  b.uneven_stages = in.uneven_stages;

  // Hardware: datasheet of --gpu (or of the bench rows' GPU), then measured values over it.
  std::optional<GpuSpec> spec;
  if (!in.gpu.empty()) spec = find_gpu(in.gpu);
  std::optional<BenchSummary> bench;
  if (!in.bench.empty()) {
    bench = read_bench_summary(in.bench, b.precision, in.gpu);
    if (!spec && !bench->gpu_model.empty()) spec = gpu_spec(bench->gpu_model);
  }
  Hardware hw;
  std::vector<std::string> hw_notes;
  if (spec) {
    std::string fallback;
    hw = hardware_for_gpu(*spec, b.precision, &fallback);
    if (!fallback.empty()) hw_notes.push_back(fallback);
  } else {
    hw = hardware_for_gpu(*gpu_spec("H100-SXM"), b.precision);
    hw.gpu_model = "";
    hw.source = str("H100-SXM datasheet (default; give ", flag("gpu"), " MODEL or ", flag("bench"), " FILE)");
  }
  // A train row of this GPU is achieved throughput: no MFU applies to it (apply_bench says so).
  const bool achieved = bench && bench->train_flops;
  if (in.mfu) {
    if (!(*in.mfu > 0 && *in.mfu <= 1)) throw_option_error("{mfu}: a fraction in (0, 1], got ", *in.mfu);
    hw.achievable_fraction = *in.mfu;
  } else if (!achieved) {
    // The calibrated MFU of this GPU at this model's size, as dl-cost uses (plan/speed.hpp).
    const GpuSpec g = spec ? *spec : *gpu_spec("H100-SXM");
    // A mixture of experts' GEMMs are those of its active parameters (each expert's matrices
    // are a dense model's of that width): its MFU is read at the active size.
    const double size = active_param_count(r.model);
    hw.achievable_fraction = calibrated_mfu(g, size);
    hw_notes.push_back("achievable fraction: the calibrated " + describe_mfu(g, size) + " (" + flag("mfu") + " to fix it)");
    // A measured GEMM replaces the peak; the calibrated MFU counts datasheet peaks, which a large
    // GEMM reaches kGemmOfPeak of.
    if (bench && bench->gemm_flops) hw.achievable_fraction /= kGemmOfPeak;
  }
  if (bench) {
    hw = apply_bench(hw, *bench, &hw_notes);
    if (in.mfu && achieved) {
      hw_notes.push_back(flag("mfu") + " ignored: the train row's throughput is already achieved");
    }
  }
  if (in.gpu_mem) {
    if (!(*in.gpu_mem > 0)) throw_option_error("{gpu_mem}: need a positive size");
    hw.gpu_mem_bytes = *in.gpu_mem;
  } else if (spec) {
    hw.gpu_mem_bytes = spec->memory_bytes;
  } else {
    throw_option_error("{gpu_mem} is required (e.g. {gpu_mem} 80GB), or name the GPU with {gpu} MODEL");
  }
  const Fabric fabric = find_fabric(in.fabric.value_or(std::string(kDefaultFabric)));
  hw.inter_node_bw = fabric.bytes_per_s;
  r.hardware = hw;

  // Global batch: fixed across layouts so their step times compare.
  const int64_t accum = c ? micro_batches_per_step(*c) : 1;
  r.global_batch = in.global_batch.value_or(in.gpus * b.micro_batch * std::max<int64_t>(accum, 1));
  if (r.global_batch < 1) throw_option_error("{global_batch}: need at least 1 sequence");
  r.formula = in.formula;
  r.flops_per_token = flops_per_token(r.model, in.formula);

  // Notes: what the numbers assume.
  const ModelShape& m = r.model;
  std::string arch;
  if (m.type == ModelType::gpt || m.is_transformer())
    arch = str(" (L=", m.n_layer, " D=", m.hidden, " heads=", m.heads, " T=", m.seq, m.vocab ? str(" V=", m.vocab) : "",
               describe_block(m), ")");
  else if (m.n_layer || m.hidden)
    arch = str(" (L=", m.n_layer, " D=", m.hidden, "; give ", flag("heads"), " and ", flag("seq"), " for activations)");
  r.notes.push_back(str("# model: ", m.name, ": ", group_digits(m.params), " parameters", arch));
  if (m.is_moe())
    r.notes.push_back(str("# params ", describe_moe_params(m), " (", m.experts, " routed experts of width ", m.expert_width(),
                          ", top-", m.active_experts, m.shared_experts ? str(", ", m.shared_experts, " shared of width ", m.shared_width()) : "",
                          m.dense_layers ? str(", ", m.dense_layers, " dense layers first") : "",
                          ", capacity factor ", format_fixed(m.capacity_factor, 2),
                          "): memory holds the total, FLOPs per token the active; ep shards the routed experts, and ZeRO "
                          "their state over dp / ep"));
  if (m.is_moe()) r.notes.push_back("# " + name_options(describe_all_to_all(m, b), in.flags));
  if (!m.note.empty()) r.notes.push_back("# " + m.note);
  if (!m.is_transformer() && m.type != ModelType::mlp)
    r.notes.push_back(str("# no architecture: activations, tensor- and pipeline-parallel traffic are not estimated "
                          "(give ", flag("layers"), " ", flag("hidden"), " ", flag("heads"), " ", flag("seq"), ")"));
  r.notes.push_back(str("# FLOPs per token: ", flop_formula_name(in.formula), " = ", format_si(r.flops_per_token, "FLOP"),
                        m.seq > 0 ? "" : " (no " + flag("seq") + ": one token per sequence assumed)"));
  r.notes.push_back(str("# sizes per GPU in decimal units (1 GB = 1e9 bytes); ", b.precision, " ",
                        b.optimizer, ": ", state_bytes(b.precision, b.optimizer).params, "+",
                        state_bytes(b.precision, b.optimizer).grads, "+", state_bytes(b.precision, b.optimizer).optimizer,
                        " bytes per parameter (params+grads+optimizer; ZeRO, Rajbhandari et al. 2019)"));
  if (m.is_transformer()) {
    r.notes.push_back(b.sequence_parallel
                          ? "# tp > 1 runs sequence parallelism (Megatron-LM's --sequence-parallel): the activations tp "
                            "leaves whole are split along the sequence too"
                          : "# tp > 1 without sequence parallelism (dl-train's tensor parallelism)");
    r.notes.push_back(str("# activations: Korthikanti et al. 2022, s=", m.seq, " b=", b.micro_batch,
                          ", ", activation_value_bytes(b.precision) * 8, "-bit values; pipeline stages hold ",
                          b.schedule == PipelineSchedule::gpipe ? "all m micro-batches (GPipe)" : "min(pp, m) micro-batches (1F1B)"));
    r.notes.push_back(
        b.attention == Attention::flash
            ? str("# attention: flash (", attention_why, "): a log-sum-exp state of 2 values per row per head "
                  "instead of the T x T scores (dl-train's CUDA kernels); ", flag("attention"), " materialized for the CPU backend")
            : str("# attention: materialized (", attention_why, "): the T x T scores per head are kept "
                  "(dl-train's CPU backend); ", flag("attention"), " flash for flash-style GPU kernels"));
  }
  r.notes.push_back(str("# overhead: a fixed ", format_bytes(kOverheadBytes),
                        " allowance per GPU (CUDA context, library workspaces, allocator fragmentation)"));
  r.notes.push_back(str("# global batch: ", r.global_batch, " sequences per step",
                        in.global_batch ? "" : " (gpus x micro-batch x accumulation; " + flag("global_batch") + " to change)"));
  r.notes.push_back(str("# hardware: ", hw.source, ": ", format_si(hw.peak_flops, "FLOP/s"), " x ",
                        format_fixed(hw.achievable_fraction, 2), " achievable, ", format_bytes(hw.gpu_mem_bytes),
                        " per GPU, intra-node ", gbps(hw.intra_node_bw), ", inter-node ", gbps(hw.inter_node_bw),
                        " (", flag("fabric"), " ", fabric.name, in.fabric ? "" : ", the default", ")",
                        ", host ", gbps(hw.host_bw), " per GPU, ", b.gpus_per_node, " GPUs per node"));
  r.notes.push_back(str("# CPU offload: the optimizer step on the host at ", format_fixed(kCpuAdamBytesPerParam, 0),
                        " bytes of host memory traffic per parameter over ", gbps(hw.host_mem_bw),
                        " per GPU, plus gradients and parameters over PCIe, both exposed"));
  for (const auto& n : hw_notes) r.notes.push_back("# " + n);
  r.notes.push_back("# step time: compute / (1 - bubble) + exposed communication (tp, pp and the ep all-to-alls in full; DP/ZeRO "
                    "gradient traffic hidden behind backward as far as it fits) + offload traffic; an estimate "
                    "for ranking layouts, not a measurement");
  return s;
}

std::string short_layout(const Layout& l) {
  std::string s = str("dp=", l.dp, " tp=", l.tp, " pp=", l.pp, l.cp > 1 ? str(" cp=", l.cp) : std::string(),
                      l.ep > 1 ? str(" ep=", l.ep) : std::string(), " zero=", l.zero);
  if (l.offload_cpu) s += " offload";
  if (l.recompute != Recompute::none) s += " rc=" + recompute_name(l.recompute);
  if (l.sequence_parallel && l.tp > 1) s += " sp";
  return s;
}

Cell bytes_cell(double v) { return Cell::num(v, format_bytes(v)); }
Cell seconds_cell(double v) { return std::isfinite(v) ? Cell::num(v, format_duration(v)) : Cell::null(); }

// The machine-readable columns shared by plan and recommend.
std::vector<Column> machine_columns(bool ranked) {
  std::vector<Column> cols;
  if (ranked) cols.push_back({"rank", "rank", true}), cols.push_back({"recommended", "recommended", false});
  for (const char* k :
       {"layout", "gpus", "gpus_per_node", "dp", "tp", "pp", "cp", "ep", "zero", "offload", "recompute", "attention", "micro_batch",
        "microbatches", "global_batch", "precision", "optimizer", "schedule", "model_params", "active_params", "flops_per_token",
        "params_bytes", "grads_bytes", "optimizer_bytes", "model_state_bytes", "activation_bytes",
        "comm_buffer_bytes", "overhead_bytes", "total_bytes", "gpu_mem_bytes", "headroom_bytes", "host_offload_bytes",
        "valid", "fits", "comm_dp_bytes", "comm_tp_bytes", "comm_pp_bytes", "comm_cp_bytes", "comm_ep_bytes", "comm_bytes", "bubble", "compute_s",
        "comm_s", "comm_total_s", "offload_s", "step_s", "tokens_per_s", "mfu", "why_not", "passed_over"})
    cols.push_back({k, k, false});
  return cols;
}

std::vector<Cell> machine_row(const PlanReport& r, const Estimate& e, std::optional<int64_t> rank) {
  const Layout& l = e.layout;
  const MemoryBreakdown& m = e.memory;
  auto num = [](double v) { return Cell::num(v, format_si(v, "")); };
  std::vector<Cell> row;
  if (rank) {
    row.push_back(*rank > 0 ? Cell::integer(*rank) : Cell::null());
    row.push_back(Cell::boolean(*rank == 1 && e.fits));
  }
  const double tokens = static_cast<double>(r.global_batch) * static_cast<double>(std::max<int64_t>(r.model.seq, 1));
  const bool ok = e.valid;
  auto v = [&](double x) { return ok ? num(x) : Cell::null(); };
  row.push_back(Cell::str(l.describe()));
  row.push_back(Cell::integer(l.gpus));
  row.push_back(Cell::integer(l.gpus_per_node));
  row.push_back(Cell::integer(l.dp));
  row.push_back(Cell::integer(l.tp));
  row.push_back(Cell::integer(l.pp));
  row.push_back(Cell::integer(l.cp));
  row.push_back(Cell::integer(l.ep));
  row.push_back(Cell::integer(l.zero));
  row.push_back(Cell::boolean(l.offload_cpu));
  row.push_back(Cell::str(recompute_name(l.recompute)));
  row.push_back(Cell::str(attention_name(l.attention)));
  row.push_back(Cell::integer(l.micro_batch));
  row.push_back(ok ? Cell::integer(l.microbatches) : Cell::null());
  row.push_back(Cell::integer(r.global_batch));
  row.push_back(Cell::str(std::string(l.precision.name())));
  row.push_back(Cell::str(std::string(l.optimizer.name())));
  row.push_back(Cell::str(std::string(l.schedule.name())));
  row.push_back(num(r.model.params));
  row.push_back(num(active_param_count(r.model)));
  row.push_back(num(r.flops_per_token));
  row.push_back(v(m.params));
  row.push_back(v(m.grads));
  row.push_back(v(m.optimizer));
  row.push_back(v(m.model_states()));
  row.push_back(v(m.activations));
  row.push_back(v(m.comm_buffers));
  row.push_back(v(m.overhead));
  row.push_back(v(m.total()));
  row.push_back(num(r.hardware.gpu_mem_bytes));
  row.push_back(v(e.headroom));
  row.push_back(v(m.host_offload));
  row.push_back(Cell::boolean(e.valid));
  row.push_back(Cell::boolean(e.fits));
  row.push_back(v(e.comm.dp));
  row.push_back(v(e.comm.tp));
  row.push_back(v(e.comm.pp));
  row.push_back(v(e.comm.cp));
  row.push_back(v(e.comm.ep));
  row.push_back(v(e.comm.total()));
  row.push_back(v(e.bubble));
  row.push_back(v(e.compute_seconds));
  row.push_back(v(e.comm_seconds));
  row.push_back(v(e.comm_total_seconds));
  row.push_back(v(e.offload_seconds));
  row.push_back(v(e.step_seconds));
  row.push_back(ok && e.step_seconds > 0 ? num(tokens / e.step_seconds) : Cell::null());
  // MFU the estimate implies: model FLOPs / (step x gpus x peak).
  const double peak = static_cast<double>(l.gpus) * r.hardware.peak_flops;
  row.push_back(ok && e.step_seconds > 0 && peak > 0 ? num(e.model_flops / (e.step_seconds * peak)) : Cell::null());
  row.push_back(e.why_not.empty() ? Cell::null("") : Cell::str(e.why_not));
  row.push_back(e.passed_over.empty() ? Cell::null("") : Cell::str(e.passed_over));
  return row;
}

bool machine(OutputFormat f) { return f == OutputFormat::json || f == OutputFormat::jsonl || f == OutputFormat::csv; }

std::string pct(double x) { return format_fixed(100 * x, 1) + "%"; }

// The order practitioners climb (kLadder), as a key: CPU offload last, then context
// parallelism, pipeline stages, tensor parallelism, expert parallelism (a mixture of experts
// shards its experts before it splits matrices), recompute, and the ZeRO stage first.
// Lexicographic: smaller is simpler.
std::array<int64_t, 7> complexity(const Layout& l) {
  return {l.offload_cpu ? 1 : 0, l.cp, l.pp, l.tp, l.ep, static_cast<int64_t>(l.recompute), l.zero};
}

// Whether a fitting layout leaves kComfortHeadroom of the GPU's memory free.
bool comfortable(const Estimate& e) {
  const double gpu_mem = e.memory.total() + e.headroom;
  return e.headroom >= kComfortHeadroom * gpu_mem;
}

// Why `e` is not `chosen` (chosen is simpler, or e is slower than the band allows).
std::string passed_over_because(const Estimate& e, const Estimate& chosen, double fastest) {
  const double vs_fastest = e.step_seconds / fastest - 1;
  if (vs_fastest > kSimplerWithin)
    return str("passed over: ", pct(vs_fastest), " slower than the fastest");
  const Layout &a = e.layout, &b = chosen.layout;
  std::string more;
  if (a.offload_cpu != b.offload_cpu) more = "CPU offload";
  else if (a.cp != b.cp) more = str("cp=", a.cp, " where cp=", b.cp, " fits");
  else if (a.pp != b.pp) more = str(a.pp, " pipeline stages where ", b.pp, " fit");
  else if (a.tp != b.tp) more = str("tp=", a.tp, " where tp=", b.tp, " fits");
  else if (a.ep != b.ep) more = str("ep=", a.ep, " where ep=", b.ep, " fits");
  else if (a.recompute != b.recompute) more = str(recompute_name(a.recompute), " recompute where ", recompute_name(b.recompute), " fits");
  else if (a.zero != b.zero) more = str("ZeRO-", a.zero, " where ZeRO-", b.zero, " fits");
  else if (!comfortable(e) && comfortable(chosen)) more = str("all but ", format_bytes(e.headroom), " of the GPU's memory");
  else more = "the same layout";
  const double vs_chosen = e.step_seconds / chosen.step_seconds - 1;
  return str("passed over: needs ", more, "; ",
             std::fabs(vs_chosen) < 5e-4 ? std::string("the same step")
                                         : pct(std::fabs(vs_chosen)) + (vs_chosen < 0 ? " faster" : " slower"),
             " (within ", format_fixed(kSimplerWithin * 100, 0), "% of the fastest)");
}

}  // namespace

const std::vector<Rung> kLadder = {
    {"DP", [](const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && !l.offload_cpu && l.recompute == Recompute::none && l.zero == 0; }},
    {"ZeRO-1", [](const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && !l.offload_cpu && l.recompute == Recompute::none && l.zero == 1; }},
    {"ZeRO-2", [](const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && !l.offload_cpu && l.recompute == Recompute::none && l.zero == 2; }},
    {"ZeRO-3/FSDP", [](const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && !l.offload_cpu && l.recompute == Recompute::none && l.zero == 3; }},
    {"selective recompute", [](const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && !l.offload_cpu && l.recompute == Recompute::selective; }},
    {"full recompute", [](const Layout& l) { return l.tp == 1 && l.pp == 1 && l.cp == 1 && l.ep == 1 && !l.offload_cpu && l.recompute == Recompute::full; }},
    {"EP (experts)", [](const Layout& l) { return l.ep > 1 && l.tp == 1 && l.pp == 1 && l.cp == 1 && !l.offload_cpu; }},
    {"TP inside a node", [](const Layout& l) { return l.tp > 1 && l.pp == 1 && l.cp == 1 && !l.offload_cpu; }},
    {"PP across nodes", [](const Layout& l) { return l.pp > 1 && l.cp == 1 && !l.offload_cpu; }},
    {"context parallelism", [](const Layout& l) { return l.cp > 1 && !l.offload_cpu; }},
    {"CPU offload", [](const Layout& l) { return l.offload_cpu; }},
};

std::string compact_layout(const Layout& l) {
  std::string s;
  if (l.tp > 1) s += str("tp=", l.tp, " ");
  if (l.pp > 1) s += str("pp=", l.pp, " ");
  if (l.cp > 1) s += str("cp=", l.cp, " ");
  if (l.ep > 1) s += str("ep=", l.ep, " ");
  s += str("zero=", l.zero);
  if (l.offload_cpu) s += " offload=cpu";
  if (l.recompute != Recompute::none) s += " recompute=" + recompute_name(l.recompute);
  if (l.sequence_parallel && l.tp > 1) s += " sp";
  return s;
}

std::vector<std::string> explain_ladder(const std::vector<Estimate>& rows) {
  std::vector<std::string> lines;
  const Estimate* recommended = !rows.empty() && rows.front().valid && rows.front().fits ? &rows.front() : nullptr;
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto& e : rows)
    if (e.valid && e.fits) fastest = std::min(fastest, e.step_seconds);
  lines.push_back("# the layouts practitioners try, simplest first (the recommended one is the first that fits within " +
                  format_fixed(kSimplerWithin * 100, 0) + "% of the fastest):");
  for (size_t i = 0; i < kLadder.size(); ++i) {
    const Rung& rung = kLadder[i];
    const Estimate *fit = nullptr, *closest = nullptr;
    for (const auto& e : rows) {
      if (!e.valid || !rung.holds(e.layout)) continue;
      if (e.fits && (!fit || e.step_seconds < fit->step_seconds)) fit = &e;
      if (!closest || e.memory.total() < closest->memory.total()) closest = &e;
    }
    if (recommended && rung.holds(recommended->layout)) fit = recommended;
    std::string what;
    const Estimate* shown = fit ? fit : closest;
    if (!shown) {
      what = "not searched (a fixed choice or the model rules it out)";
    } else if (shown == recommended) {
      what = str("recommended: ", format_bytes(shown->memory.total()), " per GPU, ~", format_duration(shown->step_seconds),
                 " per step");
    } else if (fit) {
      what = str("fits (", format_bytes(fit->memory.total()), ", ~", format_duration(fit->step_seconds), " per step, ",
                 pct(fit->step_seconds / fastest - 1), " over the fastest); ", fit->passed_over);
    } else {
      what = "does not fit: " + shown->why_not;
    }
    lines.push_back(str("# ", i + 1 < 10 ? " " : "", i + 1, ". ", rung.name, std::string(20 - std::min<size_t>(19, std::string(rung.name).size()), ' '),
                        shown ? short_layout(shown->layout) : std::string("-"), ": ", what));
  }
  return lines;
}

void prefer_simplest(std::vector<Estimate>& rows) {
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto& e : rows)
    if (e.valid && e.fits) fastest = std::min(fastest, e.step_seconds);
  if (!std::isfinite(fastest)) return;
  // Within the band, a layout that leaves kComfortHeadroom free beats a simpler one that does
  // not (allocator spikes the model does not count), when there is one.
  bool any_comfortable = false;
  for (const auto& e : rows)
    any_comfortable = any_comfortable || (e.valid && e.fits && e.step_seconds <= fastest * (1 + kSimplerWithin) && comfortable(e));
  auto chosen = rows.end();
  for (auto it = rows.begin(); it != rows.end(); ++it) {
    if (!it->valid || !it->fits || it->step_seconds > fastest * (1 + kSimplerWithin)) continue;
    if (any_comfortable && !comfortable(*it)) continue;
    if (chosen == rows.end() || complexity(it->layout) < complexity(chosen->layout)) chosen = it;
  }
  std::rotate(rows.begin(), chosen, chosen + 1);  // the rest keep their order (fastest first)
  for (auto it = rows.begin() + 1; it != rows.end(); ++it)
    if (it->valid && it->fits) it->passed_over = passed_over_because(*it, rows.front(), fastest);
}

const Estimate* PlanReport::best() const {
  for (const auto& e : rows)
    if (e.valid && e.fits) return &e;
  return nullptr;
}

PlanReport make_plan(const PlanInputs& in) {
  Setup s = setup(in);
  PlanReport& r = s.report;
  const Config* c = s.config ? &*s.config : nullptr;
  Layout l = r.base;
  l.tp = in.fixed.tp.value_or(c ? c->parallel.tp : 1);
  l.pp = in.fixed.pp.value_or(c ? c->parallel.pp : 1);
  l.cp = in.fixed.cp.value_or(1);
  l.ep = in.fixed.ep.value_or(1);
  l.offload_cpu = in.fixed.offload.value_or(c ? c->parallel.offload == Offload::cpu : false);
  l.recompute = in.fixed.recompute.value_or(c && c->parallel.activation_checkpointing ? Recompute::full : Recompute::none);
  if (in.fixed.dp) l.dp = *in.fixed.dp;
  else l.dp = (l.tp > 0 && l.pp > 0 && l.cp > 0 && in.gpus % (l.tp * l.pp * l.cp) == 0) ? in.gpus / (l.tp * l.pp * l.cp) : 0;
  if (c && !in.global_batch && l.dp > 0) {
    // A config's run: dl-train steps over train.batch_size x accumulation x pipeline
    // micro-batches per data-parallel rank, whatever tp and pp are (gpus x ... would count each
    // tensor- and pipeline-parallel rank as another replica).
    r.global_batch = l.dp * r.base.micro_batch * std::max<int64_t>(micro_batches_per_step(*c), 1);
    for (auto& n : r.notes)
      if (n.rfind("# global batch: ", 0) == 0)
        n = str("# global batch: ", r.global_batch, " sequences per step (dp x train.batch_size x accumulation, as "
                "dl-train runs the config; ", option_flag(in.flags, "global_batch"), " to change)");
  }
  if (c && c->parallel.dp > 0 && c->parallel.dp != l.dp && !in.fixed.dp)
    r.notes.push_back(str("# the config's parallel.dp = ", c->parallel.dp, " is replaced by gpus / (tp x pp) = ", l.dp));
  if (l.ep > 1 && l.dp > 0 && l.dp % l.ep != 0)
    throw_option_error("{ep} ", l.ep, " does not divide dp = ", l.dp,
                       " (experts are sharded over the data-parallel ranks: gpus / (tp x pp x cp))");
  std::vector<int64_t> zeros = in.fixed.zero ? std::vector<int64_t>{*in.fixed.zero} : std::vector<int64_t>{0, 1, 2, 3};
  if (!in.fixed.zero && l.dp == 1) {
    zeros = {0};
    r.notes.push_back("# dp = 1: ZeRO has nothing to shard across (zero 1..3 equal zero 0 here)");
  }
  std::vector<Estimate> impossible;
  for (int64_t z : zeros) {
    Layout lz = l;
    lz.zero = z;
    Estimate e;
    if (lz.dp == 0) {
      e.layout = lz;
      e.valid = false;
      e.why_not = str("tp x pp = ", l.tp, " x ", l.pp, " = ", l.tp * l.pp, " does not divide the ", in.gpus, " GPUs");
    } else {
      e = estimate(r.model, lz, r.hardware, r.global_batch);
    }
    (e.valid ? r.rows : impossible).push_back(std::move(e));
  }
  if (r.rows.empty()) throw_usage("impossible layout: ", impossible.front().why_not);
  for (const auto& e : impossible) {
    r.notes.push_back(str("# left out: zero=", e.layout.zero, ": ", e.why_not));
    ++r.impossible;
  }
  return r;
}

PlanReport make_recommendation(const PlanInputs& in) {
  Setup s = setup(in);
  PlanReport& r = s.report;
  Layout base = r.base;
  base.recompute = in.fixed.recompute.value_or(Recompute::none);
  r.rows = enumerate_layouts(r.model, base, r.hardware, r.global_batch, in.fixed);
  bool any_valid = false;
  for (const auto& e : r.rows) any_valid = any_valid || e.valid;
  if (!any_valid) {
    std::string why;
    for (const auto& e : r.rows) why += (why.empty() ? "" : "; ") + e.why_not;
    throw_usage("no possible layout for ", in.gpus, " GPUs: ", why.empty() ? "nothing to search" : why);
  }
  prefer_simplest(r.rows);
  r.notes.push_back(str("# recommended: the first fitting layout in the order practitioners try (DP, ZeRO-1, ZeRO-2, "
                        "ZeRO-3/FSDP, selective then full recompute, EP for a mixture of experts, TP inside a node, PP across "
                        "nodes, context parallelism, CPU offload last) within ", format_fixed(kSimplerWithin * 100, 0),
                        "% of the fastest estimated step, leaving ", format_fixed(kComfortHeadroom * 100, 0),
                        "% of the GPU free where one does; the others say why they were passed over (--explain: the "
                        "comparison)"));
  return r;
}

std::string render_plan(const PlanReport& r, OutputFormat f, int64_t top) {
  const size_t shown = top > 0 ? std::min(r.rows.size(), static_cast<size_t>(top)) : r.rows.size();
  const std::span<const Estimate> rows(r.rows.data(), shown);
  if (machine(f)) {
    Table t(machine_columns(false));
    for (const auto& e : rows) t.add_row(machine_row(r, e, std::nullopt));
    return t.render(f);
  }
  Table t({{"layout", "layout", false},
           {"model_states", "model states", true},
           {"params", "params", true},
           {"grads", "grads", true},
           {"optimizer", "optimizer", true},
           {"activations", "activations", true},
           {"buffers", "comm buffers", true},
           {"overhead", "overhead", true},
           {"total", "total/GPU", true},
           {"headroom", "headroom", true},
           {"fits", "fits", false},
           {"host", "host/GPU", true},
           {"comm", "comm/step", true},
           {"bubble", "bubble", true},
           {"step", "step (est.)", true}});
  for (const auto& e : rows) {
    const auto& m = e.memory;
    t.add_row({Cell::str(short_layout(e.layout)), bytes_cell(m.model_states()), bytes_cell(m.params),
               bytes_cell(m.grads), bytes_cell(m.optimizer), bytes_cell(m.activations), bytes_cell(m.comm_buffers),
               bytes_cell(m.overhead), bytes_cell(m.total()), bytes_cell(e.headroom), Cell::boolean(e.fits),
               m.host_offload > 0 ? bytes_cell(m.host_offload) : Cell::null(), bytes_cell(e.comm.total()),
               Cell::num(e.bubble, pct(e.bubble)), seconds_cell(e.step_seconds)});
  }
  for (const auto& e : rows)
    if (!e.fits) t.add_note(str("# ", short_layout(e.layout), " does not fit: ", e.why_not));
  if (shown < r.rows.size())
    t.add_note(str("# showing ", shown, " of ", r.rows.size(), " layouts (", option_flag(r.flags, "top"), " 0 shows all)"));
  for (const auto& n : r.notes) t.add_note(n);
  return t.render(f);
}

std::string render_recommendation(const PlanReport& r, OutputFormat f, int64_t top) {
  // Which rows to show: the first `top` of the fitting ones and of the others.
  std::vector<std::pair<const Estimate*, int64_t>> shown;  // row, rank (0: not ranked)
  size_t fitting = 0, other = 0, shown_fit = 0, shown_other = 0;
  int64_t rank = 0;
  for (const auto& e : r.rows) {
    const bool fit = e.valid && e.fits;
    if (fit) ++rank;
    size_t& count = fit ? fitting : other;
    size_t& shown_count = fit ? shown_fit : shown_other;
    ++count;
    if (top <= 0 || static_cast<int64_t>(shown_count) < top) {
      shown.emplace_back(&e, fit ? rank : 0);
      ++shown_count;
    }
  }
  if (machine(f)) {
    Table t(machine_columns(true));
    for (const auto& [e, rk] : shown) t.add_row(machine_row(r, *e, rk));
    return t.render(f);
  }
  Table t({{"rank", "#", true},
           {"layout", "layout", false},
           {"total", "total/GPU", true},
           {"headroom", "headroom", true},
           {"host", "host/GPU", true},
           {"comm", "comm/step", true},
           {"bubble", "bubble", true},
           {"step", "step (est.)", true},
           {"why_not", "why not", false}});
  for (const auto& [e, rk] : shown) {
    t.add_row({rk ? Cell::integer(rk) : Cell::null(), Cell::str(short_layout(e->layout)), bytes_cell(e->memory.total()),
               bytes_cell(e->headroom), e->memory.host_offload > 0 ? bytes_cell(e->memory.host_offload) : Cell::null(),
               bytes_cell(e->comm.total()), Cell::num(e->bubble, pct(e->bubble)), seconds_cell(e->step_seconds),
               Cell::str(e->fits ? e->passed_over : e->why_not)});
  }
  t.add_note(str("# showing ", shown_fit, " of ", fitting, " fitting and ", shown_other, " of ", other,
                 " non-fitting layouts", top > 0 && (shown_fit < fitting || shown_other < other) ? " (" + option_flag(r.flags, "top") + " 0 shows all)" : ""));
  for (const auto& n : r.notes) t.add_note(n);
  std::string head;
  if (const Estimate* b = r.best()) {
    head = str("recommended: ", b->layout.describe(), " — ", format_bytes(b->memory.total()), " of ",
               format_bytes(r.hardware.gpu_mem_bytes), " per GPU (", format_bytes(b->headroom), " headroom), ~",
               format_duration(b->step_seconds), " per step (estimate)\n\n");
  } else {
    head = str("no layout fits in ", format_bytes(r.hardware.gpu_mem_bytes), " per GPU",
               r.rows.empty() ? std::string() : "; the closest: " + r.rows.front().layout.describe() + ": " + r.rows.front().why_not,
               "\n\n");
  }
  return head + t.render(f);
}

}  // namespace dl::plan
