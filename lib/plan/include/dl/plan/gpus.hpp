// Known GPUs: datasheet memory, dense peak FLOP/s per precision, memory bandwidth and the
// bandwidths the planner assumes between GPUs and to the host; and the names they go by.
//
// canonical_gpu() maps the names people, clouds and drivers use ("H100 (80 GB)",
// "NVIDIA H100 80GB HBM3", "A100 80GB SXM4", "Tesla V100-SXM2-16GB") to one canonical model
// ("H100-SXM"); dl-shard, dl-cost (cloud catalogs) and dl-bench (device names) share it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "dl/plan/plan.hpp"

namespace dl::plan {

struct GpuSpec {
  std::string model;         // canonical name: "H100-SXM"
  std::string name;          // what the datasheet calls it
  std::string arch;          // "Hopper", "Ampere", ...
  double memory_bytes = 0;   // decimal: 80 GB = 80e9
  // Dense peak FLOP/s (no structured sparsity), tensor cores with fp32 accumulation where the
  // GPU has them; 0 = not supported at that precision.
  double bf16_flops = 0, fp16_flops = 0, tf32_flops = 0, fp32_flops = 0;
  double memory_bw = 0;         // bytes/s, datasheet
  double intra_node_busbw = 0;  // bytes/s per GPU that an all-reduce reaches inside one node
                                // (NVLink/NVSwitch, else PCIe); an assumption where not measured
  double host_bw = 0;           // bytes/s per GPU to host memory (PCIe per direction, practical)
  std::string interconnect;     // "NVLink 4 (900 GB/s bidirectional)", "PCIe 4.0 x16", ...
  std::string source;           // where the numbers come from (a datasheet's name and its URL)
  // Dense FP8 tensor-core peak (E4M3/E5M2 inputs, FP32 accumulation): Hopper, Ada, Blackwell,
  // CDNA 3; 0 = no FP8 arithmetic (--precision fp8 is refused).
  double fp8_flops = 0;

  // Dense peak in that arithmetic; nullopt when the GPU has none.
  std::optional<double> peak_flops(MathPrecision precision) const;
};

// Every GPU in the table, newest families first.
const std::vector<GpuSpec>& gpu_table();

// The canonical model for a GPU name in any of its common spellings; nullopt when the name is
// unknown or ambiguous (a bare "A100" could be 40 or 80 GB, SXM or PCIe).
std::optional<std::string> canonical_gpu(const std::string& name);

// The table entry for a canonical model or any name canonical_gpu() maps.
std::optional<GpuSpec> gpu_spec(const std::string& name);

// The models a name that canonical_gpu() does not resolve could mean: those whose model or
// datasheet name contains its letters and digits ("A100": the four A100s). Empty when none.
std::vector<std::string> gpu_candidates(const std::string& name);

// The one GPU a flag names (dl-shard --gpu, dl-cost onprem --gpu): the table entry, or a usage
// error naming {gpu} that lists the candidates when the name is ambiguous ("A100 is ambiguous:
// A100-SXM-80GB, ..."), or the known models when it matches none.
GpuSpec find_gpu(const std::string& name);

// The planner's hardware for one GPU at a training precision: datasheet peak, memory and
// bandwidths (inter-node bandwidth stays the Hardware default, 50 GB/s per GPU: see Fabric). A GPU
// without arithmetic at that precision falls back (bf16 -> fp16 -> fp32) and says so in *note;
// fp8 does not fall back: a GPU without FP8 tensor cores is a usage error naming it (precision_refusal).
Hardware hardware_for_gpu(const GpuSpec& gpu, Precision precision, std::string* note = nullptr);

// Why `gpu` cannot plan `precision` ("A100-SXM-80GB has no FP8 tensor cores (FP8: H100-SXM, ...);
// use --precision bf16"); empty when it can. Only fp8 is refused: the others fall back.
std::string precision_refusal(const GpuSpec& gpu, Precision precision);

// The network between nodes, per GPU (one direction, the link rate a collective is bounded by):
// the bandwidth plan::Hardware::inter_node_bw takes. Presets for --fabric; see fabric_table().
struct Fabric {
  std::string name;          // "ib-ndr"
  std::string description;   // "InfiniBand NDR, 400 Gb/s per GPU"
  double bytes_per_s = 0;    // per GPU
  std::string source;        // where the rate comes from
};
// Every preset: nvlink, ib-xdr, ib-ndr (the default, plan::Hardware's 50 GB/s), ib-hdr, roce,
// omnipath, ethernet.
const std::vector<Fabric>& fabric_table();
inline constexpr std::string_view kDefaultFabric = "ib-ndr";
// The preset of that name (any case; "ndr" and "infiniband-ndr" are ib-ndr), or a bandwidth per
// GPU ("25GB/s", "200Gb/s"): a custom fabric named by it. Usage error naming {fabric} otherwise,
// listing the presets.
Fabric find_fabric(const std::string& name);

// Bytes per second from "25GB/s", "0.43GB/s" or a size taken as per second ("25GB"); `what` names
// the flag in the error.
double parse_bandwidth(std::string text, const std::string& what);

}  // namespace dl::plan
