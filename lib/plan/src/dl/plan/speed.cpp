#include "dl/plan/speed.hpp"

#include <algorithm>
#include <cmath>

#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"

namespace dl::plan {

namespace {

// llm-foundry's benchmark tables (mosaicml/llm-foundry, scripts/train/benchmarking/README.md,
// "A100 80GB with 1600 Gbps node-node interconnect (RoCE)" and "H100 80GB BF16"; the rows at
// sequence length 2048): MFU per MPT model size, FSDP FULL_SHARD, 8 GPUs, the 70B rows on 64.
// The MFU values are those issue 21 quotes; sizes are the tables' nominal ones.
constexpr const char* kFoundry = "mosaicml/llm-foundry scripts/train/benchmarking/README.md (seq 2048, bf16)";

PublishedRun foundry(const char* name, const char* gpu, int64_t gpus, double params, double mfu) {
  PublishedRun r;
  r.name = name;
  r.source = kFoundry;
  r.gpu = gpu;
  r.gpus = gpus;
  r.params = params;
  r.mfu = mfu;
  return r;
}

// llm.c's GPT-2 124M (karpathy/llm.c scripts/run_gpt2_124M.sh): 18,865 steps x 524,288 tokens
// = 9.89B tokens in bf16; 94.3 minutes on 8x A100 80GB SXM (llm.c), 45 minutes on 8x H100 SXM
// (KellerJordan/modded-nanogpt README, the same run as its baseline).
PublishedRun llmc(const char* gpu, double minutes, const char* source) {
  PublishedRun r;
  r.name = "llm.c GPT-2 124M";
  r.source = source;
  r.gpu = gpu;
  r.gpus = 8;
  r.params = 124439808;
  r.layers = 12, r.hidden = 768, r.heads = 12, r.seq = 1024, r.vocab = 50257;
  r.tokens = 18865.0 * 524288.0;
  r.minutes = minutes;
  return r;
}

double bf16_peak(const GpuSpec& g) {
  if (g.bf16_flops > 0) return g.bf16_flops;
  if (g.fp16_flops > 0) return g.fp16_flops;
  return g.fp32_flops;
}

double intensity(const GpuSpec& g) { return bf16_peak(g) / g.memory_bw; }

const GpuSpec& spec_of(const std::string& model) {
  static const std::vector<GpuSpec>& table = gpu_table();
  for (const auto& g : table)
    if (g.model == model) return g;
  throw Error(ErrorKind::runtime, "speed calibration: GPU " + model + " is not in the GPU table");
}

SpeedCalibration fit() {
  SpeedCalibration c;
  const auto& runs = published_runs();
  const double i_ref = intensity(spec_of(c.reference_gpu));
  // beta: the reference GPU (A100) against the H100 in the same run (same code, same model).
  double log_ratio = 0;
  int pairs = 0;
  for (const auto& a : runs)
    for (const auto& h : runs)
      if (a.gpu == c.reference_gpu && h.gpu == "H100-SXM" && a.name == h.name) {
        log_ratio += std::log(run_mfu(h) / run_mfu(a));
        ++pairs;
      }
  c.beta = (log_ratio / static_cast<double>(pairs)) / std::log(i_ref / intensity(spec_of("H100-SXM")));
  auto factor = [&](const std::string& gpu) { return std::pow(i_ref / intensity(spec_of(gpu)), c.beta); };
  // Knots: runs within 10% of one size form one knot, the geometric mean of their MFU on the
  // reference GPU's scale.
  std::vector<const PublishedRun*> sorted;
  for (const auto& r : runs) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const PublishedRun* a, const PublishedRun* b) { return a->params < b->params; });
  std::vector<std::vector<std::pair<double, double>>> groups;
  for (const PublishedRun* r : sorted) {
    const std::pair<double, double> p{std::log(r->params), std::log(run_mfu(*r) / factor(r->gpu))};
    if (!groups.empty() && p.first - groups.back().front().first < 0.1) groups.back().push_back(p);
    else groups.push_back({p});
  }
  for (const auto& g : groups) {
    double n = 0, m = 0;
    for (const auto& [ln, lm] : g) n += ln, m += lm;
    c.knots.emplace_back(std::exp(n / static_cast<double>(g.size())), std::exp(m / static_cast<double>(g.size())));
  }
  return c;
}

