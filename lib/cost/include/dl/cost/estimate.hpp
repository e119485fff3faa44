// dl-cost estimate and onprem: the time and money an experiment takes on each cloud offer.
//
//   work (FLOPs)  = tokens x FLOPs per token (plan::flops_per_token), or --flops, or a reference
//                   run's hours x that offer's speed
//   speed (FLOP/s) = GPUs x per-GPU speed x scaling efficiency (x 3/4 with full recompute)
//   hours         = work / speed / 3600
//   cost          = hours x instance $/h x instances
//   spot          : hours / (1 - preemptions per hour x (checkpoint interval / 2 + restart)),
//                   priced at the spot rate
//
// Per-GPU speed, in order of preference: measured (dl-bench rows of that GPU model), the
// relative-throughput table scaled from an anchor GPU, the datasheet peak x MFU. Every formula,
// default and source: docs/COST.md.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dl/cli/table.hpp"
#include "dl/config/choice.hpp"
#include "dl/core/option_error.hpp"
#include "dl/cost/catalog.hpp"
#include "dl/cost/goodput.hpp"
#include "dl/cost/throughput.hpp"
#include "dl/plan/plan.hpp"
#include "dl/plan/report.hpp"
#include "dl/plan/speed.hpp"

namespace dl::cost {

// Multi-GPU scaling efficiency: the fraction of n x one GPU's speed that n GPUs reach.
// By default (fixed = false) estimate computes it from communication: plan::estimate's step for
// data parallelism at the row's ZeRO stage, the model's gradient and parameter traffic over the
// GPU's intra-instance busbw and the bandwidth between instances (see comm_efficiency). With
// fixed = true (any --eff-* flag, and onprem) the constants below: within one instance e^log2(n)
// with e per interconnect class; across instances each further doubling also costs `internode`.
// eff(1) = 1.
struct ScalingModel {
  bool fixed = false;      // true: the per-doubling constants instead of the communication model
  double nvlink = 0.97;    // per doubling, NVLink/NVSwitch boards
  double pcie = 0.90;      // per doubling, datacenter/workstation cards over PCIe
  double consumer = 0.85;  // per doubling, GeForce cards (no peer-to-peer)
  double internode = 0.90; // per doubling of instances (InfiniBand/Ethernet between machines)
  double per_doubling(Interconnect c) const;
  // gpus used, gpus_per_instance of the offer.
  double efficiency(Interconnect c, int64_t gpus, int64_t gpus_per_instance) const;
};

// Expected wall time on spot capacity: a preemption (a Poisson process at `preempt_per_hour`
// per instance; any instance's preemption stops a synchronous job) loses the work since the
// last checkpoint, half an interval on average, plus `restart_hours` to get capacity back and
// reload. wall = hours / (1 - rate x instances x (interval / 2 + restart)); infinite when the
// bracket is <= 0 (the job would not finish).
struct SpotModel {
  double preempt_per_hour = 0.05;  // per instance-hour (an assumption; docs/COST.md)
  double restart_hours = 0.25;
};
struct SpotOutcome {
  double wall_hours = 0;        // expected, including lost work and restarts (inf: never finishes)
  double preemptions = 0;       // expected number
  double overhead_hours = 0;    // wall - compute
  bool finishes = true;
};
SpotOutcome spot_outcome(double compute_hours, double checkpoint_interval_hours, int64_t instances, const SpotModel& m);

// What the experiment is: total work and, when known, tokens and the model (for memory).
struct Experiment {
  std::string description;                 // "gpt2-124m.toml: 19000 steps x 512 x 1024 tokens"
  std::optional<plan::ModelShape> model;   // for FLOPs per token and the memory check
  std::optional<double> tokens;            // for $ per 1B tokens
  double flops = 0;                        // total model FLOPs (0 in --hours mode until resolved)
  double flops_per_token = 0;
  std::string formula;                     // "6N+12LHQT (PaLM)" or "given (--flops)"
  Choice<Precision> precision = Precision::bf16;
  Choice<StateOptimizer> optimizer = StateOptimizer::adamw;
  int64_t micro_batch = 1;
  bool micro_batch_given = false;          // from the config or --micro-batch (else 1 for the memory check)
  int64_t steps = 0;                       // optimizer steps (config), 0 when unknown
  int64_t checkpoint_every = -1;           // steps (config); -1 unknown, 0 only at the end
  double batch_tokens = 0;                 // tokens per optimizer step (the communication model)
  std::vector<std::string> notes;
  // The model and training flags as dl-shard takes them: check_fit adds the GPUs and calls
  // dl-shard's recommendation, so the two tools choose the same layout with the same memory.
  plan::PlanInputs plan;
};

// Where a GPU's speed comes from (--speed bench,relative,analytic), in the order errors list them.
enum class SpeedSource { bench, relative, analytic };
inline constexpr std::string_view kSpeedSourceNames[] = {"bench", "relative", "analytic"};
constexpr std::span<const std::string_view> choice_names(SpeedSource) { return kSpeedSourceNames; }
inline const std::vector<SpeedSource> kAllSpeedSources = {SpeedSource::bench, SpeedSource::relative, SpeedSource::analytic};

struct EstimateInputs {
  // The experiment: one of a dl-train config, --tokens with --params, --flops, --hours with --on.
  std::string config_path;
  std::vector<std::string> sets;
  std::optional<double> tokens, params, flops, hours;
  std::string on_offer;                 // --on: the reference run's offer
  std::optional<int64_t> on_gpus;       // --on-gpus: GPUs of the reference run (default: the offer's)
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  plan::ArchHints arch;                  // --arch, --kv-heads, --ffn-hidden, --untied-head, --hf-config
  std::optional<std::string> precision;  // default: the config's, else bf16
  std::optional<int64_t> micro_batch;    // default: the config's train.batch_size, else 1
  // Recompute the run is known to use (dl-shard's --recompute): fixed in the layout search
  // instead of chosen (held-out runs whose configs checkpoint activations).
  std::optional<plan::Recompute> recompute;
  // Other layout choices the run is known to use (held-out rows with a published layout): fixed
  // in the search as dl-shard's --tp, --pp, --ep, --zero fix them.
  plan::LayoutSearch layout;
  bool uneven_stages = false;  // plan::Layout::uneven_stages (a published layout of pp dividing no layer count)
  plan::MoeOverlap moe_overlap = plan::MoeOverlap::none;  // --moe-overlap
  plan::FlopFormula formula = plan::FlopFormula::palm;
  // Offers and speed.
  std::vector<std::string> catalogs;     // empty: the shipped catalog
  // Offers priced besides the catalogs' (a held-out run's own cluster, on a GPU no shipped offer has).
  std::vector<Offer> offers;
  bool strict = false;
  std::string gpu_filter, provider_filter;
  std::vector<std::string> bench;        // dl-bench json/jsonl files ("-": stdin)
  std::vector<std::string> throughput;   // relative-throughput TOML or Lambda CSVs; empty: shipped
  std::string reference_gpu = "A100-SXM-80GB";  // for --throughput CSVs
  std::vector<SpeedSource> speed_sources = kAllSpeedSources;
  double mfu = 0;                        // 0: the calibrated MFU (plan/speed.hpp); else a fixed fraction of peak
  std::optional<double> batch_tokens;    // tokens per optimizer step (communication); default: the config's, else 524288
  std::vector<int64_t> gpus;             // GPU counts; empty: each offer's own instance size
  ScalingModel scaling;
  bool spot = false;                     // also price spot capacity
  SpotModel spot_model;
  std::optional<double> checkpoint_hours;  // overrides the config's checkpoint interval
  GoodputModel goodput;                  // evaluation, checkpoints, failures (goodput.hpp)
  // Between instances, per GPU: a plan::find_fabric() preset or bandwidth. Default: ib-ndr
  // (50 GB/s) on multi-GPU NVLink offers, a shared 100 Gb Ethernet on the others.
  std::optional<std::string> fabric;
  std::optional<double> budget, deadline;  // USD, hours
  OptionNames flags;                     // the tool's flag for each option, for notes that name one
};

// Per-GPU speed of one GPU model and where it comes from.
struct GpuSpeed {
  double flops = 0;          // achieved model FLOP/s per GPU
  std::string source;        // "bench" | "relative" | "analytic"
  std::string detail;        // "train row of bench.json", "x1.79 vs A100-SXM-80GB analytic", ...
  double model_flops = 0;    // what the calibrated model alone gives this GPU (flops / model_flops: the adjustment)
  bool measured = false;     // a measurement of this GPU: bench rows, the relative table or published runs
};

struct CostRow {
  Offer offer;
  int64_t gpus = 0;          // GPUs the job uses
  int64_t instances = 0;     // instances billed: ceil(gpus / gpus per instance)
  int64_t billed_gpus = 0;   // instances x gpus per instance
  bool spot = false;         // priced at the spot rate
  double usd_per_hour = 0;   // all billed instances
  double usd_per_gpu_hour = 0;  // the instance price / its GPUs
  GpuSpeed speed;
  double efficiency = 1;     // scaling efficiency at this GPU count
  double dp_efficiency = 1;  // of which data parallelism's (CommScaling::dp_efficiency)
  double replica_tokens = 0; // tokens per data-parallel replica per step (0: no model)
  int64_t microbatches = 0;  // micro-batches per replica per step
  std::string dp_detail;     // CommScaling::dp_detail (--explain)
  std::string ep_detail;     // CommScaling::ep_detail (--explain)
  double recompute_factor = 1;  // model / hardware FLOPs of the layout (3/4 with full recompute)
  double flops_per_s = 0;    // whole job: gpus x per-GPU x efficiency x recompute factor
  double compute_hours = 0;  // work / speed
  Goodput goodput;           // evaluation, checkpoints and failures on top of compute_hours
  double hours = 0;          // wall hours: compute_hours / goodput (spot: expected, with preemptions too)
  double hours_low = 0, hours_high = 0;  // the range: the calibration's spread of measured / modelled speed
  double total_usd = 0;
  double usd_low = 0, usd_high = 0;
  std::optional<double> usd_per_1b_tokens;
  std::optional<double> tokens_per_s;
  std::optional<bool> fits;  // nullopt: no model to check
  std::string layout;        // "zero=0", "tp=8 pp=4 zero=1 sp" (dl-shard recommend's choice)
  std::vector<std::string> explain;  // the layouts tried in order and why (--explain)
  double mem_per_gpu = 0;    // bytes, of the chosen (or smallest) layout
  std::string why_not;       // when it does not fit or (spot) does not finish
  SpotOutcome spot_outcome;
  double checkpoint_hours = 0;
  bool cheapest = false, fastest = false, best = false, cheapest_per_gpu_hour = false;
  bool eligible() const { return fits.value_or(true) && spot_outcome.finishes && goodput.finishes; }
  double gpu_hours() const { return hours * static_cast<double>(gpus); }
};

struct CostReport {
  Experiment experiment;
  std::vector<CostRow> rows;          // fitting first, each group by total cost
  std::vector<std::string> skipped;   // "offer-id: reason"
  std::vector<std::string> warnings;  // catalog and throughput warnings (the tool logs them)
  std::vector<std::string> notes;     // assumptions and sources
  std::vector<std::string> callouts;  // cheapest, fastest, best, the per-hour lesson
  bool constraints_met = true;        // false: --budget/--deadline given and no row meets them
  std::map<std::string, GpuSpeed> speeds;  // per GPU model
};

// Everything the estimate needs besides the experiment, loaded once (onprem reuses it).
struct SpeedModel {
  Precision precision = Precision::bf16;
  double mfu = 0;        // 0: calibrated (plan::calibrated_mfu at `params`); else a fixed fraction of peak
  double params = 0;     // the model's size for the calibrated MFU (0: unknown)
  std::vector<SpeedSource> sources = kAllSpeedSources;
  std::map<std::string, GpuSpeed> measured;   // bench: per GPU model
  std::optional<RelativeThroughput> relative;
  std::vector<std::string> notes;
  OptionNames flags;     // for the reasons that name an option
  // The speed of a GPU model; nullopt with *why when no allowed source knows it.
  std::optional<GpuSpeed> speed(const std::string& gpu_model, std::string* why = nullptr) const;
};
// bench: rows of all files, grouped by gpu_model (CPU rows ignored with a note).
SpeedModel make_speed_model(const std::vector<std::string>& bench, const std::vector<std::string>& throughput,
                            const std::string& reference_gpu, const std::vector<SpeedSource>& sources,
                            Precision precision, double mfu, double params = 0, const OptionNames& flags = {});
// "auto" | a comma list of bench, relative, analytic; usage error otherwise.
std::vector<SpeedSource> parse_speed_sources(const std::string& s);

// The experiment from the inputs (config, --tokens/--params, --flops; --hours is resolved in
// make_estimate once the reference offer's speed is known). Usage errors for conflicting or
// missing inputs and for negative values.
Experiment make_experiment(const EstimateInputs& in);

// Which layout the model trains in on `gpus` GPUs of the offer: dl-shard recommend's choice
// (plan::make_recommendation with the experiment's model, micro-batch, precision and global
// batch, the offer's GPU and memory, its instance as a node): the first layout that fits in the
// order practitioners try (DP, ZeRO-1..3, recompute, TP, PP, offload). fits nullopt without a
// model; without a fitting layout, the one needing the least memory and why.
struct FitResult {
  std::optional<bool> fits;
  std::string layout;               // plan::compact_layout: "zero=2", "tp=8 pp=4 zero=1 sp"
  std::optional<plan::Layout> plan_layout;  // the chosen layout (comm_efficiency prices it)
  double mem_per_gpu = 0;
  double recompute_factor = 1;      // model FLOPs / hardware FLOPs (recompute repeats work)
  int64_t global_batch = 0;         // sequences per step the layouts were searched for
  std::string why_not;
  std::vector<std::string> explain; // plan::explain_ladder of the search (--explain)
};
FitResult check_fit(const Experiment& e, const Offer& o, int64_t gpus);
// The global batch in sequences the fit is searched for: batch_tokens / seq rounded up to whole
// micro-batches (whole: to a multiple of gpus x micro-batch, at least one micro-batch per GPU; a
// model without a sequence: at least one per GPU either way).
int64_t fit_global_batch(const Experiment& e, int64_t gpus, bool whole = false);

// Scaling efficiency of `gpus` GPUs of offer `o` at `per_gpu_flops` each, from communication:
// compute / step of plan::estimate for the fit's layout (exposed communication, the pipeline
// bubble and offload traffic lower it); the offer's instance as a node (the GPU's intra-node
// busbw), between instances 50 GB/s per GPU on NVLink-class offers (InfiniBand, as
// plan::Hardware), else 12.5 GB/s (100 Gb Ethernet) per instance shared by its GPUs.
// Efficiency 1 without a model or a fitting layout. `layout` is unused (kept empty).
struct CommScaling {
  double efficiency = 1;
  std::string layout;
  // Data parallelism alone: compute / (compute + the exposed DP traffic) of one step, with the
  // per-replica batch it is amortized over (global batch / dp: tokens and micro-batches).
  double dp_efficiency = 1;
  double replica_tokens = 0;
  int64_t microbatches = 0;
  std::string dp_detail;  // "8,192 tokens per replica (4 micro-batches): DP traffic 0.56 s, 0.37 s exposed of a 1.14 s step"
  // A mixture of experts with ep > 1: the all-to-alls' time, what of it is exposed, and how they
  // are priced (plan::describe_all_to_all).
  std::string ep_detail;
};
// `inter_node_bw` (bytes/s per GPU, from --fabric) replaces the default between instances.
CommScaling comm_efficiency(const Experiment& e, const Offer& o, int64_t gpus, const FitResult& fit, double per_gpu_flops,
                            std::optional<double> inter_node_bw = std::nullopt);
// The global batch (--global-batch) when neither the flag nor a config gives it: GPT-3 125M's and
// llm.c's 0.5M tokens per step.
inline constexpr double kDefaultBatchTokens = 524288;

CostReport make_estimate(const EstimateInputs& in);
// top: rows shown (0: all).
std::string render_estimate(const CostReport& r, OutputFormat f, int64_t top);

// --explain: for each distinct GPU model, memory and count among the first `top` rows (0: all),
// the ladder of layouts dl-shard recommend tried (FitResult::explain).
std::string render_layout_explanation(const CostReport& r, int64_t top);

// dl-cost offers: the catalog, filtered; unusable offers listed with the reason.
std::string render_offers(const Catalog& c, const std::vector<const Offer*>& offers, OutputFormat f);

// dl-cost onprem: buying a machine vs renting the same work.
//   on-prem power per month = watts / 1000 x 730 h x utilization x PUE x kWh price
//   cloud per month         = (730 h x utilization x on-prem speed / offer speed) x offer $/h x instances
//   break-even months       = price / (cloud per month - power per month)
struct OnpremInputs {
  double price = 0, watts = 0, kwh_price = 0, utilization = 0, years = 0;
  double pue = 1.0;
  std::string gpu;               // the machine's GPU model (default: the --vs offer's)
  std::optional<int64_t> gpus;   // the machine's GPU count (default: the --vs offer's, else 1)
  std::string vs;                // compare with this offer only
  std::vector<std::string> catalogs;
  bool strict = false;
  std::string gpu_filter, provider_filter;
  std::vector<std::string> bench, throughput;
  std::string reference_gpu = "A100-SXM-80GB";
  std::vector<SpeedSource> speed_sources = kAllSpeedSources;
  Precision precision = Precision::bf16;
  double mfu = 0;  // 0: calibrated (for an unknown model size)
  ScalingModel scaling;
  bool spot = false;
  OptionNames flags;  // as EstimateInputs::flags
};
struct OnpremRow {
  Offer offer;
  bool spot = false;
  int64_t gpus = 0, instances = 0;
  double cloud_hours_per_month = 0;
  double cloud_per_month = 0;
  double power_per_month = 0;
  double onprem_per_month = 0;   // power + price / (12 x years)
  std::optional<double> breakeven_months;  // nullopt: never (cloud <= power)
  double savings_over_life = 0;  // cloud x 12Y - (price + power x 12Y)
  GpuSpeed speed;
  double efficiency = 1;
  bool best = false;
};
struct OnpremReport {
  OnpremInputs inputs;
  std::string gpu_model;
  int64_t gpus = 1;
  GpuSpeed onprem_speed;
  double onprem_flops_per_s = 0;
  std::vector<OnpremRow> rows;   // by cloud cost per month
  std::vector<std::string> skipped, warnings, notes, callouts;
};
OnpremReport make_onprem(const OnpremInputs& in);
std::string render_onprem(const OnpremReport& r, OutputFormat f, int64_t top);

inline constexpr double kHoursPerMonth = 730.0;  // 365 x 24 / 12

// dl-cost's default estimate of every published run the speed model is calibrated on
// (plan::published_runs), against what the run measured: docs/COST.md's validation table.
// Wall-clock runs compare hours; MFU-only rows compare the time the MFU implies for the same
// work (error = estimated / measured - 1 either way). Each run is priced on the shipped
// catalog's 8-GPU instances of its GPU, with its GPU count, in bf16, with the default inputs.
struct ValidationRow {
  plan::PublishedRun run;
  double measured_hours = 0, estimated_hours = 0;
  double measured_mfu = 0, estimated_mfu = 0;
  double error = 0;   // estimated / measured hours - 1
  double limit = 0;   // 0.25, or 0.30 (GPU-hours) for runs on 100 or more GPUs
  std::string offer;  // the offer priced
};
std::vector<ValidationRow> validate_published_runs();
// What validate prices a published run with: the shipped catalog, its GPU and count, bf16, its
// model (--params and the shape), and the row of that count on 8-GPU instances of the GPU.
EstimateInputs validation_inputs(const std::string& gpu, int64_t gpus, double params, int64_t layers, int64_t hidden,
                                 int64_t heads, int64_t seq, int64_t vocab, const plan::ArchHints& arch);
const CostRow& validation_row(const CostReport& r, const std::string& gpu, int64_t gpus, const std::string& run);
std::string render_validation(const std::vector<ValidationRow>& rows, OutputFormat f);

// Published training runs the speed model was NOT fitted on (docs/COST.md "Held-out runs"): none
// of them feeds a constant of the model. Each is priced as `dl-cost estimate` prices it (the
// shipped catalog's 8-GPU instances of its GPU, its count, shape, global batch and fabric) and
// compared on GPU-hours: all-in figures (failures, restarts, evaluation inside) against dl-cost's
// hours with goodput, compute figures (from logged step time or throughput) against its compute
// hours.
enum class HeldOutScope { all_in, compute };
struct HeldOutRun {
  std::string name;       // "Llama 2 7B"
  std::string source;     // URL and where the figure is quoted
  std::string gpu;        // canonical model
  int64_t gpus = 0;
  bool gpus_published = true;  // false: an assumed count (the note says which and why)
  double params = 0;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  plan::ArchHints arch;
  double tokens = 0;
  double global_batch = 0;     // tokens per optimizer step
  int64_t micro_batch = 0;     // sequences per GPU per micro-batch as trained (0: dl-cost's default)
  std::optional<plan::Recompute> recompute;  // activation checkpointing as trained (nullopt: searched)
  std::string fabric;          // a --fabric preset or bandwidth; "" the default
  // The run's published layout and schedule where known (nullopt and none: searched, as dl-cost
  // estimate does): layout.tp, pp, ep, zero fixed in the search; uneven pipeline stages (stages
  // of ceil(L / pp) blocks, as Megatron-LM's first/last-stage layer counts allow); the MoE
  // options (max_nodes in arch.moe_max_nodes).
  plan::LayoutSearch layout;
  bool uneven_stages = false;
  plan::MoeOverlap moe_overlap = plan::MoeOverlap::none;
  std::string precision = "bf16";
  // > 0: priced on the run's own cluster of 8-GPU nodes at this USD per GPU-hour (a GPU no shipped
  // offer has; the published rental price the run's report assumes).
  double usd_per_gpu_hour = 0;
  double gpu_hours = 0;        // as published (0: no confirmed figure)
  HeldOutScope scope = HeldOutScope::all_in;
  std::string status;          // "C1" primary text seen, "C2" secondary, "not confirmed"
  std::string note;            // assumptions, unconfirmed (M) shape fields, what is not modelled
  std::string excluded;        // why it is not scored ("" scored)
};
const std::vector<HeldOutRun>& held_out_runs();
// validation_inputs with the run's tokens, global batch, micro-batch, recompute and fabric.
EstimateInputs held_out_inputs(const HeldOutRun& run);
struct HeldOutRow {
  HeldOutRun run;
  double estimated_gpu_hours = 0;  // all-in or compute, as the run's scope
  double ratio = 0;                // estimated / published (0 when not scored)
  std::string layout;
  double efficiency = 1, dp_efficiency = 1, goodput = 1;
  bool scored() const { return run.excluded.empty() && run.gpu_hours > 0; }
};
std::vector<HeldOutRow> validate_held_out();
// The score over the scored rows: median |ratio - 1|, the extreme ratios, rows outside 0.6-1.6x.
struct HeldOutScore {
  size_t scored = 0, outside = 0;
  double median_abs_error = 0, min_ratio = 0, max_ratio = 0;
};
HeldOutScore score_held_out(const std::vector<HeldOutRow>& rows);
inline constexpr double kHeldOutMedianLimit = 0.15;
inline constexpr double kHeldOutRatioLow = 0.6, kHeldOutRatioHigh = 1.6;
std::string render_held_out(const std::vector<HeldOutRow>& rows, OutputFormat f);
// dl-cost validate: the fitted table and the held-out table (human formats: one after the other;
// json/jsonl/csv: one table, the `set` column "fitted" or "held-out").
std::string render_validation(const std::vector<ValidationRow>& fitted, const std::vector<HeldOutRow>& held_out,
                              OutputFormat f);

}  // namespace dl::cost
