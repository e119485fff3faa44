#include "dl/plan/gpus.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "dl/cli/units.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"

namespace dl::plan {

namespace {

constexpr double T = 1e12;  // TFLOP/s and TB/s
constexpr double G = 1e9;   // GB and GB/s

// Bandwidth assumptions (per GPU, one direction, what a collective or a copy reaches in practice):
// - NVSwitch H100/H200/H20 (NVLink 4, 900 GB/s bidirectional): 450 GB/s all-reduce busbw, the
//   nccl-tests figure for 8x H100 on messages over 256 MB (REFERENCE.md: 450-480 GB/s).
// - Other NVLink systems: half the bidirectional total, times 0.8 (A100 600 -> 240 GB/s,
//   V100 300 -> 120 GB/s). An assumption; measure with dl-bench and pass --bench.
// - GPUs without NVLink between all pairs go through PCIe: about 50 / 25 / 12 GB/s for
//   PCIe 5.0 / 4.0 / 3.0 x16 (about 80% of 64 / 32 / 16 GB/s theoretical).
constexpr double kPcie5 = 50 * G, kPcie4 = 25 * G, kPcie3 = 12 * G;

std::vector<GpuSpec> build_table() {
  std::vector<GpuSpec> t;
  auto add = [&](GpuSpec s) { t.push_back(std::move(s)); };
  // Blackwell. NVIDIA's HGX and GB200 NVL72 specification tables, per GPU (dense = half the
  // "with sparsity" figures): HGX B200 (1,000 W) FP8 4.5, BF16/FP16 2.25, TF32 1.1 PFLOP/s, FP32
  // 75 TFLOP/s, 180 GB HBM3e at 7.7 TB/s; GB200 NVL72's GPU (1,200 W) FP8 5, BF16/FP16 2.5, TF32
  // 1.25 PFLOP/s, FP32 80 TFLOP/s, 186 GB at 8 TB/s. NVLink 5: 1.8 TB/s bidirectional per GPU
  // (intra-node busbw: half x 0.8, the rule below; no nccl-tests figure here). GB200's GPUs reach
  // the Grace CPU over NVLink-C2C (900 GB/s bidirectional) and the whole rack over the NVLink
  // Switch (--fabric nvlink between its trays).
  add({"B200", "NVIDIA B200 180GB (HGX)", "Blackwell", 180 * G, 2250 * T, 2250 * T, 1100 * T, 75 * T, 7.7 * T, 720 * G,
       kPcie5, "NVLink 5 + NVSwitch (1.8 TB/s bidirectional)",
       "NVIDIA HGX B200 specifications, https://www.nvidia.com/en-us/data-center/hgx/", 4500 * T});
  add({"GB200", "NVIDIA GB200 NVL72 Blackwell GPU 186GB", "Blackwell", 186 * G, 2500 * T, 2500 * T, 1250 * T, 80 * T,
       8.0 * T, 720 * G, 450 * G, "NVLink 5 + NVLink Switch (1.8 TB/s bidirectional, 72 GPUs), NVLink-C2C to the CPU",
       "NVIDIA GB200 NVL72 specifications, https://www.nvidia.com/en-us/data-center/gb200-nvl72/", 5000 * T});
  // Hopper. NVIDIA H100 Tensor Core GPU datasheet (2023): dense = half the "with sparsity"
  // figures: SXM5 FP8 1,979, BF16/FP16 989.4, TF32 494.7, FP32 66.9 TFLOP/s, 3.35 TB/s; PCIe
  // 1,513 / 756 / 378 / 51.2, 2.0 TB/s; NVL (94 GB) 1,670.5 / 835 / 417.5 / 60, 3.9 TB/s.
  add({"H100-SXM", "NVIDIA H100 SXM5 80GB", "Hopper", 80 * G, 989.4 * T, 989.4 * T, 494.7 * T, 66.9 * T,
       3.35 * T, 450 * G, kPcie5, "NVLink 4 + NVSwitch (900 GB/s bidirectional)",
       "NVIDIA H100 datasheet, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet", 1979 * T});
  add({"H100-PCIe", "NVIDIA H100 PCIe 80GB", "Hopper", 80 * G, 756 * T, 756 * T, 378 * T, 51.2 * T, 2.0 * T,
       kPcie5, kPcie5, "PCIe 5.0 x16 (NVLink bridges pair GPUs only)",
       "NVIDIA H100 datasheet, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet", 1513 * T});
  add({"H100-NVL", "NVIDIA H100 NVL 94GB", "Hopper", 94 * G, 835 * T, 835 * T, 417.5 * T, 60 * T, 3.9 * T, kPcie5,
       kPcie5, "PCIe 5.0 x16 (NVLink bridges pair GPUs only)",
       "NVIDIA H100 datasheet, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet", 1670.5 * T});
  // H800 (SXM): the H100 SXM die and memory for the Chinese market, NVLink cut to 400 GB/s
  // bidirectional (intra-node busbw 200 x 0.8 = 160 GB/s) and FP64 to about 1 TFLOP/s; the
  // tensor-core peaks are the H100 SXM's. No public NVIDIA datasheet: third-party comparisons.
  add({"H800", "NVIDIA H800 SXM5 80GB", "Hopper", 80 * G, 989.4 * T, 989.4 * T, 494.7 * T, 66.9 * T, 3.35 * T, 160 * G,
       kPcie5, "NVLink 4 + NVSwitch (400 GB/s bidirectional)",
       "H100 SXM datasheet peaks; NVLink 400 GB/s per https://www.philisun.com/technical-analysis/"
       "nvidia-h800-vs-h100-a-technical-deep-dive-into-politically-defined-ai-chips/ (no public NVIDIA datasheet)",
       1979 * T});
  // H20: a cut-down Hopper for the Chinese market: 148 TFLOP/s dense FP16/BF16, 296 FP8, TF32
  // 74, FP32 44; 96 GB HBM3 at 4.0 TB/s; NVLink 4 at 900 GB/s kept. No public NVIDIA datasheet:
  // figures as reported by the press and resellers (approximate).
  add({"H20", "NVIDIA H20 96GB", "Hopper", 96 * G, 148 * T, 148 * T, 74 * T, 44 * T, 4.0 * T, 450 * G, kPcie5,
       "NVLink 4 + NVSwitch (900 GB/s bidirectional)",
       "press and reseller figures, https://willitrunai.com/es/gpus/h20-96gb (no public NVIDIA datasheet; approximate)",
       296 * T});
  // NVIDIA H200 Tensor Core GPU datasheet (2024): same compute as H100 SXM (FP8 1,979 dense),
  // 141 GB HBM3e at 4.8 TB/s; the NVL (PCIe) card 835 TFLOP/s dense BF16, 1,670.5 FP8.
  add({"H200", "NVIDIA H200 SXM 141GB", "Hopper", 141 * G, 989.4 * T, 989.4 * T, 494.7 * T, 66.9 * T, 4.8 * T,
       450 * G, kPcie5, "NVLink 4 + NVSwitch (900 GB/s bidirectional)",
       "NVIDIA H200 datasheet, https://www.nvidia.com/en-us/data-center/h200/", 1979 * T});
  add({"H200-NVL", "NVIDIA H200 NVL 141GB", "Hopper", 141 * G, 835 * T, 835 * T, 417.5 * T, 60 * T, 4.8 * T, kPcie5,
       kPcie5, "PCIe 5.0 x16 (NVLink bridges pair GPUs only)",
       "NVIDIA H200 datasheet, https://www.nvidia.com/en-us/data-center/h200/", 1670.5 * T});
  // NVIDIA GH200 Grace Hopper Superchip datasheet: the H100 die (989 TFLOP/s dense BF16) with
  // 96 GB HBM3 at 4 TB/s or 144 GB HBM3e at 4.9 TB/s; NVLink-C2C to the Grace CPU at
  // 900 GB/s bidirectional (host_bw: 450 GB/s per direction).
  add({"GH200-96GB", "NVIDIA GH200 96GB HBM3", "Hopper", 96 * G, 989.4 * T, 989.4 * T, 494.7 * T, 66.9 * T, 4.0 * T,
       450 * G, 450 * G, "NVLink 4 (900 GB/s bidirectional), NVLink-C2C to the CPU", "NVIDIA GH200 datasheet", 1979 * T});
  add({"GH200-144GB", "NVIDIA GH200 144GB HBM3e", "Hopper", 144 * G, 989.4 * T, 989.4 * T, 494.7 * T, 66.9 * T,
       4.9 * T, 450 * G, 450 * G, "NVLink 4 (900 GB/s bidirectional), NVLink-C2C to the CPU",
       "NVIDIA GH200 datasheet", 1979 * T});
  // CDNA 3. AMD Instinct MI300X data sheet: dense FP8 2,614.9, FP16/BF16 1,307.4, TF32 653.7,
  // FP32 (matrix) 163.4 TFLOP/s; 192 GB HBM3 at 5.3 TB/s; Infinity Fabric: 7 links of 128 GB/s
  // bidirectional to the other 7 GPUs of an 8-GPU board (intra-node busbw 448 x 0.8 = 358 GB/s,
  // an assumption); PCIe 5.0 x16 to the host.
  add({"MI300X", "AMD Instinct MI300X 192GB", "CDNA 3", 192 * G, 1307.4 * T, 1307.4 * T, 653.7 * T, 163.4 * T, 5.3 * T,
       358 * G, kPcie5, "Infinity Fabric (7 x 128 GB/s bidirectional, fully connected 8 GPUs)",
       "AMD Instinct MI300X data sheet, https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
       2614.9 * T});
  // Ampere. NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 312, TF32 156, FP32 19.5 TFLOP/s
  // dense; 40 GB HBM2 1.555 TB/s; 80 GB HBM2e 2.039 TB/s (SXM4) / 1.935 TB/s (PCIe).
  add({"A100-SXM-80GB", "NVIDIA A100 SXM4 80GB", "Ampere", 80 * G, 312 * T, 312 * T, 156 * T, 19.5 * T, 2.039 * T,
       240 * G, kPcie4, "NVLink 3 + NVSwitch (600 GB/s bidirectional)", "NVIDIA A100 datasheet"});
  add({"A100-SXM-40GB", "NVIDIA A100 SXM4 40GB", "Ampere", 40 * G, 312 * T, 312 * T, 156 * T, 19.5 * T, 1.555 * T,
       240 * G, kPcie4, "NVLink 3 + NVSwitch (600 GB/s bidirectional)", "NVIDIA A100 datasheet"});
  add({"A100-PCIe-80GB", "NVIDIA A100 PCIe 80GB", "Ampere", 80 * G, 312 * T, 312 * T, 156 * T, 19.5 * T, 1.935 * T,
       kPcie4, kPcie4, "PCIe 4.0 x16 (NVLink bridges pair GPUs only)", "NVIDIA A100 datasheet"});
  add({"A100-PCIe-40GB", "NVIDIA A100 PCIe 40GB", "Ampere", 40 * G, 312 * T, 312 * T, 156 * T, 19.5 * T, 1.555 * T,
       kPcie4, kPcie4, "PCIe 4.0 x16 (NVLink bridges pair GPUs only)", "NVIDIA A100 datasheet"});
  // NVIDIA A10 datasheet: BF16/FP16 125, TF32 62.5, FP32 31.2 TFLOP/s dense, 24 GB GDDR6 600 GB/s.
  add({"A10", "NVIDIA A10 24GB", "Ampere", 24 * G, 125 * T, 125 * T, 62.5 * T, 31.2 * T, 600 * G, kPcie4, kPcie4,
       "PCIe 4.0 x16", "NVIDIA A10 datasheet"});
  // A10G (AWS G5): no public NVIDIA datasheet. Same 24 GB / 600 GB/s as the A10, fewer tensor
  // FLOP/s: about 70 TFLOP/s dense FP16/BF16 and 35 TFLOP/s FP32 (AWS G5 documentation and
  // third-party comparisons; approximate).
  add({"A10G", "NVIDIA A10G 24GB (AWS)", "Ampere", 24 * G, 70 * T, 70 * T, 35 * T, 35 * T, 600 * G, kPcie4, kPcie4,
       "PCIe 4.0 x16", "AWS G5 documentation (approximate)"});
  // NVIDIA A40 datasheet: BF16/FP16 149.7, TF32 74.8, FP32 37.4 TFLOP/s dense, 48 GB 696 GB/s.
  add({"A40", "NVIDIA A40 48GB", "Ampere", 48 * G, 149.7 * T, 149.7 * T, 74.8 * T, 37.4 * T, 696 * G, kPcie4, kPcie4,
       "PCIe 4.0 x16", "NVIDIA A40 datasheet"});
  // NVIDIA RTX A6000 / A5000 / A4000 datasheets (dense = half of the sparse tensor figure):
  // A6000 154.8 TFLOP/s, 48 GB 768 GB/s; A5000 111.1, 24 GB 768 GB/s; A4000 76.7, 16 GB 448 GB/s.
  add({"RTX-A6000", "NVIDIA RTX A6000 48GB", "Ampere", 48 * G, 154.8 * T, 154.8 * T, 77.4 * T, 38.7 * T, 768 * G,
       kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA RTX A6000 datasheet"});
  add({"RTX-A5000", "NVIDIA RTX A5000 24GB", "Ampere", 24 * G, 111.1 * T, 111.1 * T, 55.6 * T, 27.8 * T, 768 * G,
       kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA RTX A5000 datasheet"});
  add({"RTX-A4000", "NVIDIA RTX A4000 16GB", "Ampere", 16 * G, 76.7 * T, 76.7 * T, 38.4 * T, 19.2 * T, 448 * G,
       kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA RTX A4000 datasheet"});
  // GeForce Ampere (NVIDIA Ampere GA102 whitepaper): tensor FP16/BF16 with FP32 accumulate
  // runs at half the FP16-accumulate rate: RTX 3090 71 TFLOP/s, 24 GB 936 GB/s; RTX 3080 Ti
  // about 68 TFLOP/s (scaled by SM count and clock), 12 GB 912 GB/s.
  add({"RTX-3090", "NVIDIA GeForce RTX 3090 24GB", "Ampere", 24 * G, 71 * T, 71 * T, 35.6 * T, 35.6 * T, 936 * G,
       kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA GA102 whitepaper"});
  add({"RTX-3080-Ti", "NVIDIA GeForce RTX 3080 Ti 12GB", "Ampere", 12 * G, 68.2 * T, 68.2 * T, 34.1 * T, 34.1 * T,
       912 * G, kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA GA102 whitepaper (scaled, approximate)"});
  // Ada. NVIDIA L40S datasheet: FP8 733, BF16/FP16 362.05, TF32 183, FP32 91.6 TFLOP/s dense,
  // 48 GB 864 GB/s. L40: 362, 181, 90.5, 90.5. L4: FP8 242.5 (485 with sparsity), 121, 60, 30.3,
  // 24 GB 300 GB/s.
  add({"L40S", "NVIDIA L40S 48GB", "Ada Lovelace", 48 * G, 362.05 * T, 362.05 * T, 183 * T, 91.6 * T, 864 * G,
       kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/", 733 * T});
  add({"L40", "NVIDIA L40 48GB", "Ada Lovelace", 48 * G, 181 * T, 181 * T, 90.5 * T, 90.5 * T, 864 * G, kPcie4, kPcie4,
       "PCIe 4.0 x16", "NVIDIA L40 datasheet", 362 * T});
  add({"L4", "NVIDIA L4 24GB", "Ada Lovelace", 24 * G, 121 * T, 121 * T, 60 * T, 30.3 * T, 300 * G, kPcie4, kPcie4,
       "PCIe 4.0 x16", "NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/", 242.5 * T});
  // NVIDIA Ada GPU architecture whitepaper: RTX 4090 FP16/BF16 tensor with FP32 accumulate
  // 165.2 TFLOP/s dense, FP8 with FP32 accumulate 330.3, FP32 82.6, 24 GB 1008 GB/s.
  add({"RTX-4090", "NVIDIA GeForce RTX 4090 24GB", "Ada Lovelace", 24 * G, 165.2 * T, 165.2 * T, 82.6 * T, 82.6 * T,
       1008 * G, kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA Ada whitepaper", 330.3 * T});
  // NVIDIA RTX 6000 Ada Generation datasheet: 1,457 TFLOP/s FP8 tensor with sparsity -> 728.5 dense
  // FP8, 364.2 dense FP16/BF16 (a professional card: FP32 accumulation at the full rate), FP32 91.1 TFLOP/s,
  // 48 GB GDDR6 960 GB/s. Not to be confused with the Turing Quadro RTX 6000 (24 GB).
  add({"RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation 48GB", "Ada Lovelace", 48 * G, 364.2 * T, 364.2 * T,
       182.1 * T, 91.1 * T, 960 * G, kPcie4, kPcie4, "PCIe 4.0 x16", "NVIDIA RTX 6000 Ada datasheet (dense = half of sparse)", 728.5 * T});
  // Turing. NVIDIA T4 datasheet: FP16 tensor 65, FP32 8.1 TFLOP/s, 16 GB 320 GB/s; no BF16/TF32.
  // Quadro RTX 6000 / 5000 / 4000 datasheets: FP16 tensor 130.5 / 89.2 / 57, FP32 16.3 / 11.2 /
  // 7.1 TFLOP/s; 24 GB 672 GB/s, 16 GB 448 GB/s, 8 GB 416 GB/s.
  add({"T4", "NVIDIA T4 16GB", "Turing", 16 * G, 0, 65 * T, 0, 8.1 * T, 320 * G, kPcie3, kPcie3, "PCIe 3.0 x16",
       "NVIDIA T4 datasheet"});
  add({"Quadro-RTX-6000", "NVIDIA Quadro RTX 6000 24GB", "Turing", 24 * G, 0, 130.5 * T, 0, 16.3 * T, 672 * G, kPcie3,
       kPcie3, "PCIe 3.0 x16", "NVIDIA Quadro RTX 6000 datasheet"});
  // Quadro RTX 8000: the Quadro RTX 6000's TU102 with 48 GB (same datasheet compute and bandwidth).
  add({"Quadro-RTX-8000", "NVIDIA Quadro RTX 8000 48GB", "Turing", 48 * G, 0, 130.5 * T, 0, 16.3 * T, 672 * G, kPcie3,
       kPcie3, "PCIe 3.0 x16", "NVIDIA Quadro RTX 8000 datasheet"});
  add({"Quadro-RTX-5000", "NVIDIA Quadro RTX 5000 16GB", "Turing", 16 * G, 0, 89.2 * T, 0, 11.2 * T, 448 * G, kPcie3,
       kPcie3, "PCIe 3.0 x16", "NVIDIA Quadro RTX 5000 datasheet"});
  add({"Quadro-RTX-4000", "NVIDIA Quadro RTX 4000 8GB", "Turing", 8 * G, 0, 57 * T, 0, 7.1 * T, 416 * G, kPcie3,
       kPcie3, "PCIe 3.0 x16", "NVIDIA Quadro RTX 4000 datasheet"});
  // Volta. NVIDIA V100 datasheet: SXM2 FP16 tensor 125, FP32 15.7 TFLOP/s; PCIe 112 / 14;
  // 900 GB/s HBM2; NVLink 2 300 GB/s bidirectional on SXM2; no BF16/TF32.
  add({"V100-SXM2-16GB", "NVIDIA V100 SXM2 16GB", "Volta", 16 * G, 0, 125 * T, 0, 15.7 * T, 900 * G, 120 * G, kPcie3,
       "NVLink 2 (300 GB/s bidirectional)", "NVIDIA V100 datasheet"});
  add({"V100-SXM2-32GB", "NVIDIA V100 SXM2 32GB", "Volta", 32 * G, 0, 125 * T, 0, 15.7 * T, 900 * G, 120 * G, kPcie3,
       "NVLink 2 (300 GB/s bidirectional)", "NVIDIA V100 datasheet"});
  add({"V100-PCIe-16GB", "NVIDIA V100 PCIe 16GB", "Volta", 16 * G, 0, 112 * T, 0, 14 * T, 900 * G, kPcie3, kPcie3,
       "PCIe 3.0 x16", "NVIDIA V100 datasheet"});
  add({"V100-PCIe-32GB", "NVIDIA V100 PCIe 32GB", "Volta", 32 * G, 0, 112 * T, 0, 14 * T, 900 * G, kPcie3, kPcie3,
       "PCIe 3.0 x16", "NVIDIA V100 datasheet"});
  // Pascal and Kepler (no tensor cores). Tesla P100 datasheet: PCIe 16 GB FP16 18.7, FP32 9.3
  // TFLOP/s, 732 GB/s; SXM2 21.2 / 10.6. Tesla P4: FP32 5.5 TFLOP/s, 8 GB 192 GB/s (FP16 at a
  // small fraction of FP32: not modelled). Tesla K80 board: two GK210 GPUs, 8.73 TFLOP/s FP32
  // (boost) and 480 GB/s in all; clouds expose each GPU with 12 GB: half of each.
  add({"P100-PCIe-16GB", "NVIDIA Tesla P100 PCIe 16GB", "Pascal", 16 * G, 0, 18.7 * T, 0, 9.3 * T, 732 * G, kPcie3,
       kPcie3, "PCIe 3.0 x16", "NVIDIA Tesla P100 datasheet"});
  add({"P100-SXM2-16GB", "NVIDIA Tesla P100 SXM2 16GB", "Pascal", 16 * G, 0, 21.2 * T, 0, 10.6 * T, 732 * G, 60 * G,
       kPcie3, "NVLink 1 (160 GB/s bidirectional)", "NVIDIA Tesla P100 datasheet"});
  add({"P4", "NVIDIA Tesla P4 8GB", "Pascal", 8 * G, 0, 0, 0, 5.5 * T, 192 * G, kPcie3, kPcie3, "PCIe 3.0 x16",
       "NVIDIA Tesla P4 datasheet"});
  add({"K80", "NVIDIA Tesla K80 (one of two GK210 GPUs, 12GB)", "Kepler", 12 * G, 0, 0, 0, 4.37 * T, 240 * G, kPcie3,
       kPcie3, "PCIe 3.0 x16", "NVIDIA Tesla K80 datasheet (per GPU: half the board)"});
  return t;
}

// A GPU name reduced to its model tokens, memory size and form factor.
struct ParsedName {
  std::string base;     // tokens joined: "H100", "A100", "RTXA6000", "QUADRORTX6000", "3080TI"
  double memory_gb = 0; // "80GB", "(80 GB)", "80G"; 0 when absent
  std::string form;     // "sxm" | "pcie" | "nvl" | ""
};

ParsedName parse_name(const std::string& raw) {
  std::string s = to_upper(raw);
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.') c = ' ';
  std::vector<std::string> tok;
  for (size_t i = 0; i < s.size();) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) tok.push_back(s.substr(i, j - i));
    i = j;
  }
  ParsedName p;
  std::vector<std::string> keep;
  for (size_t i = 0; i < tok.size(); ++i) {
    const std::string& t = tok[i];
    auto ends_with = [&](const std::string& suf) {
      return t.size() > suf.size() && t.compare(t.size() - suf.size(), suf.size(), suf) == 0;
    };
    auto numeric = [](const std::string& x) {
      return !x.empty() && std::all_of(x.begin(), x.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
    };
    if (t == "NVIDIA" || t == "TESLA" || t == "GEFORCE" || t == "GPU" || t == "HBM3" || t == "HBM3E" || t == "HBM2" ||
        t == "HBM2E" || t == "GDDR6" || t == "GDDR6X" || t == "TENSOR" || t == "CORE" || t == "GEN4" || t == "GEN5" ||
        t == "AMD" || t == "INSTINCT")
      continue;
    if (t == "SXM" || t == "SXM2" || t == "SXM3" || t == "SXM4" || t == "SXM5" || t == "HGX" || t == "DGX") {
      p.form = "sxm";
      continue;
    }
    if (t == "PCIE") {
      p.form = "pcie";
      continue;
    }
    if (t == "NVL") {
      p.form = "nvl";
      continue;
    }
    // "80GB", "80G", "80GIB" or "80" followed by "GB"
    bool is_memory = false;
    for (const std::string suf : {"GIB", "GB", "G"}) {
      if (!is_memory && ends_with(suf) && numeric(t.substr(0, t.size() - suf.size()))) {
        p.memory_gb = std::atof(t.c_str());
        is_memory = true;
      }
    }
    if (is_memory) continue;
    if (numeric(t) && i + 1 < tok.size() && (tok[i + 1] == "GB" || tok[i + 1] == "GIB")) {
      p.memory_gb = std::atof(t.c_str());
      ++i;
      continue;
    }
    keep.push_back(t);
  }
  for (const auto& k : keep) p.base += k;
  return p;
}

// The canonical model for a parsed name, before the memory sanity check.
std::optional<std::string> resolve(const ParsedName& p) {
  const std::string& b = p.base;
  const double mem = p.memory_gb;
  auto mem_is = [&](double gb) { return std::fabs(mem - gb) < 0.5; };
  if (b == "H100") {
    if (p.form == "nvl" || mem_is(94) || mem_is(96)) return "H100-NVL";
    if (p.form == "pcie") return "H100-PCIe";
    // "H100 (80 GB)", "H100 HGX", "NVIDIA H100 80GB HBM3" (what the SXM5 part reports). Cloud
    // listings without a form factor are taken as SXM (HGX boards), the common offer.
    return "H100-SXM";
  }
  if (b == "H200") return p.form == "nvl" ? "H200-NVL" : "H200";
  if (b == "H800") return "H800";
  if (b == "H20") return "H20";
  if (b == "B200") return "B200";
  // "GB200", "GB200 NVL72", "GB200NVL72": a GPU of the superchip.
  if (b.rfind("GB200", 0) == 0) return "GB200";
  if (b == "MI300X") return "MI300X";
  if (b == "GH200") return mem_is(144) ? "GH200-144GB" : "GH200-96GB";
  if (b == "A100") {
    // A bare "A100" is ambiguous (40 or 80 GB); one with a size and no form factor is taken as
    // SXM4 (cloud listings like "A100 (80 GB)": the same compute and memory as PCIe, but the
    // NVLink bandwidth applies only to SXM boards).
    if (mem_is(40)) return p.form == "pcie" ? "A100-PCIe-40GB" : "A100-SXM-40GB";
    if (mem_is(80)) return p.form == "pcie" ? "A100-PCIe-80GB" : "A100-SXM-80GB";
    return std::nullopt;
  }
  if (b == "A10G") return "A10G";
  if (b == "A10") return "A10";
  if (b == "A40") return "A40";
  if (b == "L40S") return "L40S";
  if (b == "L40") return "L40";
  if (b == "L4") return "L4";
  if (b == "T4") return "T4";
  if (b == "RTXA6000" || b == "A6000") return "RTX-A6000";
  if (b == "RTXA5000" || b == "A5000") return "RTX-A5000";
  if (b == "RTXA4000" || b == "A4000") return "RTX-A4000";
  if (b == "RTX4090" || b == "4090") return "RTX-4090";
  if (b == "RTX3090" || b == "3090") return "RTX-3090";
  if (b == "RTX3080TI" || b == "3080TI") return "RTX-3080-Ti";
  // Turing Quadro cards; "RTX 6000" alone could be the 24 GB Quadro or the 48 GB RTX 6000 Ada.
  if (b == "RTX6000ADA" || (b == "RTX6000" && mem_is(48))) return "RTX-6000-Ada";
  if (b == "QUADRORTX8000" || b == "RTX8000") return "Quadro-RTX-8000";
  if (b == "QUADRORTX6000" || (b == "RTX6000" && mem_is(24))) return "Quadro-RTX-6000";
  if (b == "QUADRORTX5000" || (b == "RTX5000" && mem_is(16))) return "Quadro-RTX-5000";
  if (b == "QUADRORTX4000" || (b == "RTX4000" && mem_is(8))) return "Quadro-RTX-4000";
  if (b == "V100") {
    if (mem_is(16) || mem_is(32)) {
      std::string size = mem_is(16) ? "16GB" : "32GB";
      return (p.form == "pcie" ? "V100-PCIe-" : "V100-SXM2-") + size;
    }
    return std::nullopt;
  }
  if (b == "P100") return p.form == "sxm" ? "P100-SXM2-16GB" : "P100-PCIe-16GB";
  if (b == "P4") return "P4";
  if (b == "K80") return "K80";
  return std::nullopt;
}

}  // namespace

std::optional<double> GpuSpec::peak_flops(MathPrecision precision) const {
  double v = 0;
  switch (precision) {
    case MathPrecision::bf16: v = bf16_flops; break;
    case MathPrecision::fp16: v = fp16_flops; break;
    case MathPrecision::tf32: v = tf32_flops; break;
    case MathPrecision::fp32: v = fp32_flops; break;
    case MathPrecision::fp8: v = fp8_flops; break;
  }
  if (v > 0) return v;
  return std::nullopt;
}

const std::vector<GpuSpec>& gpu_table() {
  static const std::vector<GpuSpec> table = build_table();
  return table;
}

std::optional<std::string> canonical_gpu(const std::string& name) {
  // A canonical name (any case) is itself.
  const std::string u = to_upper(name);
  for (const auto& g : gpu_table())
    if (to_upper(g.model) == u) return g.model;
  ParsedName p = parse_name(name);
  auto model = resolve(p);
  if (!model) return std::nullopt;
  // A stated memory size must be the model's (within 10%: "80GB" vs 79.6 GiB reported).
  if (p.memory_gb > 0) {
    for (const auto& g : gpu_table())
      if (g.model == *model && std::fabs(p.memory_gb * 1e9 - g.memory_bytes) > 0.1 * g.memory_bytes)
        return std::nullopt;
  }
  return model;
}

std::optional<GpuSpec> gpu_spec(const std::string& name) {
  auto model = canonical_gpu(name);
  if (!model) return std::nullopt;
  for (const auto& g : gpu_table())
    if (g.model == *model) return g;
  return std::nullopt;
}

std::vector<std::string> gpu_candidates(const std::string& name) {
  const std::string q = lower_alnum(name);
  std::vector<std::string> out;
  if (q.empty()) return out;
  for (const auto& g : gpu_table())
    if (lower_alnum(g.model).find(q) != std::string::npos || lower_alnum(g.name).find(q) != std::string::npos)
      out.push_back(g.model);
  return out;
}

GpuSpec find_gpu(const std::string& name) {
  if (auto spec = gpu_spec(name)) return *spec;
  const std::vector<std::string> candidates = gpu_candidates(name);
  if (candidates.size() == 1) return *gpu_spec(candidates.front());
  if (!candidates.empty())
    throw_option_error("{gpu}: '", name, "' is ambiguous: ", join(candidates, ", "), " (name one of them)");
  std::vector<std::string> known;
  for (const auto& g : gpu_table()) known.push_back(g.model);
  const auto near = closest_name(name, known);
  throw_option_error("{gpu}: unknown GPU '", name, "'", near ? " (did you mean '" + *near + "'?)" : "", "; known: ",
                     join(known, ", "));
}

std::string precision_refusal(const GpuSpec& gpu, Precision precision) {
  if (precision != Precision::fp8 || gpu.fp8_flops > 0) return {};
  std::vector<std::string> with_fp8;
  for (const auto& g : gpu_table())
    if (g.fp8_flops > 0) with_fp8.push_back(g.model);
  return str(gpu.model, " (", gpu.arch, ") has no FP8 tensor cores (FP8: ", join(with_fp8, ", "),
             "); use {precision} bf16");
}

Hardware hardware_for_gpu(const GpuSpec& gpu, Precision training, std::string* note) {
  using enum MathPrecision;
  if (std::string why = precision_refusal(gpu, training); !why.empty()) throw_option_error(why);
  const MathPrecision precision = math_precision(training);
  Hardware hw;
  hw.gpu_model = gpu.model;
  hw.gpu_mem_bytes = gpu.memory_bytes;
  hw.intra_node_bw = gpu.intra_node_busbw;
  hw.host_bw = gpu.host_bw;
  hw.source = gpu.model + " datasheet";
  std::vector<MathPrecision> order = {precision};
  if (precision == bf16) order = {bf16, fp16, fp32};
  else if (precision == fp16) order = {fp16, bf16, fp32};
  for (MathPrecision p : order) {
    if (auto v = gpu.peak_flops(p)) {
      hw.peak_flops = *v;
      if (p != precision && note)
        *note = gpu.model + " has no " + std::string(choice_name(precision)) + " arithmetic: using its " +
                std::string(choice_name(p)) + " peak (" +
                std::to_string(static_cast<int64_t>(std::llround(*v / 1e12))) + " TFLOP/s)";
      return hw;
    }
  }
  hw.peak_flops = gpu.fp32_flops;
  return hw;
}

// ---------------------------------------------------------------------------------------------
// Fabrics between nodes

const std::vector<Fabric>& fabric_table() {
  // Per GPU and per direction, at the link's signalling rate (what plan::Hardware's 50 GB/s
  // default always was: one 400 Gb/s NIC per GPU); collectives reach 80-90% of it.
  static const std::vector<Fabric> table = {
      {"nvlink", "NVLink Switch between nodes (GB200 NVL72, DGX GH200): NVLink 5, 900 GB/s per GPU", 900 * G,
       "NVIDIA GB200 NVL72 specifications (1.8 TB/s bidirectional per GPU)"},
      {"ib-xdr", "InfiniBand XDR, 800 Gb/s per GPU (Quantum-X800, ConnectX-8)", 100 * G,
       "NVIDIA Quantum-X800 InfiniBand platform"},
      {"ib-ndr", "InfiniBand NDR, 400 Gb/s per GPU (DGX H100: 8 ConnectX-7 per 8 GPUs)", 50 * G,
       "NVIDIA DGX H100 user guide (eight 400 Gb/s NDR ports)"},
      {"ib-hdr", "InfiniBand HDR, 200 Gb/s per GPU (DGX A100: 8 ConnectX-6 per 8 GPUs)", 25 * G,
       "NVIDIA DGX A100 user guide (eight 200 Gb/s HDR ports)"},
      {"roce", "RoCE v2 Ethernet, 400 Gb/s per GPU (Llama 3's 24K-GPU cluster)", 50 * G,
       "Llama 3 paper (arXiv 2407.21783), section 3.3.1: RoCE at 400 Gbps between GPUs"},
      {"omnipath", "Omni-Path, 100 Gb/s links, 4 per 8-GPU node (BLOOM's Jean Zay)", 6.25 * G,
       "BLOOM paper (arXiv 2211.05100), hardware: four 100 Gb/s Omni-Path links per 8-GPU node"},
      {"ethernet", "100 Gb Ethernet per 8-GPU node, shared", 12.5 * G / 8,
       "100 GbE: 12.5 GB/s per node for its 8 GPUs"},
  };
  return table;
}

double parse_bandwidth(std::string text, const std::string& what) {
  if (text.size() > 2 && text.compare(text.size() - 2, 2, "/s") == 0) text.resize(text.size() - 2);
  const double bw = parse_size(text, what);
  if (!(bw > 0)) throw_option_error(what, ": need a bandwidth > 0, got '", text, "'");
  return bw;
}

Fabric find_fabric(const std::string& name) {
  const std::string key = lower_alnum(name);
  for (const auto& f : fabric_table())
    if (lower_alnum(f.name) == key) return f;
  for (const auto& [alias, preset] : std::initializer_list<std::pair<const char*, const char*>>{
           {"ndr", "ib-ndr"}, {"infinibandndr", "ib-ndr"}, {"hdr", "ib-hdr"}, {"infinibandhdr", "ib-hdr"},
           {"xdr", "ib-xdr"}, {"infinibandxdr", "ib-xdr"}, {"nvswitch", "nvlink"}, {"opa", "omnipath"},
           {"rocev2", "roce"}})
    if (key == alias) return find_fabric(preset);
  std::vector<std::string> names;
  for (const auto& f : fabric_table()) names.push_back(f.name);
  // A bandwidth per GPU: "25GB/s".
  if (name.size() > 2 && name.compare(name.size() - 2, 2, "/s") == 0)
    return {name, str("custom, ", name, " per GPU"), parse_bandwidth(name, "{fabric}"), "{fabric}"};
  const auto near = closest_name(name, names);
  throw_option_error("{fabric}: unknown fabric '", name, "'", near ? " (did you mean '" + *near + "'?)" : "",
                     "; presets: ", join(names, ", "), ", or a bandwidth per GPU such as 25GB/s");
}

}  // namespace dl::plan