double interpolate(const std::vector<std::pair<double, double>>& k, double params) {
  const double x = std::log(params);
  auto lx = [&](size_t i) { return std::log(k[i].first); };
  auto ly = [&](size_t i) { return std::log(k[i].second); };
  if (k.size() == 1 || x >= lx(k.size() - 1)) return k.back().second;
  size_t i = 0;
  while (i + 2 < k.size() && x > lx(i + 1)) ++i;
  // Below the smallest knot the first segment's slope continues (smaller models reach less).
  const double t = (x - lx(i)) / (lx(i + 1) - lx(i));
  return std::max(kMinMfu, std::exp(ly(i) + t * (ly(i + 1) - ly(i))));
}

}  // namespace

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> runs = {
      llmc("A100-SXM-80GB", 94.3, "karpathy/llm.c scripts/run_gpt2_124M.sh: 94.3 min on 8x A100 80GB SXM"),
      llmc("H100-SXM", 45.0, "KellerJordan/modded-nanogpt README: llm.c's GPT-2 124M baseline, 45 min on 8x H100"),
      foundry("llm-foundry MPT 125M", "A100-SXM-80GB", 8, 125e6, 0.448),
      foundry("llm-foundry MPT 1B", "A100-SXM-80GB", 8, 1e9, 0.599),
      foundry("llm-foundry MPT 7B", "A100-SXM-80GB", 8, 7e9, 0.642),
      foundry("llm-foundry MPT 70B", "A100-SXM-80GB", 64, 70e9, 0.533),
      foundry("llm-foundry MPT 1B", "H100-SXM", 8, 1e9, 0.418),
      foundry("llm-foundry MPT 7B", "H100-SXM", 8, 7e9, 0.464),
      foundry("llm-foundry MPT 13B", "H100-SXM", 8, 13e9, 0.398),
      foundry("llm-foundry MPT 70B", "H100-SXM", 64, 70e9, 0.426),
  };
  return runs;
}

ModelShape run_model(const PublishedRun& r) {
  return model_from_hints(r.params, r.layers, r.hidden, r.heads, r.seq, r.vocab, r.arch);
}

double run_mfu(const PublishedRun& r) {
  if (r.minutes <= 0) return r.mfu;
  const double work = r.tokens * flops_per_token(run_model(r), FlopFormula::palm);
  return work / (r.minutes * 60.0 * static_cast<double>(r.gpus) * bf16_peak(spec_of(r.gpu)));
}

const SpeedCalibration& speed_calibration() {
  static const SpeedCalibration c = [] {
    SpeedCalibration s = fit();
    // The spread: measured / modelled over every run (computed once the fit exists).
    s.low = s.high = 1;
    for (const auto& r : published_runs()) {
      const GpuSpec& g = spec_of(r.gpu);
      const double model = interpolate(s.knots, r.params) *
                           std::pow(intensity(spec_of(s.reference_gpu)) / intensity(g), s.beta);
      s.low = std::min(s.low, run_mfu(r) / model);
      s.high = std::max(s.high, run_mfu(r) / model);
    }
    return s;
  }();
  return c;
}

double gpu_mfu_factor(const GpuSpec& gpu) {
  const SpeedCalibration& c = speed_calibration();
  return std::pow(intensity(spec_of(c.reference_gpu)) / intensity(gpu), c.beta);
}

double size_mfu(double params) {
  const auto& k = speed_calibration().knots;
  if (params > 0) return interpolate(k, params);
  double m = 0;
  for (const auto& [p, v] : k) m += std::log(v);
  return std::exp(m / static_cast<double>(k.size()));
}

double calibrated_mfu(const GpuSpec& gpu, double params) { return std::min(1.0, size_mfu(params) * gpu_mfu_factor(gpu)); }

bool has_published_runs(const std::string& gpu_model) {
  for (const auto& r : published_runs())
    if (r.gpu == gpu_model) return true;
  return false;
}

std::string describe_mfu(const GpuSpec& gpu, double params) {
  const SpeedCalibration& c = speed_calibration();
  const auto& k = c.knots;
  std::string size = params > 0 ? str(format_si(params, ""), " params") : std::string("an unknown size (mean of the knots)");
  // Within 10% of a knot counts as at it (the knots group runs that close).
  if (params > 0 && params < k.front().first * 0.9) size += " (below the calibrated sizes: extrapolated)";
  if (params > k.back().first * 1.1) size += " (above the calibrated sizes: the largest knot's)";
  return str("MFU ", format_fixed(calibrated_mfu(gpu, params), 3), " = ", format_fixed(size_mfu(params), 3), " for ", size,
             " x ", format_fixed(gpu_mfu_factor(gpu), 3), " for ", gpu.model, "'s peak/bandwidth",
             has_published_runs(gpu.model) ? " (published runs of this GPU)" : " (no published run of this GPU)");
}

}  // namespace dl::plan
