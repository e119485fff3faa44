// dl-cost: time and money an experiment takes on each cloud GPU offer, the catalog of offers,
// and when buying a machine pays off. The arithmetic lives in lib/cost (docs/COST.md).
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>

#include "dl/backend/build_info.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/command_line.hpp"
#include "dl/cli/table.hpp"
#include "dl/cli/units.hpp"
#include "dl/core/error.hpp"
#include "dl/core/version.hpp"
#include "dl/cost/estimate.hpp"
#include "dl/plan/arch_flags.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/sweep/asha.hpp"
#include "dl/sweep/spec.hpp"

namespace {

// The library names options {on_offer}; these are dl-cost's flags for them.
const dl::OptionNames kFlags = {
    {"sets", "--set"},           {"tokens", "--tokens"},         {"params", "--params"},
    {"flops", "--flops"},        {"hours", "--hours"},           {"on_offer", "--on"},
    {"on_gpus", "--on-gpus"},    {"layers", "--layers"},         {"hidden", "--hidden"},
    {"heads", "--heads"},        {"seq", "--seq"},               {"vocab", "--vocab"},
    {"precision", "--precision"}, {"micro_batch", "--micro-batch"}, {"batch_tokens", "--global-batch"},
    {"mfu", "--mfu"},            {"nvlink", "--eff-nvlink"},     {"pcie", "--eff-pcie"},
    {"consumer", "--eff-consumer"}, {"internode", "--eff-internode"}, {"preempt_per_hour", "--preempt-rate"},
    {"restart_hours", "--restart"}, {"checkpoint_hours", "--checkpoint-interval"}, {"budget", "--budget"},
    {"deadline", "--deadline"},  {"gpus", "--gpus"},             {"gpu_filter", "--gpu"},
    {"provider_filter", "--provider"}, {"speed_sources", "--speed"}, {"bench", "--bench"},
    {"throughput", "--throughput"}, {"catalogs", "--catalog"},   {"price", "--price"},
    {"watts", "--watts"},        {"kwh_price", "--kwh-price"},   {"utilization", "--utilization"},
    {"years", "--years"},        {"pue", "--pue"},               {"gpu", "--gpu"},
    {"vs", "--vs"},              {"arch", "--arch"},             {"kv_heads", "--kv-heads"},
    {"ffn_hidden", "--ffn-hidden"}, {"untied_head", "--untied-head"}, {"hf_config", "--hf-config"},
    {"fabric", "--fabric"},      {"eval_share", "--eval-share"}, {"checkpoint_bw", "--checkpoint-bw"},
    {"failure_rate", "--failure-rate"}, {"restart_cost", "--restart-cost"},
    {"experts", "--experts"}, {"active_experts", "--active-experts"}, {"expert_ffn", "--expert-ffn"},
    {"shared_experts", "--shared-experts"}, {"dense_layers", "--dense-layers"}, {"capacity_factor", "--capacity-factor"},
    {"moe_max_nodes", "--moe-max-nodes"}, {"moe_overlap", "--moe-overlap"}};

// "$1,500", "1.5k", "200" -> USD.
double parse_usd(std::string text, const std::string& what) {
  if (!text.empty() && text[0] == '$') text.erase(0, 1);
  return dl::parse_count(text, what);
}

// Flags every subcommand that prices offers shares.
struct SpeedFlags {
  std::vector<std::string> catalogs, bench, throughput;
  bool strict = false;
  std::string provider, speed = "auto", reference = "A100-SXM-80GB", precision, format = "table";
  double mfu = 0;  // 0: the calibrated MFU
  dl::cost::ScalingModel scaling;
  int64_t top = -1;
  bool spot = false;
};

void add_speed_flags(CLI::App* c, SpeedFlags& f) {
  c->add_option("--catalog", f.catalogs,
                "Offers: a dlkit catalog .toml, an FSDL cloud-gpus.csv / serverless-gpus.csv, a folder, or 'builtin' "
                "(repeatable; default: the shipped configs/catalog)");
  c->add_flag("--strict", f.strict, "A malformed catalog row is an error (file:line, exit 2) instead of a warning");
  c->add_option("--provider", f.provider, "Only offers of this provider (substring, any case): aws, lambda");
  c->add_option("--bench", f.bench, "dl-bench --format json/jsonl results ('-': stdin; repeatable), matched by gpu_model");
  c->add_option("--throughput", f.throughput,
                "Relative-throughput table: a dlkit .toml or Lambda benchmark CSVs (repeatable; default: shipped table)");
  c->add_option("--reference-gpu", f.reference, "Reference GPU when deriving ratios from --throughput CSVs (default A100-SXM-80GB)");
  c->add_option("--speed", f.speed, "Speed sources in order of preference: auto (= bench,relative,analytic) or a list");
  c->add_option("--mfu", f.mfu,
                "A fixed fraction of peak FLOP/s for analytic and GEMM-based speeds (default: the calibrated MFU of each "
                "GPU at the model's size, docs/COST.md)");
  // Any --eff-* flag replaces the communication model with the per-doubling constants.
  c->add_option("--eff-nvlink", f.scaling.nvlink,
                "Fixed scaling efficiency per doubling of GPUs on NVLink boards (0.97 when another --eff-* is given; "
                "default: from communication)")
      ->each([&f](const std::string&) { f.scaling.fixed = true; });
  c->add_option("--eff-pcie", f.scaling.pcie, "... on PCIe datacenter/workstation cards (0.90)")
      ->each([&f](const std::string&) { f.scaling.fixed = true; });
  c->add_option("--eff-consumer", f.scaling.consumer, "... on GeForce cards (0.85)")
      ->each([&f](const std::string&) { f.scaling.fixed = true; });
  c->add_option("--eff-internode", f.scaling.internode, "... per doubling of instances (0.90)")
      ->each([&f](const std::string&) { f.scaling.fixed = true; });
  c->add_flag("--spot", f.spot, "Also price spot capacity (offers with a spot price)");
  c->add_option("--top", f.top, "Rows shown (0: all; default 20 in table/md, all in json/jsonl/csv)");
  c->add_option("--format", f.format, "table | json | jsonl | csv | md");
}

int64_t rows_shown(const SpeedFlags& f, dl::OutputFormat fmt) {
  if (f.top >= 0) return f.top;
  return fmt == dl::OutputFormat::table || fmt == dl::OutputFormat::md ? 20 : 0;
}

bool machine(dl::OutputFormat f) { return f != dl::OutputFormat::table && f != dl::OutputFormat::md; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dl-cost: time and cost of a training run on each cloud GPU offer."};
  app.set_version_flag("--version", [] { return "dl-cost " + dl::version_string() + "\n" + dl::build_info(); });
  app.require_subcommand(1);
  app.footer(
      "stdout carries the table (or json/csv); warnings and, in machine formats, the call-outs go to stderr.\n"
      "Exit codes: 0 ok; 1 nothing fits, or nothing meets --budget/--deadline; 2 bad usage or input (unknown\n"
      "offer, negative hours, malformed catalog row with --strict, empty catalog, unknown --format).\n"
      "Run `dl-cost SUBCOMMAND --help` for examples; formulas, defaults and sources: docs/COST.md.");

  // estimate
  SpeedFlags ef;
  std::string config, tokens, params, flops, hours, on, formula = "palm", restart, checkpoint, budget, deadline, gpu_filter;
  std::vector<std::string> sets;
  std::vector<int64_t> gpus;
  int64_t on_gpus = 0, layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, micro_batch = 0;
  std::string batch_tokens;
  double preempt = 0.05;
  bool explain = false;
  auto* est = app.add_subcommand("estimate", "Hours and dollars of one experiment on every offer, cheapest first");
  est->add_option("config", config,
                  "dl-train config (tokens = steps x batch x accumulation x dp x block_size), or a sweep file "
                  "(every trial's steps, early stopping included, priced on its base config)");
  est->add_option("--set", sets, "Override a config key: --set train.steps=50000 (repeatable)")->type_name("KEY=VALUE");
  est->add_option("--tokens", tokens, "Training tokens instead of a config: 10B, 3e11 (with --params)");
  est->add_option("--params", params, "Model parameters: 124M, 7B (FLOPs per token; memory check)");
  est->add_option("--layers", layers, "with --params: transformer layers (attention FLOPs, activations)");
  est->add_option("--hidden", hidden, "with --params: hidden width");
  est->add_option("--heads", heads, "with --params: attention heads");
  est->add_option("--seq", seq, "with --params: sequence length");
  est->add_option("--vocab", vocab, "with --params: vocabulary size");
  dl::plan::ArchHints arch;
  dl::plan::add_arch_flags(est, arch);
  est->add_option("--flops", flops, "Total training FLOPs instead of tokens x FLOPs per token: 3.1e21");
  est->add_option("--hours", hours, "A reference run's duration (36, 36h, 90m, 2d) ...");
  est->add_option("--on", on, "... on this offer (an id from `dl-cost offers`): the work = its speed x the hours");
  est->add_option("--on-gpus", on_gpus, "GPUs of the reference run (default: the --on offer's instance)");
  est->add_option("--precision", ef.precision,
                  "bf16 | fp16 | fp32 | fp8 (FP8 peaks; GPUs without FP8 tensor cores are skipped) (default: the "
                  "config's, else bf16)");
  std::string fabric, checkpoint_bw, moe_overlap;
  est->add_option("--moe-overlap", moe_overlap,
                  "none | full: a mixture of experts' all-to-alls exposed in full (default) or hidden behind another "
                  "micro-batch's compute up to the step's compute (DeepSeek-V3's DualPipe, Megatron-Core's EP overlap)");
  dl::cost::GoodputModel goodput;
  est->add_option("--fabric", fabric,
                  "Network between instances, per GPU: nvlink | ib-xdr | ib-ndr | ib-hdr | roce | omnipath | ethernet, "
                  "or a bandwidth such as 25GB/s (default: ib-ndr on multi-GPU NVLink offers, else 100 Gb Ethernet)");
  est->add_option("--eval-share", goodput.eval_share, "Goodput: evaluation time as a fraction of training (default 0.01)");
  est->add_option("--checkpoint-bw", checkpoint_bw,
                  "Goodput: checkpoint write bandwidth per GPU, e.g. 0.43GB/s (default: Llama 3's 7 TB/s over 16,384 GPUs)");
  est->add_option("--failure-rate", goodput.failures_per_gpu_hour,
                  "Goodput: failures per GPU-hour (default 1.97e-5: Llama 3's 419 in 54 days on 16,384 GPUs; 0: none)");
  std::string restart_cost;
  bool no_goodput = false;
  est->add_flag("--no-goodput", no_goodput,
                "Hours = compute hours (steady-state throughput): no evaluation, checkpoint or failure time");
  est->add_option("--restart-cost", restart_cost, "Goodput: time each failure costs besides lost work (default 15m)");
  est->add_option("--micro-batch", micro_batch, "Sequences per GPU per micro-batch for the memory check (default: config's)");
  est->add_option("--global-batch,--batch-tokens", batch_tokens,
                  "Global batch: tokens per optimizer step, which the GPUs share; the per-replica batch sets the DP "
                  "efficiency (default: the config's, else 524288)");
  est->add_option("--flop-formula", formula, "FLOPs per token: palm (6N+12LHQT, default) | llmc (6N+6LDT)");
  est->add_option("--gpu", gpu_filter, "Only offers with this GPU: H100 (any H100), H100-SXM (exactly), 4090");
  est->add_option("--gpus", gpus, "GPU counts to price, e.g. 1,8 (default: each offer's own GPU count)")->delimiter(',');
  est->add_option("--preempt-rate", preempt, "--spot: preemptions per instance-hour (default 0.05)");
  est->add_option("--restart", restart, "--spot: time to restart after a preemption (default 15m)");
  est->add_option("--checkpoint-interval", checkpoint, "--spot: time between checkpoints (default: from train.checkpoint_every)");
  est->add_option("--budget", budget, "Best = the fastest run within this many USD (1500, $2k)");
  est->add_option("--deadline", deadline, "Best = the cheapest run finishing within this time (48h, 3d)");
  est->add_flag("--explain", explain,
                "Also print, for each GPU model and count shown, the layouts tried in order (DP, ZeRO-1..3, "
                "recompute, TP, PP, offload: dl-shard recommend's) and why each was chosen or rejected");
  add_speed_flags(est, ef);
  est->footer(
      "Speed per GPU: one calibrated model (datasheet peak x an MFU fitted on published training runs, by\n"
      "GPU and model size) for every offer, adjusted by measurements where there are some: --bench rows of\n"
      "that GPU model, else the relative-throughput table. Scaling comes from the model's gradient and\n"
      "parameter traffic over the interconnect. Each row has a low/high range. The table says which.\n"
      "Examples:\n"
      "  dl-cost estimate configs/gpt2-124m.toml --precision bf16\n"
      "  dl-cost estimate configs/lr.sweep.toml              # a whole dl-train sweep\n"
      "  dl-cost estimate --tokens 10B --params 124M --gpus 1,8 --deadline 24h\n"
      "  dl-cost estimate --params 7B --layers 32 --hidden 4096 --heads 32 --seq 4096 --tokens 1T --gpus 64 --gpu H100\n"
      "  dl-cost estimate configs/llama3-8b.toml --gpu H100 --gpus 8,64     # configs/tinyllama-1.1b.toml too\n"
      "  dl-cost estimate --params 8B --arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn-hidden 14336 \\\n"
      "                   --vocab 128256 --seq 8192 --tokens 15T --gpus 16384 --gpu H100\n"
      "  dl-cost estimate --hf-config Meta-Llama-3-8B/config.json --seq 4096 --tokens 1T --gpus 64 --gpu H100\n"
      "  dl-cost estimate --hours 36 --on lambda/gpu_1x_a100_sxm4 --spot --budget 200\n"
      "  dl-cost estimate --flops 3e20 --catalog configs/catalog/offers-gpu-clouds.toml --top 10\n"
      "  dl-bench train configs/gpt2-124m.toml --format json | dl-cost estimate configs/gpt2-124m.toml --bench -\n"
      "  dl-cost estimate configs/gpt2-124m.toml --speed analytic --mfu 0.35 --format json > cost.json");

  // offers
  std::vector<std::string> offer_catalogs;
  std::string offer_gpu, offer_provider, offer_format = "table";
  bool offer_strict = false;
  auto* off = app.add_subcommand("offers", "List and filter the catalog (rows without a price say why)");
  off->add_option("--gpu", offer_gpu, "Only this GPU: H100 (any H100), A100-SXM-80GB (exactly), 4090");
  off->add_option("--provider", offer_provider, "Only this provider (substring, any case): aws, lambda");
  off->add_option("--catalog", offer_catalogs, "Catalog files or folders, or 'builtin' (repeatable; default: shipped)");
  off->add_flag("--strict", offer_strict, "A malformed catalog row is an error (file:line, exit 2)");
  off->add_option("--format", offer_format, "table | json | jsonl | csv | md");
  off->footer(
      "Examples:\n"
      "  dl-cost offers\n"
      "  dl-cost offers --gpu H100 --provider aws\n"
      "  dl-cost offers --catalog configs/catalog/offers-hyperscalers.toml --gpu A100 --format csv  # or an FSDL cloud-gpus.csv\n"
      "  dl-cost offers --catalog builtin --catalog my-quotes.toml --format json");

  // onprem
  SpeedFlags of;
  std::string price, machine_gpu, vs;
  double watts = -1, kwh = -1, util = -1, years = -1, pue = 1.0;
  int64_t machine_gpus = 0;
  auto* onp = app.add_subcommand("onprem", "Months until a bought machine beats renting the same work");
  onp->add_option("--price", price, "Machine price in USD: 250000, $250k")->required();
  onp->add_option("--watts", watts, "Power draw of the machine while training, W")->required();
  onp->add_option("--kwh-price", kwh, "Electricity price, USD per kWh")->required();
  onp->add_option("--utilization", util, "Fraction of hours the machine trains, (0, 1]")->required();
  onp->add_option("--years", years, "Service life in years (amortisation)")->required();
  onp->add_option("--pue", pue, "Power usage effectiveness of the room (default 1: --watts at the wall)");
  onp->add_option("--gpu", machine_gpu, "The machine's GPU model (default: the --vs offer's)");
  onp->add_option("--gpus", machine_gpus, "The machine's GPU count (default: the --vs offer's, else 1)");
  onp->add_option("--vs", vs, "Compare with this offer only (default: every offer; the cheapest for the work counts)");
  add_speed_flags(onp, of);
  onp->footer(
      "power/month = W/1000 x 730 h x utilization x PUE x $/kWh; the cloud does the same work (730 h x utilization\n"
      "x on-prem speed) at its own speed and price; break-even months = price / (cloud/month - power/month).\n"
      "Examples:\n"
      "  dl-cost onprem --price 250k --watts 10200 --kwh-price 0.15 --utilization 0.6 --years 4 --gpu H100-SXM --gpus 8\n"
      "  dl-cost onprem --price 2500 --watts 450 --kwh-price 0.30 --utilization 0.5 --years 3 --gpu RTX-4090 --vs runpod/1x-rtx-4090\n"
      "  dl-cost onprem --price 30000 --watts 1000 --kwh-price 0.12 --utilization 0.8 --years 3 --vs lambda/gpu_1x_h100_sxm5 --format json");

  // validate
  std::string validate_format = "table";
  auto* val = app.add_subcommand("validate", "The default estimate of each published run: the speed model's fitted runs and held-out runs it was not fitted on");
  val->add_option("--format", validate_format, "table | json | jsonl | csv | md");
  val->footer(
      "Prices every published run (llm.c's GPT-2 124M, llm-foundry's MPT rows) as `dl-cost estimate` would by default\n"
      "and prints the error against the measured time (or the time the published MFU implies); docs/COST.md's\n"
      "validation table is this output, and the tests keep every row within 25%.\n"
      "Examples:\n"
      "  dl-cost validate\n"
      "  dl-cost validate --format md");

  if (const auto code = dl::parse_command_line(app, argc, argv, "dl-cost")) return *code;

  return dl::run_tool("dl-cost", [&]() -> int {
    if (*off) {
      auto fmt = dl::parse_output_format(offer_format);
      auto cat = dl::cost::load_catalogs(offer_catalogs, {offer_strict});
      for (const auto& w : cat.warnings) dl::log_warn(w);
      auto list = dl::cost::filter_offers(cat, offer_gpu, offer_provider);
      if (list.empty())
        dl::throw_usage("no offer matches", offer_gpu.empty() ? "" : " --gpu " + offer_gpu,
                        offer_provider.empty() ? "" : " --provider " + offer_provider);
      std::cout << dl::cost::render_offers(cat, list, fmt);
      return dl::kExitOk;
    }
    if (*val) {
      auto fmt = dl::parse_output_format(validate_format);
      std::cout << dl::cost::render_validation(dl::cost::validate_published_runs(), dl::cost::validate_held_out(), fmt);
      return dl::kExitOk;
    }
    if (*onp) {
      auto fmt = dl::parse_output_format(of.format);
      dl::cost::OnpremInputs in;
      in.flags = kFlags;
      in.price = parse_usd(price, "--price");
      in.watts = watts, in.kwh_price = kwh, in.utilization = util, in.years = years, in.pue = pue;
      in.gpu = machine_gpu;
      if (machine_gpus) in.gpus = machine_gpus;
      in.vs = vs;
      in.catalogs = of.catalogs, in.strict = of.strict, in.provider_filter = of.provider;
      in.bench = of.bench, in.throughput = of.throughput, in.reference_gpu = of.reference;
      in.speed_sources = dl::cost::parse_speed_sources(of.speed);
      if (!of.precision.empty()) in.precision = dl::plan::parse_precision(of.precision);
      in.mfu = of.mfu, in.scaling = of.scaling, in.spot = of.spot;
      auto r = dl::cost::make_onprem(in);
      for (const auto& w : r.warnings) dl::log_warn(w);
      std::cout << dl::cost::render_onprem(r, fmt, rows_shown(of, fmt));
      if (machine(fmt))
        for (const auto& c : r.callouts) dl::log_info(c);
      return dl::kExitOk;
    }
    auto fmt = dl::parse_output_format(ef.format);
    dl::cost::EstimateInputs in;
    in.flags = kFlags;
    in.config_path = config;
    in.sets = sets;
    // A sweep prices as its base config trained for the sweep's step budget (sweep/asha.hpp).
    std::vector<std::string> sweep_notes;
    if (!config.empty() && dl::sweep::is_sweep_file(config)) {
      const auto spec = dl::sweep::load_sweep(config);
      const auto b = dl::sweep::step_budget(spec);
      const auto steps = static_cast<int64_t>(std::ceil(b.expected));
      in.config_path = spec.base_config.string();
      in.sets.push_back("train.steps=" + std::to_string(steps));
      sweep_notes.push_back(dl::str("# sweep ", config, ": ", b.trials, " trials of up to ", b.steps_per_trial,
                                    " steps = ", steps, " steps in all", spec.asha ? " (asha, expected)" : "",
                                    ", priced as ", spec.base_config.filename().string(),
                                    " (parameters that change the model or batch are not priced per trial)"));
      if (spec.asha)
        sweep_notes.push_back(dl::str("# worst case ", static_cast<int64_t>(std::ceil(b.worst)), " steps: x",
                                      dl::format_fixed(b.worst / b.expected, 2), " the hours and dollars above"));
    }
    if (!tokens.empty()) in.tokens = dl::parse_count(tokens, "--tokens");
    if (!params.empty()) in.params = dl::parse_count(params, "--params");
    if (!flops.empty()) in.flops = dl::parse_count(flops, "--flops");
    if (!hours.empty()) in.hours = dl::parse_hours(hours, "--hours");
    in.on_offer = on;
    if (on_gpus) in.on_gpus = on_gpus;
    in.layers = layers, in.hidden = hidden, in.heads = heads, in.seq = seq, in.vocab = vocab;
    in.arch = arch;
    if (!ef.precision.empty()) in.precision = ef.precision;
    if (micro_batch) in.micro_batch = micro_batch;
    if (!batch_tokens.empty()) in.batch_tokens = dl::parse_count(batch_tokens, "--global-batch");
    in.formula = dl::plan::parse_flop_formula(formula);
    in.catalogs = ef.catalogs, in.strict = ef.strict, in.gpu_filter = gpu_filter, in.provider_filter = ef.provider;
    in.bench = ef.bench, in.throughput = ef.throughput, in.reference_gpu = ef.reference;
    in.speed_sources = dl::cost::parse_speed_sources(ef.speed);
    in.mfu = ef.mfu;
    in.gpus = gpus;
    in.scaling = ef.scaling;
    in.spot = ef.spot;
    in.spot_model.preempt_per_hour = preempt;
    if (!fabric.empty()) in.fabric = fabric;
    if (!moe_overlap.empty()) in.moe_overlap = dl::plan::parse_moe_overlap(moe_overlap);
    if (!checkpoint_bw.empty()) goodput.checkpoint_bw = dl::plan::parse_bandwidth(checkpoint_bw, "--checkpoint-bw");
    if (!restart_cost.empty()) goodput.restart_hours = dl::parse_hours(restart_cost, "--restart-cost");
    in.goodput = no_goodput ? dl::cost::GoodputModel::none() : goodput;
    if (!restart.empty()) in.spot_model.restart_hours = dl::parse_hours(restart, "--restart");
    if (!checkpoint.empty()) in.checkpoint_hours = dl::parse_hours(checkpoint, "--checkpoint-interval");
    if (!budget.empty()) in.budget = parse_usd(budget, "--budget");
    if (!deadline.empty()) in.deadline = dl::parse_hours(deadline, "--deadline");
    auto r = dl::cost::make_estimate(in);
    r.notes.insert(r.notes.begin(), sweep_notes.begin(), sweep_notes.end());
    for (const auto& w : r.warnings) dl::log_warn(w);
    std::cout << dl::cost::render_estimate(r, fmt, rows_shown(ef, fmt));
    if (explain) (machine(fmt) ? std::cerr : std::cout) << dl::cost::render_layout_explanation(r, rows_shown(ef, fmt));
    std::cout.flush();
    if (machine(fmt)) {
      for (const auto& c : r.callouts) dl::log_info(c);
      for (const auto& n : sweep_notes) dl::log_info(n.substr(2));
      for (const auto& s : r.skipped) dl::log_info("skipped " + s);
    }
    bool any = false;
    for (const auto& row : r.rows) any = any || row.eligible();
    return any && r.constraints_met ? dl::kExitOk : dl::kExitFailure;
  }, kFlags);
}
