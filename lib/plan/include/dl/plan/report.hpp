// dl-shard plan and recommend: from what the user gave (a config or a parameter count, the
// GPUs, optional fixed layout choices, an optional dl-bench file) to estimated layouts and their
// tables. The tool parses flags into PlanInputs, calls one function, prints the result.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dl/cli/table.hpp"
#include "dl/core/option_error.hpp"
#include "dl/plan/plan.hpp"

namespace dl::plan {

struct PlanInputs {
  // The model: a dl-train config (with --set overrides) or a parameter count with hints.
  std::string config_path;
  std::vector<std::string> sets;
  std::optional<double> params;
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  ArchHints arch;  // --arch, --kv-heads, --ffn-hidden, --untied-head, --hf-config (instead of {params})
  // The machine.
  int64_t gpus = 0;
  std::optional<int64_t> gpus_per_node;   // default 8 (or gpus when fewer)
  std::optional<double> gpu_mem;          // bytes; default: the --gpu / bench model's memory
  std::string gpu;                        // a GPU model or alias for datasheet speeds
  std::string bench;                      // dl-bench json/jsonl file ("-": stdin)
  std::optional<double> mfu;              // achievable fraction of peak (default 0.45)
  std::optional<std::string> fabric;      // between nodes: a find_fabric() preset or bandwidth; default ib-ndr
  // Training.
  std::optional<int64_t> micro_batch;     // default: the config's train.batch_size, else 1
  std::optional<int64_t> global_batch;    // sequences per step; default gpus x micro-batch x accum
  std::optional<std::string> precision;   // default: the config's, else bf16
  std::optional<std::string> schedule;    // pipeline schedule; default: the config's, else 1f1b
  FlopFormula formula = FlopFormula::palm;
  // Attention's stored state; default: from a config attention_for_device(train.device)
  // (cpu -> materialized, cuda or auto -> flash), from --params flash (a GPU plan).
  std::optional<Attention> attention;
  // Layout choices the user fixed (plan: unset tp/pp/offload/recompute come from the config or
  // defaults, unset zero shows stages 0..3; recommend: unset ones are searched).
  LayoutSearch fixed;
  // The tool's flag for each option (dl/core/option_error.hpp), for notes that name one.
  OptionNames flags;
};

struct PlanReport {
  ModelShape model;
  Hardware hardware;
  Layout base;               // gpus, gpus_per_node, micro_batch, precision, optimizer, schedule, attention
  int64_t global_batch = 0;
  double flops_per_token = 0;
  FlopFormula formula = FlopFormula::palm;
  std::vector<Estimate> rows;  // plan: the requested layouts; recommend: ranked, best first
  size_t impossible = 0;       // plan: requested combinations left out as impossible (in notes)
  std::vector<std::string> notes;  // assumptions and sources, shown under human tables
  OptionNames flags;               // PlanInputs::flags, for the tables' hints

  // recommend: the fastest fitting layout, or null when none fits.
  const Estimate* best() const;
};

// The layouts the user asked for (one per ZeRO stage unless --zero is given). Throws a usage
// error naming the violated constraint when none of them is possible (tp does not divide the
// heads, pp does not divide the layers, dp x tp x pp != gpus, ...).
PlanReport make_plan(const PlanInputs& in);
// Every layout the fixed choices allow, ranked (enumerate_layouts), then the recommended one
// moved first: the simplest fitting layout (no offload, the lowest ZeRO stage, no pipeline, the
// least tensor parallelism, no recompute — in that order) whose step is within kSimplerWithin of
// the fastest fitting one; each other fitting layout says in Estimate::passed_over why it is not
// recommended. Throws a usage error naming the constraints when none is possible.
inline constexpr double kSimplerWithin = 0.05;
PlanReport make_recommendation(const PlanInputs& in);
// The recommendation rule on ranked rows (fitting first, fastest first): moves the simplest
// fitting row within kSimplerWithin of the fastest to the front and fills passed_over.
void prefer_simplest(std::vector<Estimate>& rows);

// top: rows shown; 0 = all.
std::string render_plan(const PlanReport& r, OutputFormat f, int64_t top = 0);
// top: rows shown of each group (fitting, not fitting); 0 = all.
std::string render_recommendation(const PlanReport& r, OutputFormat f, int64_t top = 10);

}  // namespace dl::plan
