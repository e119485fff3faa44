// The analytic model shared by dl-shard, dl-cost, dl-bench and dl-train: parameter counts,
// training FLOPs per token, memory per rank under each parallel layout, communication volume
// per step, and pipeline bubble. Formulas and worked examples: ../shared/REFERENCE.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dl/config/config.hpp"

namespace dl::plan {

// A transformer (or any model reduced to a parameter count) as the planner sees it.
struct ModelShape {
  std::string name;       // "gpt2-124m", a config path, or "7.5e9 params"
  double params = 0;      // psi: trainable parameters
  // Architecture (0 when unknown: memory and FLOPs then use only `params`).
  int64_t n_layer = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
  bool is_transformer() const { return n_layer > 0 && hidden > 0 && heads > 0 && seq > 0; }
};

// From a dl-train config: the same parameter count dl-train reports, to the parameter.
ModelShape model_from_config(const Config& config, const std::string& name = "");
// From --params with optional architecture hints (0 = unknown).
ModelShape model_from_params(double params, int64_t n_layer = 0, int64_t hidden = 0, int64_t heads = 0,
                             int64_t seq = 0, int64_t vocab = 0);

enum class FlopFormula {
  palm,  // 6N + 12 L H Q T (PaLM, Chowdhery et al. 2022, appendix B)
  llmc,  // 6N + 6 L D T (llm.c: causal attention counted at half)
};
std::string flop_formula_name(FlopFormula f);  // "6N+12LHQT (PaLM)" / "6N+6LDT (llm.c)"
// Training FLOPs per token (forward + backward). Without an architecture: 6N.
double flops_per_token(const ModelShape& m, FlopFormula f = FlopFormula::palm);

enum class Recompute { none, selective, full };

struct Layout {
  int64_t gpus = 1;            // world size
  int64_t gpus_per_node = 8;
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t zero = 0;            // 0..3
  bool offload_cpu = false;    // optimizer state (and its step) on the host
  int64_t micro_batch = 1;     // sequences per micro-batch per rank
  int64_t microbatches = 1;    // pipeline micro-batches per step (grad accumulation otherwise)
  std::string precision = "bf16";  // "bf16" | "fp16": mixed precision Adam; "fp32": all fp32
  Recompute recompute = Recompute::none;
  std::string describe() const;  // "dp=8 tp=1 pp=1 zero=3 offload=cpu mb=1"
};

// Bytes per parameter of each model-state kind for a precision (ZeRO paper: 2 + 2 + K=12 for
// mixed precision; 4 + 4 + 8 for fp32 Adam: weights, grads, exp_avg + exp_avg_sq).
struct StateBytes {
  double params = 2, grads = 2, optimizer = 12;
};
StateBytes state_bytes(const std::string& precision);

// Memory per rank. All in bytes.
struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0;  // model states on the GPU
  double activations = 0;       // for one micro-batch in flight (x in-flight micro-batches for pp)
  double comm_buffers = 0;      // gradient buckets, gathered ZeRO-3 layers, pipeline send/recv
  double overhead = 0;          // stated allowance: CUDA context, allocator fragmentation, workspace
  double host_offload = 0;      // per rank, moved to host memory by offload
  double total() const { return params + grads + optimizer + activations + comm_buffers + overhead; }
  double model_states() const { return params + grads + optimizer; }
};

// Fixed allowance for framework overhead per GPU (context, cuBLAS workspace, fragmentation).
inline constexpr double kOverheadBytes = 2.0e9;

MemoryBreakdown memory_per_rank(const ModelShape& m, const Layout& l);

// Activation bytes per transformer layer for one micro-batch (Korthikanti et al. 2022):
// s*b*h*(34 + 5*a*s/h) with 16-bit activations and no recompute; with tensor parallel t:
// s*b*h*(10 + 24/t + 5*a*s/(h*t)); full recompute keeps 2*s*b*h. `bytes_per_value` scales the
// 16-bit formula (2 -> as published, 4 -> fp32 activations).
double activation_bytes_per_layer(const ModelShape& m, int64_t micro_batch, int64_t tp, Recompute r,
                                  double bytes_per_value = 2.0);

// Communication per step per rank, in bytes sent (the ring algorithms' volume).
struct CommVolume {
  double dp = 0;        // DP / ZeRO gradient (and parameter) traffic: 2 psi, ZeRO-3 3 psi (scaled)
  double tp = 0;        // tensor-parallel all-reduces: per layer 2 forward + 2 backward of s*b*h
  double pp = 0;        // point-to-point activations and gradients between stages
  double total() const { return dp + tp + pp; }
};
CommVolume comm_per_rank(const ModelShape& m, const Layout& l);

// Pipeline bubble fraction (GPipe and 1F1B): (p - 1) / (m + p - 1).
double bubble_fraction(int64_t pp, int64_t microbatches);

// Hardware the step-time estimate assumes: datasheet values, or measured (dl-bench --format json).
struct Hardware {
  std::string gpu_model;          // "H100-SXM", ...
  double gpu_mem_bytes = 80e9;
  double peak_flops = 989e12;     // dense, at the training precision
  double achievable_fraction = 0.45;  // MFU assumed for compute time
  double intra_node_bw = 450e9;   // bytes/s per GPU (NVLink busbw)
  double inter_node_bw = 50e9;    // bytes/s per GPU (InfiniBand/Ethernet)
  double host_bw = 25e9;          // bytes/s per GPU to host memory (offload)
};

struct Estimate {
  Layout layout;
  MemoryBreakdown memory;
  CommVolume comm;
  double bubble = 0;
  bool fits = false;
  double headroom = 0;           // gpu_mem - total (negative when it does not fit)
  double step_seconds = 0;       // compute + exposed comm + bubble + offload traffic
  double compute_seconds = 0, comm_seconds = 0, offload_seconds = 0;
  std::string why_not;           // when it does not fit or the layout is impossible
};

// One layout for a model with a given global batch (sequences per step).
Estimate estimate(const ModelShape& m, const Layout& l, const Hardware& hw, int64_t global_batch);

// Every valid layout for `gpus` GPUs (dp x tp x pp = gpus with tp | heads, tp <= gpus_per_node,
// pp | n_layer; zero 0..3; offload on/off), estimated and sorted: fitting layouts by step time,
// then the rest by how far they miss.
std::vector<Estimate> enumerate_layouts(const ModelShape& m, const Layout& base, const Hardware& hw,
                                        int64_t global_batch);

}  // namespace dl::plan
