// Reading dl-bench results (schema dlkit-bench/1, docs/FORMATS.md) so measured numbers replace
// datasheet ones: dl-shard --bench and dl-cost --bench share this.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dl/plan/plan.hpp"

namespace dl::plan {

// A row's "benchmark": the dl-bench command that measured it.
enum class BenchKind { gemm, memory, collective, train };
inline constexpr std::string_view kBenchKindNames[] = {"gemm", "memory", "collective", "train"};
constexpr std::span<const std::string_view> choice_names(BenchKind) { return kBenchKindNames; }
// A memory row's "direction" (dl-bench memory --direction): host to device, back, device to device.
enum class CopyDirection { h2d, d2h, d2d };
inline constexpr std::string_view kCopyDirectionNames[] = {"h2d", "d2h", "d2d"};
constexpr std::span<const std::string_view> choice_names(CopyDirection) { return kCopyDirectionNames; }

// The one reader of dl-bench output (dl-bench reads its own ranks' rows back with it too).
enum class BenchRowsFormat {
  detect,  // json when the text starts with '[', else jsonl
  json,    // an array of row objects (`--format json`)
  jsonl,   // one object per line (`--format jsonl`; blank lines are skipped)
  csv,     // a header, then a row a line (`--format csv`): numbers become numbers, empty cells are left out
};
// The rows with their keys in the order written. Throws a usage error naming `source` (and the
// row or line) when the text is empty, not JSON or CSV, or a row is not an object of schema
// "dlkit-bench/1" with a "benchmark" kind.
std::vector<nlohmann::ordered_json> parse_bench_output(const std::string& text, const std::string& source,
                                                       BenchRowsFormat format = BenchRowsFormat::detect);

// The rows of a dl-bench file, json or jsonl (auto-detected). "-" reads stdin. Usage errors as
// above, and for an unreadable file.
std::vector<nlohmann::json> read_bench_rows(const std::string& path);
// The same from text already read; `source` names it in errors.
std::vector<nlohmann::json> parse_bench_rows(const std::string& text, const std::string& source);

// The one rule dl-shard and dl-cost follow: a row measures the device it ran on, so it calibrates
// only a plan or an offer of that GPU model. bench_row_gpu: the row's canonical GPU model, "" for
// a row without one (it ran on a CPU and calibrates no GPU).
std::string bench_row_gpu(const nlohmann::json& row);
// The note both tools print for rows the rule sets aside: "bench: 3 CPU rows (no gpu_model) of
// bench.json ignored: a dl-bench row calibrates only a GPU of the model it measured".
std::string ignored_bench_rows_note(size_t rows, const std::string& what, const std::string& source);

// What a set of rows measured, for one GPU model and a training precision.
struct BenchSummary {
  std::string source;       // the file
  size_t rows = 0;          // rows considered (after the GPU-model filter); 0: none applies
  std::vector<std::string> ignored;  // ignored_bench_rows_note for CPU rows and other GPU models
  std::string gpu_model;    // canonical model of the rows ("" for CPU rows or when not given)
  std::string device;       // device name as reported
  std::string device_type;  // "cuda" | "cpu"
  // gemm rows: the best achieved FLOP/s at the chosen dtype (bf16 training: bf16, else fp16,
  // else the fastest row; fp16: fp16, else bf16, else the fastest; fp32: fp32, else tf32, else
  // the fastest).
  std::optional<double> gemm_flops;
  std::string gemm_dtype;
  // train rows: achieved FLOP/s per device = tokens_per_sec x flops_per_token / num_devices (the
  // best row, preferring rows at the training precision).
  std::optional<double> train_flops;
  std::string train_config;
  // collective rows: bus bandwidth (bytes/s) at the largest message size measured (max of
  // out-of-place and in-place), all-reduce preferred; nproc > 1 only.
  std::optional<double> busbw;
  std::string busbw_op;
  int64_t busbw_nproc = 0;
  double busbw_size = 0;
  // memory rows: host <-> device copy rate (bytes / time_s of h2d or d2h rows, the better).
  std::optional<double> host_bw;
};

// Summarises the GPU rows (CPU rows are set aside in `ignored`). gpu_model: keep only rows of
// that model (canonical or any alias; others go to `ignored`); empty: all GPU rows, which must
// then be of one model (a usage error lists them otherwise).
BenchSummary summarize_bench(const std::vector<nlohmann::json>& rows, Precision precision,
                             const std::string& gpu_model = "", const std::string& source = "");
// summarize_bench over the rows of a dl-bench file (read_bench_rows; "-" reads stdin, named "stdin"
// in errors). Callers that never hold the rows need no complete json type.
BenchSummary read_bench_summary(const std::string& path, Precision precision, const std::string& gpu_model = "");

// Measured values replace datasheet ones: a train row's achieved FLOP/s becomes peak_flops with
// achievable_fraction 1 (it is already achieved); otherwise a gemm row's FLOP/s becomes
// peak_flops (achievable_fraction still applies, as a GEMM peak is more than training reaches);
// busbw becomes intra_node_bw (dl-bench measures one machine); host copies become host_bw.
// Each replacement, and each set of ignored rows, is described in *notes.
Hardware apply_bench(const Hardware& hw, const BenchSummary& bench, std::vector<std::string>* notes = nullptr);

}  // namespace dl::plan
