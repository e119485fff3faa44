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
  // Sequence parallelism wherever tp > 1; default: off for a config (dl-train does not run it),
  // on for a bare model (Megatron-LM, NeMo and torchtitan run TP with it).
  std::optional<bool> sequence_parallel;
  // A mixture of experts' all-to-all overlap with compute (--moe-overlap); default none.
  MoeOverlap moe_overlap = MoeOverlap::none;
  bool uneven_stages = false;  // Layout::uneven_stages
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
// moved first: the first fitting layout in the order practitioners climb (kLadder: DP, ZeRO-1,
// ZeRO-2, ZeRO-3/FSDP, selective then full recompute, TP inside a node, PP across nodes, CPU
// offload last) whose step is within kSimplerWithin of the fastest fitting one, preferring those
// that leave kComfortHeadroom of the GPU free; each other fitting layout says in
// Estimate::passed_over why it is not recommended. Throws a usage error naming the constraints
// when none is possible. dl-cost's fit check calls it too, so the two tools agree.
inline constexpr double kSimplerWithin = 0.05;
// A layout using all but this fraction of the GPU's memory is passed over for one that leaves
// more, within kSimplerWithin: allocator spikes and fragmentation beyond kOverheadBytes.
inline constexpr double kComfortHeadroom = 0.03;
PlanReport make_recommendation(const PlanInputs& in);
// The recommendation rule on ranked rows (fitting first, fastest first): moves the simplest
// fitting row within kSimplerWithin of the fastest to the front and fills passed_over.
void prefer_simplest(std::vector<Estimate>& rows);

// The rungs of the ladder practitioners climb, simplest first, and which layouts each holds.
struct Rung {
  const char* name;
  bool (*holds)(const Layout&);
};
extern const std::vector<Rung> kLadder;
// --explain: one line per rung of kLadder for rows ranked by make_recommendation: the layout the
// rung offers (the recommended one, else the rung's fastest fitting one, else the one needing
// the least memory) and why it was chosen or rejected (does not fit: why; passed over: why).
std::vector<std::string> explain_ladder(const std::vector<Estimate>& rows);
// "zero=2", "tp=4 pp=8 zero=1 recompute=selective sp", "zero=3 offload=cpu": what differs from
// plain data parallelism, as dl-cost names a row's layout.
std::string compact_layout(const Layout& l);

// top: rows shown; 0 = all.
std::string render_plan(const PlanReport& r, OutputFormat f, int64_t top = 0);
// top: rows shown of each group (fitting, not fitting); 0 = all.
std::string render_recommendation(const PlanReport& r, OutputFormat f, int64_t top = 10);

}  // namespace dl::plan
