// The calibrated speed model: the fraction of its dense peak (MFU) a GPU reaches training a
// GPT-style transformer, as a function of the GPU (its 16-bit peak and memory bandwidth) and the
// model size, fitted on published training runs. dl-cost prices every offer with it and dl-shard's
// step times start from it; communication between GPUs is added by plan::estimate.
//
//   MFU(gpu, N) = size_mfu(N) x gpu_mfu_factor(gpu)
//   gpu_mfu_factor = (I_ref / I_gpu)^beta,  I = dense 16-bit peak / memory bandwidth (FLOP per byte)
//   size_mfu       = log-linear interpolation in N between knots (the runs of one size, each
//                    divided by its GPU's factor, geometric mean); flat above the largest knot,
//                    the first segment's slope below the smallest (floored at kMinMfu)
//   beta           = ln(geomean of H100/A100 MFU ratios of the same run) / ln(I_A100 / I_H100)
//
// The runs, their sources and the fit's errors: docs/COST.md "The speed model".
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dl/plan/gpus.hpp"
#include "dl/plan/plan.hpp"

namespace dl::plan {

// A published training run. MFU counts 6N + 12 L D T FLOPs per token (PaLM, the formula
// llm-foundry's tables use) over the dense bf16 peak of every GPU of the run.
struct PublishedRun {
  std::string name;     // "llm.c GPT-2 124M"
  std::string source;   // where the figures are published
  std::string gpu;      // canonical model: "A100-SXM-80GB"
  int64_t gpus = 0;
  double params = 0;    // as published ("125M", "7B": the nominal size)
  // Architecture, for runs given as wall-clock (tokens in minutes); 0 for MFU-only rows.
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  // The block when it is not GPT-2's (a Llama-family or grouped-query run): --arch, --kv-heads,
  // --ffn-hidden, --untied-head as dl-cost takes them.
  ArchHints arch;
  double tokens = 0;    // wall-clock runs: tokens trained
  double minutes = 0;   // wall-clock runs: the measured duration (0: the source gives MFU)
  double mfu = 0;       // MFU-only rows: as published
};
const std::vector<PublishedRun>& published_runs();
// A run's MFU: as published, or tokens x flops_per_token / (seconds x gpus x bf16 peak).
double run_mfu(const PublishedRun& r);
// The model of a run for dl-cost (--params with the run's architecture and block when it has one).
ModelShape run_model(const PublishedRun& r);

struct SpeedCalibration {
  std::string reference_gpu = "A100-SXM-80GB";
  double beta = 0;
  std::vector<std::pair<double, double>> knots;  // (parameters, MFU on the reference GPU), ascending
  // Measured / modelled MFU over every run: the calibration's own spread, which dl-cost reports
  // as the range of each estimate (speed x low .. speed x high).
  double low = 1, high = 1;
};
const SpeedCalibration& speed_calibration();

inline constexpr double kMinMfu = 0.05;
// The fraction of its datasheet peak a large bf16 GEMM reaches: 8192^3 through PyTorch on an
// H100 SXM, 769-798 of 989 TFLOP/s (REFERENCE.md), the middle: 0.79. A measured GEMM (dl-bench)
// replaces the peak in the calibrated MFU as peak = GEMM / kGemmOfPeak.
inline constexpr double kGemmOfPeak = 0.79;
// (I_ref / I_gpu)^beta. I from the bf16 peak (fp16 where the GPU has no bf16, fp32 where neither).
double gpu_mfu_factor(const GpuSpec& gpu);
// MFU on the reference GPU for a model of `params` parameters (params <= 0: unknown size, the
// geometric mean of the knots).
double size_mfu(double params);
// size_mfu x gpu_mfu_factor, capped at 1.
double calibrated_mfu(const GpuSpec& gpu, double params);
// Whether the calibration holds runs of this GPU model (its speed is then measured, not inferred).
bool has_published_runs(const std::string& gpu_model);
// "MFU 0.39 = 0.52 for 124M params (calibrated on 10 published runs) x 0.75 for H100-SXM's peak/bandwidth".
std::string describe_mfu(const GpuSpec& gpu, double params);

}  // namespace dl::plan
