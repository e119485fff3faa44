// dl-shard: plan memory per GPU for a model and a parallel layout, recommend the simplest layout
// that fits, inspect checkpoints, merge a sharded checkpoint into one file and split one into
// the shards another layout loads. The arithmetic lives in lib/plan, the file work in
// lib/shard.
#include <CLI/CLI.hpp>
#include <iostream>

#include "dl/backend/build_info.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/command_line.hpp"
#include "dl/cli/table.hpp"
#include "dl/cli/units.hpp"
#include "dl/core/error.hpp"
#include "dl/core/version.hpp"
#include "dl/plan/arch_flags.hpp"
#include "dl/plan/report.hpp"
#include "dl/shard/inspect.hpp"
#include "dl/shard/reshard.hpp"

namespace {

// The flags plan and recommend share, as strings until the library parses their units.
struct PlanFlags {
  std::string config, params, gpu_mem, gpu, bench, precision, schedule, offload, recompute, attention, fabric,
      sequence_parallel, moe_overlap;
  bool explain = false;
  std::string formula = "palm";
  std::string format = "table";
  std::vector<std::string> sets;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  dl::plan::ArchHints arch;
  int64_t gpus = 0, gpus_per_node = 0, micro_batch = 0, global_batch = 0, zero = -1, tp = 0, pp = 0, cp = 0, ep = -1;
  double mfu = 0;
  int64_t top = 0;  // rows shown (recommend: of each group); 0 = all
};

void add_plan_flags(CLI::App* c, PlanFlags& f) {
  c->add_option("config", f.config, "dl-train config (TOML): the model, micro-batch and precision");
  c->add_option("--set", f.sets, "Override a config key: --set model.n_layer=48 (repeatable)")->type_name("KEY=VALUE");
  c->add_option("--params", f.params, "Parameter count instead of a config: 7.5e9, 1.5B, 124M");
  c->add_option("--layers", f.layers, "with --params: transformer layers (L)");
  c->add_option("--hidden", f.hidden, "with --params: hidden width (D)");
  c->add_option("--heads", f.heads, "with --params: attention heads (A)");
  c->add_option("--seq", f.seq, "with --params: sequence length (T)");
  c->add_option("--vocab", f.vocab, "with --params: vocabulary size (V)");
  dl::plan::add_arch_flags(c, f.arch);
  c->add_option("--gpus", f.gpus, "Number of GPUs (world size)")->required();
  c->add_option("--gpus-per-node", f.gpus_per_node, "GPUs per node (default 8)");
  c->add_option("--gpu-mem", f.gpu_mem, "Memory per GPU: 80GB, 80GiB (default: the --gpu model's)");
  c->add_option("--gpu", f.gpu, "GPU model for datasheet speeds and memory: H100-SXM, A100-SXM-80GB, 'H100 PCIe', ...");
  c->add_option("--micro-batch", f.micro_batch, "Sequences per micro-batch per GPU (default: train.batch_size, else 1)");
  c->add_option("--global-batch", f.global_batch, "Sequences per optimizer step (default: gpus x micro-batch)");
  c->add_option("--precision", f.precision,
                "bf16 | fp16 (mixed-precision Adam) | fp32 | fp8 (FP8 GEMMs, bf16 weights + an FP8 copy: GPUs with "
                "FP8 tensor cores) (default: the config's, else bf16)");
  c->add_option("--fabric", f.fabric,
                "Network between nodes, per GPU: nvlink | ib-xdr | ib-ndr (default, 50 GB/s) | ib-hdr | roce | "
                "omnipath | ethernet, or a bandwidth such as 25GB/s");
  c->add_option("--zero", f.zero, "ZeRO stage 0..3 (plan: all four when not given)");
  c->add_option("--tp", f.tp, "Tensor-parallel degree");
  c->add_option("--pp", f.pp, "Pipeline stages");
  c->add_option("--cp", f.cp, "Context-parallel ranks (ring attention; recommend searches it for sequences of 8192 and more)");
  c->add_option("--ep", f.ep,
                "Expert-parallel ranks for a mixture of experts (divides --experts and dp; recommend searches it before tp)");
  c->add_option("--schedule", f.schedule, "Pipeline schedule: 1f1b | gpipe");
  c->add_option("--moe-overlap", f.moe_overlap,
                "none | full: a mixture of experts' all-to-alls exposed in full (default) or hidden behind another "
                "micro-batch's compute up to the step's compute (DeepSeek-V3's DualPipe, Megatron-Core's EP overlap)");
  c->add_option("--offload", f.offload, "none | cpu: optimizer state on the host (needs zero >= 1)");
  c->add_option("--recompute", f.recompute, "none | selective | full activation recomputation");
  c->add_option("--attention", f.attention,
                "flash (a log-sum-exp per row, no T x T scores: GPU kernels) | materialized (scores kept: "
                "dl-train's CPU backend). Default: the config's train.device (cpu: materialized; cuda, auto: "
                "flash); without a config flash");
  c->add_option("--sequence-parallel", f.sequence_parallel,
                "on | off: sequence parallelism wherever tp > 1 (default: off for a config, which dl-train runs "
                "without it; on for --params/--hf-config, as Megatron-LM and NeMo run TP)");
  c->add_flag("--explain", f.explain,
              "Also print the layouts practitioners try in order (DP, ZeRO-1..3, recompute, TP, PP, offload), "
              "each with why it was chosen or rejected");
  c->add_option("--bench", f.bench, "dl-bench --format json/jsonl results: measured FLOP/s and bandwidth ('-': stdin)");
  c->add_option("--mfu", f.mfu, "Fraction of peak FLOP/s training reaches (default: the calibrated MFU of the GPU at the model's size, as dl-cost)");
  c->add_option("--flop-formula", f.formula, "FLOPs per token: palm (6N+12LHQT, default) | llmc (6N+6LDT)");
  dl::add_old_flag_name(c, "--flops", "--flop-formula", f.formula);  // dl-cost's --flops is a FLOP count
  c->add_option("--format", f.format, "table | json | jsonl | csv | md");
  c->add_option("--top", f.top, f.top ? "Rows shown of the fitting and of the other layouts (0: all; default " +
                                             std::to_string(f.top) + ")"
                                       : "Rows shown (0: all, the default)");
}

// The library names options {gpu_mem}; these are dl-shard's flags for them.
const dl::OptionNames kFlags = {
    {"params", "--params"},   {"layers", "--layers"},         {"hidden", "--hidden"},
    {"heads", "--heads"},     {"seq", "--seq"},               {"vocab", "--vocab"},
    {"sets", "--set"},        {"gpus", "--gpus"},             {"gpus_per_node", "--gpus-per-node"},
    {"gpu_mem", "--gpu-mem"}, {"gpu", "--gpu"},               {"bench", "--bench"},
    {"mfu", "--mfu"},         {"micro_batch", "--micro-batch"}, {"global_batch", "--global-batch"},
    {"schedule", "--schedule"}, {"recompute", "--recompute"}, {"attention", "--attention"},
    {"top", "--top"},         {"layout", "--layout"},         {"ranks", "--ranks"},
    {"with_optimizer", "--with-optimizer"}, {"force", "--force"},
    {"arch", "--arch"},       {"kv_heads", "--kv-heads"},     {"ffn_hidden", "--ffn-hidden"},
    {"untied_head", "--untied-head"}, {"hf_config", "--hf-config"}, {"precision", "--precision"},
    {"fabric", "--fabric"},   {"ep", "--ep"},
    {"experts", "--experts"}, {"active_experts", "--active-experts"}, {"expert_ffn", "--expert-ffn"},
    {"shared_experts", "--shared-experts"}, {"dense_layers", "--dense-layers"}, {"capacity_factor", "--capacity-factor"},
    {"moe_max_nodes", "--moe-max-nodes"}, {"moe_overlap", "--moe-overlap"}};

dl::plan::PlanInputs to_inputs(const PlanFlags& f) {
  dl::plan::PlanInputs in;
  in.flags = kFlags;
  in.config_path = f.config;
  in.sets = f.sets;
  if (!f.params.empty()) in.params = dl::parse_count(f.params, "--params");
  in.layers = f.layers, in.hidden = f.hidden, in.heads = f.heads, in.seq = f.seq, in.vocab = f.vocab;
  in.arch = f.arch;
  in.gpus = f.gpus;
  if (f.gpus_per_node) in.gpus_per_node = f.gpus_per_node;
  if (!f.gpu_mem.empty()) in.gpu_mem = dl::parse_size(f.gpu_mem, "--gpu-mem");
  in.gpu = f.gpu;
  in.bench = f.bench;
  if (f.mfu) in.mfu = f.mfu;
  if (f.micro_batch) in.micro_batch = f.micro_batch;
  if (f.global_batch) in.global_batch = f.global_batch;
  if (!f.precision.empty()) in.precision = f.precision;
  if (!f.fabric.empty()) in.fabric = f.fabric;
  if (!f.schedule.empty()) in.schedule = f.schedule;
  in.formula = dl::plan::parse_flop_formula(f.formula);
  if (f.zero >= 0) in.fixed.zero = f.zero;
  if (f.tp) in.fixed.tp = f.tp;
  if (f.pp) in.fixed.pp = f.pp;
  if (f.cp) in.fixed.cp = f.cp;
  if (f.ep >= 0) in.fixed.ep = f.ep;
  if (!f.offload.empty()) {
    const std::optional<dl::Offload> offload = dl::parse_choice<dl::Offload>(f.offload);
    if (!offload) dl::throw_usage("--offload: none or cpu, got '", f.offload, "'");
    in.fixed.offload = *offload == dl::Offload::cpu;
  }
  if (!f.recompute.empty()) in.fixed.recompute = dl::plan::parse_recompute(f.recompute);
  if (!f.attention.empty()) in.attention = dl::plan::parse_attention(f.attention);
  if (!f.moe_overlap.empty()) in.moe_overlap = dl::plan::parse_moe_overlap(f.moe_overlap);
  if (!f.sequence_parallel.empty()) {
    if (f.sequence_parallel != "on" && f.sequence_parallel != "off")
      dl::throw_usage("--sequence-parallel: on or off, got '", f.sequence_parallel, "'");
    in.sequence_parallel = f.sequence_parallel == "on";
  }
  return in;
}

// --explain: the ladder goes to stdout under a human table, to stderr beside machine output.
void print_explanation(const dl::plan::PlanReport& report, dl::OutputFormat fmt) {
  const bool human = fmt != dl::OutputFormat::json && fmt != dl::OutputFormat::jsonl && fmt != dl::OutputFormat::csv;
  std::ostream& out = human ? std::cout : std::cerr;
  if (human) out << "\n";
  for (const auto& line : dl::plan::explain_ladder(report.rows)) out << line << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dl-shard: plan GPU memory and parallel layouts for training; inspect, merge and split checkpoints."};
  app.set_version_flag("--version", [] { return "dl-shard " + dl::version_string() + "\n" + dl::build_info(); });
  app.require_subcommand(1);
  app.footer(
      "Sizes are decimal (1 GB = 1e9 bytes) unless written in GiB; counts take 7.5e9, 1.5B, 124M.\n"
      "Exit codes: 0 ok, 1 failure (recommend: no layout fits), 2 bad usage or input (an impossible\n"
      "layout, an unknown config key, a checkpoint that fails its checksums or misses a shard).\n"
      "Run `dl-shard SUBCOMMAND --help` for examples; formulas and assumptions: docs/PLANNING.md.");

  PlanFlags pf, rf;
  auto* plan = app.add_subcommand("plan", "Memory per GPU, communication and step time of given layouts");
  add_plan_flags(plan, pf);
  plan->footer(
      "Rows: one per ZeRO stage unless --zero is given; tp, pp, offload and recompute default to the\n"
      "config's [parallel] section (or 1/1/none/none); dp = gpus / (tp x pp). Activations count what the\n"
      "attention keeps: a config on train.device cuda or auto plans dl-train's flash-style GPU kernels,\n"
      "cpu its materialized scores; --attention chooses.\n"
      "Examples:\n"
      "  dl-shard plan --params 7.5e9 --gpus 64 --gpu-mem 80GB          # the ZeRO paper's example\n"
      "  dl-shard plan configs/addition.toml --gpus 1 --gpu-mem 24GB --precision fp32\n"
      "  dl-shard plan --params 7e9 --layers 32 --hidden 4096 --heads 32 --seq 4096 --vocab 32000 \\\n"
      "                --gpus 16 --gpu H100-SXM --tp 2 --pp 2 --zero 1 --recompute selective\n"
      "  dl-shard plan --params 1.5B --gpus 8 --gpu-mem 40GB --zero 3 --offload cpu --format json\n"
      "  dl-shard plan configs/tinyllama-1.1b.toml --gpus 8 --gpu A100-SXM-80GB   # a llama config\n"
      "  dl-shard plan --params 8B --arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 \\\n"
      "                --ffn-hidden 14336 --vocab 128256 --seq 8192 --gpus 8 --gpu H100-SXM --tp 2");

  auto* rec = app.add_subcommand("recommend", "The simplest layout that fits within 5% of the fastest, and why not the others");
  rf.top = 10;
  add_plan_flags(rec, rf);
  rec->footer(
      "Searches tp, pp, zero, offload and recompute (those not fixed by flags) with dp = gpus / (tp x pp),\n"
      "ranks layouts that fit by estimated step time and recommends the first, in the order practitioners\n"
      "try them (DP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP, selective then full recompute, EP for a mixture of\n"
      "experts, TP inside a node, PP across nodes, CPU offload last), within 5% of the fastest and leaving 5% of the GPU free where one\n"
      "does; the other rows say why they were passed over, --explain prints the ladder. With --bench,\n"
      "measured GEMM or training FLOP/s and\n"
      "collective bandwidth replace datasheet values.\n"
      "Examples:\n"
      "  dl-shard recommend --params 7.5e9 --layers 32 --hidden 4096 --heads 32 --seq 2048 --gpus 8 --gpu-mem 80GB\n"
      "  dl-shard recommend configs/addition.toml --gpus 2 --gpu L4\n"
      "  dl-bench gemm --format json > bench.json && dl-shard recommend --params 13e9 --gpus 16 --gpu-mem 80GB --bench bench.json\n"
      "  dl-shard recommend --params 70e9 --gpus 64 --gpu H100-SXM --tp 8 --format csv --top 0\n"
      "  dl-shard recommend configs/llama3-8b.toml --gpus 8 --gpu H100-SXM\n"
      "  dl-shard recommend --params 46.7B --arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 \\\n"
      "                --ffn-hidden 14336 --vocab 32000 --seq 4096 --experts 8 --active-experts 2 --gpus 64 --gpu H100-SXM\n"
      "  dl-shard recommend --hf-config Meta-Llama-3-8B/config.json --seq 4096 --gpus 16 --gpu A100-SXM-80GB");

  std::string inspect_path, inspect_format = "table";
  auto* ins = app.add_subcommand("inspect", "Tensors, dtypes, shapes, bytes and CRC-32C of a checkpoint or safetensors file");
  ins->add_option("path", inspect_path, "a .safetensors file, a checkpoint directory (step_*), or a run directory")
      ->required();
  ins->add_option("--format", inspect_format, "table | json | jsonl | csv | md (jsonl/csv: one row per tensor)");
  ins->footer(
      "Verifies every file of a checkpoint against the sizes and CRC-32C in its trainer_state.json and\n"
      "exits 2 naming the first file that fails. Files are streamed, never loaded whole.\n"
      "Examples:\n"
      "  dl-shard inspect runs/a                                  # the run's newest checkpoint\n"
      "  dl-shard inspect runs/a/checkpoints/step_00000600 --format json\n"
      "  dl-shard inspect model.safetensors --format csv");

  dl::shard::MergeOptions mo;
  std::string merge_format = "table";
  auto* merge = app.add_subcommand("merge", "Merge a dl-train checkpoint of any layout into one safetensors file");
  merge->add_option("checkpoint", mo.source, "a checkpoint directory (step_*), a run directory or its checkpoints/")
      ->required();
  merge->add_option("-o,--output", mo.output,
                    "the file to write: model.safetensors (a device, FIFO or - for stdout is written through)")
      ->required();
  merge->add_flag("--with-optimizer", mo.with_optimizer,
                  "also write the optimizer state beside it (optimizer.safetensors, keys exp_avg.<name>, ...)");
  merge->add_flag("--force", mo.force, "Replace output files that exist (without it merge refuses them, as split refuses a folder that holds files)");
  merge->add_option("--format", merge_format, "table | json | jsonl | csv | md (the files written)");
  merge->footer(
      "Writes every parameter whole, under its Hugging Face GPT-2 name and [in,out] shape (mlp: layers.{i}.*),\n"
      "exactly what a single-process dl-train checkpoint's model.safetensors holds; config.json in the\n"
      "checkpoint directory is the matching transformers config. Tensors are streamed one at a time.\n"
      "Every file is verified first (size, CRC-32C, the pieces its layout writes): a missing, truncated,\n"
      "corrupt or mismatched shard exits 2 naming it, and nothing is written.\n"
      "Examples:\n"
      "  dl-shard merge runs/a -o model.safetensors                 # the run's newest checkpoint\n"
      "  dl-shard merge runs/a/checkpoints/step_00000600 -o out/model.safetensors --with-optimizer\n"
      "  dl-shard merge runs/a -o model.safetensors --format json");

  dl::shard::SplitOptions so;
  std::string split_format = "table";
  auto* split = app.add_subcommand("split", "Split a checkpoint into the shards a dl-train layout loads (a resumable run)");
  split->add_option("checkpoint", so.source, "a checkpoint directory (step_*), a run directory or its checkpoints/")
      ->required();
  auto* layout_opt = split->add_option("--layout", so.layout, "target layout: \"dp=4,zero=3\", \"dp=2,tp=2,pp=2\", \"tp=2\"");
  auto* ranks_opt = split->add_option("--ranks", so.ranks, "N data-parallel ranks (= --layout dp=N)");
  layout_opt->excludes(ranks_opt);
  split->add_option("-o,--output", so.output, "the run directory to create (must not exist, or be empty)")->required();
  split->add_option("--config", so.config,
                    "dl-train config for OUT/config.toml (default: the config.toml of the run the checkpoint is in)");
  split->add_option("--format", split_format, "table | json | jsonl | csv | md (the files written, one per rank)");
  split->footer(
      "Writes OUT/checkpoints/step_N/ exactly as dl-train saves that layout (shards/rankNNNNN.safetensors,\n"
      "config.json, trainer_state.json with every piece and CRC-32C), and OUT/config.toml: the source run's\n"
      "config with [parallel] set to the layout and train.batch_size scaled to keep the global batch. Keys\n"
      "not given: dp, tp, pp 1; zero the source's when dp > 1. --ranks N is dp=N. The layout is checked\n"
      "against the model (tp divides heads and vocabulary, pp divides layers, zero <= 1 with pp).\n"
      "Any checkpoint splits (single-process or sharded); tensors are streamed one at a time; the source is\n"
      "verified first and OUT appears only when complete.\n"
      "Examples:\n"
      "  dl-shard split runs/a --layout \"dp=4,zero=3\" -o runs/a-dp4\n"
      "  dl-train --resume runs/a-dp4 --nproc-per-node 4                  # continues the run on 4 ranks\n"
      "  dl-shard split runs/a/checkpoints/step_00000600 --layout \"dp=2,tp=2,pp=2\" -o runs/b\n"
      "  dl-shard split ckpt/step_00000600 --ranks 2 --config a.toml -o runs/c --format json");

  if (const auto code = dl::parse_command_line(app, argc, argv, "dl-shard")) return *code;

  return dl::run_tool("dl-shard", [&]() -> int {
    if (*plan) {
      auto fmt = dl::parse_output_format(pf.format);
      auto report = dl::plan::make_plan(to_inputs(pf));
      std::cout << dl::plan::render_plan(report, fmt, pf.top);
      // plan chooses no layout; --explain shows what recommend would choose with the same flags.
      if (pf.explain) print_explanation(dl::plan::make_recommendation(to_inputs(pf)), fmt);
      return dl::kExitOk;
    }
    if (*rec) {
      auto fmt = dl::parse_output_format(rf.format);
      auto report = dl::plan::make_recommendation(to_inputs(rf));
      std::cout << dl::plan::render_recommendation(report, fmt, rf.top);
      if (rf.explain) print_explanation(report, fmt);
      if (!report.best()) {
        std::cout.flush();
        std::cerr << "dl-shard: no layout of " << rf.gpus << " GPUs fits (see the table: why not)\n";
        return dl::kExitFailure;
      }
      return dl::kExitOk;
    }
    if (*merge) {
      auto fmt = dl::parse_output_format(merge_format);
      auto result = dl::shard::merge_checkpoint(mo);
      // With -o - the model is stdout's data; the summary then goes with the logs.
      (mo.output == "-" ? std::cerr : std::cout) << dl::shard::render_merge(result, fmt);
      return dl::kExitOk;
    }
    if (*split) {
      auto fmt = dl::parse_output_format(split_format);
      auto result = dl::shard::split_checkpoint(so);
      std::cout << dl::shard::render_split(result, fmt);
      return dl::kExitOk;
    }
    auto fmt = dl::parse_output_format(inspect_format);
    auto result = dl::shard::inspect_path(inspect_path);
    std::cout << dl::shard::render_inspection(result, fmt);
    if (!result.ok()) {
      std::cout.flush();
      dl::throw_usage(result.first_problem());
    }
    return dl::kExitOk;
  }, kFlags);
}
