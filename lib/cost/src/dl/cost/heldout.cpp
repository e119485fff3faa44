// dl-cost validate's held-out table: published training runs the speed model was not fitted on
// (plan::published_runs are the fitted ones), priced as dl-cost estimate prices them.
// Figures, quotes and caveats: docs/COST.md "Held-out runs". Nothing here feeds a constant.
#include <algorithm>
#include <cmath>

#include "dl/core/error.hpp"
#include "dl/cost/estimate.hpp"
#include "dl/cost/format.hpp"

namespace dl::cost {

namespace {

struct Shape {
  double params;
  const char* family;  // "llama" or "" (GPT's block)
  int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq;
  bool untied;
};

HeldOutRun run(const char* name, const char* gpu, int64_t gpus, bool gpus_published, Shape s, double tokens,
               double global_batch, const char* fabric, double gpu_hours, HeldOutScope scope, const char* status,
               const char* source, const char* note) {
  HeldOutRun r;
  r.name = name;
  r.gpu = gpu;
  r.gpus = gpus;
  r.gpus_published = gpus_published;
  r.params = s.params;
  r.layers = s.layers, r.hidden = s.hidden, r.heads = s.heads, r.seq = s.seq, r.vocab = s.vocab;
  r.arch.family = s.family;
  r.arch.kv_heads = s.kv_heads;
  r.arch.ffn_hidden = s.ffn;
  r.arch.untied_head = s.untied;
  r.tokens = tokens;
  r.global_batch = global_batch;
  r.fabric = fabric;
  r.gpu_hours = gpu_hours;
  r.scope = scope;
  r.status = status;
  r.source = source;
  r.note = note;
  return r;
}

constexpr auto kAllIn = HeldOutScope::all_in;
constexpr auto kCompute = HeldOutScope::compute;
constexpr double M4 = 4194304, M2 = 2097152, M16 = 16777216;

constexpr const char* kLlama2 =
    "https://github.com/facebookresearch/llama/blob/main/MODEL_CARD.md, training table (\"Time: total GPU time\"); "
    "arXiv 2307.09288 Table 1 (4M-token batch, GQA for 34B/70B), section 2.2.1 (200 Gbps RoCE or InfiniBand)";
constexpr const char* kLlama2Note =
    "GPU count not published: 2,048 assumed (LLaMA-1 65B's published count, the same team's previous run); "
    "200 Gbps endpoints (--fabric ib-hdr)";
constexpr const char* kLlama3 =
    "https://github.com/meta-llama/llama3/blob/main/MODEL_CARD.md, training table (\"Time refers to total GPU time\")";
constexpr const char* kLlama3Note =
    "GPU count and batch not published: 2,048 and 16M tokens (the 405B's final batch) assumed; Quantum2 InfiniBand "
    "400 Gbps (--fabric ib-ndr); shape from the released config (secondary copies)";
constexpr const char* kPythia =
    "arXiv 2304.01373 Table 5 (p21, \"computed from logged iteration time\"), transcribed by a third-party dataset "
    "build script; model card: 143,000 steps x 2,097,152 tokens";
constexpr const char* kLlama1 =
    "arXiv 2302.13971: \"380 tokens/sec/GPU on 2048 A100 GPU with 80GB\" (65B, section 2.4); GPU-hours of Table 15 "
    "(carbon table) as transcribed by a third-party dataset build script";
constexpr const char* kLlama1Note =
    "throughput-derived figure (compute); GPU count published for 65B only (2,048), assumed for the others; "
    "4M-token batch (paper Table 2)";

// The run's own configuration, where it is published: micro-batch and activation checkpointing
// (full recompute repeats the forward pass: work dl-cost prices).
HeldOutRun trained(HeldOutRun r, int64_t micro_batch, plan::Recompute recompute, const char* config) {
  r.micro_batch = micro_batch;
  r.recompute = recompute;
  r.note += str("; trained with micro-batch ", micro_batch, " and ", plan::recompute_name(recompute), " recompute (",
                config, ")");
  return r;
}

constexpr auto kFull = plan::Recompute::full;

// A mixture of experts' shape (plan::ArchHints' expert fields) and node-limited routing.
HeldOutRun experts(HeldOutRun r, int64_t experts, int64_t active, int64_t expert_ffn, int64_t shared, int64_t dense_layers,
                   int64_t max_nodes) {
  r.arch.experts = experts;
  r.arch.active_experts = active;
  r.arch.expert_ffn = expert_ffn;
  r.arch.shared_experts = shared;
  r.arch.dense_layers = dense_layers;
  r.arch.moe_max_nodes = max_nodes;
  return r;
}

// The run's published layout (tp, pp, ep, ZeRO; uneven pipeline stages where pp divides no layer
// count), precision, recompute and all-to-all overlap, fixed instead of searched.
HeldOutRun laid_out(HeldOutRun r, int64_t tp, int64_t pp, int64_t ep, int64_t zero, bool uneven, const char* precision,
                    plan::Recompute recompute, plan::MoeOverlap overlap, const char* config) {
  r.layout.tp = tp, r.layout.pp = pp, r.layout.ep = ep, r.layout.zero = zero, r.layout.offload = false;
  r.uneven_stages = uneven;
  r.precision = precision;
  r.recompute = recompute;
  r.moe_overlap = overlap;
  r.note += str("; trained with tp ", tp, " pp ", pp, " ep ", ep, " ZeRO-", zero, ", ", precision, ", ",
                recompute == plan::Recompute::none ? std::string("no") : plan::recompute_name(recompute),
                " recompute, all-to-all overlap ", choice_name(overlap),
                r.arch.moe_max_nodes > 0 ? str(", at most ", r.arch.moe_max_nodes, " nodes a token") : std::string(), " (",
                config, ")");
  return r;
}

constexpr const char* kDeepSeekV3 =
    "arXiv 2412.19437 (DeepSeek-V3 technical report): section 1 (\"training DeepSeek-V3 on each trillion tokens requires "
    "only 180K H800 GPU hours ... costs 2664K GPU hours\"), section 3.1 (2048 H800, 8 a node, NVLink and InfiniBand), "
    "3.2 (\"16-way Pipeline Parallelism (PP), 64-way Expert Parallelism (EP) spanning 8 nodes, and ZeRO-1 Data "
    "Parallelism\"; DualPipe \"achieving near-full computation-communication overlap\"), 2.1.2 (\"each token will be "
    "ensured to be sent to at most 4 nodes\"), 3.3 (FP8; dispatch in FP8, combine in BF16), 4.2 (61 layers, 7168, "
    "128 heads, 1 shared + 256 routed experts of 2048, top-8; batch 3,072 -> 15,360 x 4,096)";

}  // namespace

const std::vector<HeldOutRun>& held_out_runs() {
  static const std::vector<HeldOutRun> runs = [] {
    std::vector<HeldOutRun> v = {
        run("Llama 2 7B", "A100-SXM-80GB", 2048, false, {6.74e9, "llama", 32, 4096, 32, 0, 11008, 32000, 4096, true},
            2e12, M4, "ib-hdr", 184320, kAllIn, "C1", kLlama2, kLlama2Note),
        run("Llama 2 13B", "A100-SXM-80GB", 2048, false, {13.0e9, "llama", 40, 5120, 40, 0, 13824, 32000, 4096, true},
            2e12, M4, "ib-hdr", 368640, kAllIn, "C1", kLlama2,
            "GPU count not published: 2,048 assumed (as Llama 2 7B); FFN 13824 (M in the notes: seen in secondary "
            "copies of the config, not the released file); --fabric ib-hdr"),
        run("Llama 2 70B", "A100-SXM-80GB", 2048, false, {69.0e9, "llama", 80, 8192, 64, 8, 28672, 32000, 4096, true},
            2e12, M4, "ib-hdr", 1720320, kAllIn, "C1", kLlama2,
            "GPU count not published: 2,048 assumed (as Llama 2 7B); GQA 8 K/V heads confirmed, FFN 28672 from "
            "secondary copies of the config; --fabric ib-hdr"),
        run("Llama 3 8B", "H100-SXM", 2048, false, {8.03e9, "llama", 32, 4096, 32, 8, 14336, 128256, 8192, true}, 15e12,
            M16, "ib-ndr", 1.3e6, kAllIn, "C1", kLlama3, kLlama3Note),
        run("Llama 3 70B", "H100-SXM", 2048, false, {70.6e9, "llama", 80, 8192, 64, 8, 28672, 128256, 8192, true}, 15e12,
            M16, "ib-ndr", 6.4e6, kAllIn, "C1", kLlama3, kLlama3Note),
        run("Llama 3.1 405B", "H100-SXM", 16384, true, {405e9, "llama", 126, 16384, 128, 8, 53248, 128256, 8192, true},
            15.6e12, M16, "roce", 30.84e6, kAllIn, "C1",
            "https://github.com/meta-llama/llama-models/blob/main/models/llama3_1/MODEL_CARD.md (\"Llama 3.1 405B "
            "30.84M\"); arXiv 2407.21783 Table 4 (16,384 GPUs, TP8 PP16 DP128, 16M-token batch), section 3.3.1 (RoCE)",
            "the card's figure includes the long-context phase (CP16 at 131K), priced here at 8K; FFN 53248 from "
            "secondary copies of the config"),
        trained(run("BLOOM-176B", "A100-SXM-80GB", 384, true, {176.2e9, "", 70, 14336, 112, 0, 0, 250880, 2048, false}, 366e9, M4,
            "omnipath", 1082990, kAllIn, "C2",
            "GENCI news page (\"1,082,990 hours of computation on 48 Jean Zay nodes\"); arXiv 2211.05100 (384 A100 "
            "80GB, 4 Omni-Path 100 Gbps links per node, 2,048 x 2,048-token batch)",
            "wall-clock x 384 GPUs (all-in); vocabulary 250,680 padded to 250,880 as trained"), 2, kFull,
                "bigscience train/tr11-176B-ml/tr11-176B-ml.slurm: --checkpoint-activations, MICRO_BATCH_SIZE=2"),
        run("OPT-175B", "A100-SXM-80GB", 992, true, {175e9, "", 96, 12288, 96, 0, 0, 50272, 2048, false}, 180e9, M2, "",
            809472, kAllIn, "C2",
            "arXiv 2205.01068 (992 A100 80GB, 2M-token batch, \"up to 147 TFLOP/s\"); 809,472 GPU-h = 34 days x 992 "
            "from the LLaMA paper's carbon table (arXiv 2302.13971 Table 15), second-hand",
            "tokens consumed unclear (180B-token corpus; restarts and rollbacks recomputed tokens, the logbook); fabric "
            "not published (default); vocabulary 50272 and tied head (M)"),
        run("GPT-NeoX-20B", "A100-SXM-40GB", 96, true, {20.6e9, "", 44, 6144, 64, 0, 24576, 50432, 2048, true}, 472e9,
            1538.0 * 2048, "ib-hdr", 0, kAllIn, "not confirmed",
            "arXiv 2204.06745 (12 x 8 A100-SXM4-40GB, HDR InfiniBand, TP2 PP4, 1,538 x 2,048-token batch, 150k steps)",
            "tokens derived (150k steps x 3.15M); untied head (M)"),
        trained(run("Pythia 410M", "A100-SXM-40GB", 32, true, {405.3e6, "", 24, 1024, 16, 0, 4096, 50304, 2048, true}, 299.9e9, M2,
            "", 2540, kCompute, "C2", kPythia, "fabric not published (default)"), 8, kFull,
                "EleutherAI/pythia models/*.yml: checkpoint-activations true; micro-batch (M) for this size"),
        trained(run("Pythia 1B", "A100-SXM-40GB", 64, true, {1.01e9, "", 16, 2048, 8, 0, 8192, 50304, 2048, true}, 299.9e9, M2, "",
            4830, kCompute, "C2", kPythia, "also quoted in the TinyLlama README; fabric not published (default)"), 16, kFull,
                "EleutherAI/pythia models/1B/pythia-1b.yml: checkpoint-activations true, micro-batch 16"),
        trained(run("Pythia 2.8B", "A100-SXM-40GB", 64, true, {2.78e9, "", 32, 2560, 32, 0, 10240, 50304, 2048, true}, 299.9e9, M2,
            "", 14240, kCompute, "C2", kPythia, "fabric not published (default)"), 8, kFull,
                "EleutherAI/pythia models/*.yml: checkpoint-activations true; micro-batch (M) for this size"),
        trained(run("Pythia 6.9B", "A100-SXM-40GB", 128, true, {6.86e9, "", 32, 4096, 32, 0, 16384, 50432, 2048, true}, 299.9e9,
            M2, "", 33500, kCompute, "C2", kPythia, "fabric not published (default)"), 8, kFull,
                "EleutherAI/pythia models/6.9B/pythia-6.9b.yml: checkpoint-activations true, micro-batch 8"),
        trained(run("Pythia 12B", "A100-SXM-40GB", 256, true, {11.85e9, "", 36, 5120, 40, 0, 20480, 50304, 2048, true}, 299.9e9,
            M2, "", 72300, kCompute, "C2", kPythia, "trained in fp16 (same A100 peak as bf16); fabric not published"), 8, kFull,
                "EleutherAI/pythia models/12B/pythia-12b.yml: checkpoint-activations true, micro-batch 8"),
        run("LLaMA-1 7B", "A100-SXM-80GB", 2048, false, {6.74e9, "llama", 32, 4096, 32, 0, 11008, 32000, 2048, true}, 1e12,
            M4, "", 82432, kCompute, "C2", kLlama1, kLlama1Note),
        run("LLaMA-1 13B", "A100-SXM-80GB", 2048, false, {13.0e9, "llama", 40, 5120, 40, 0, 13824, 32000, 2048, true},
            1e12, M4, "", 135168, kCompute, "C2", kLlama1, kLlama1Note),
        run("LLaMA-1 33B", "A100-SXM-80GB", 2048, false, {32.5e9, "llama", 60, 6656, 52, 0, 17920, 32000, 2048, true},
            1.4e12, M4, "", 530432, kCompute, "C2", kLlama1, kLlama1Note),
        run("LLaMA-1 65B", "A100-SXM-80GB", 2048, true, {65.2e9, "llama", 80, 8192, 64, 0, 22016, 32000, 2048, true},
            1.4e12, M4, "", 1022362, kCompute, "C1", kLlama1, kLlama1Note),
        run("TinyLlama 1.1B (per 300B tokens)", "A100-SXM-40GB", 16, true,
            {1.1e9, "llama", 22, 2048, 32, 4, 5632, 32000, 2048, true}, 300e9, M2, "", 3456, kCompute, "C1",
            "https://github.com/jzhang38/TinyLlama README (\"A100 GPU hours taken on 300B tokens ... 3456\"; 24k "
            "tokens/s per A100-40G, 2M-token batch)",
            "throughput-derived (compute); vocabulary and untied head (M)"),
        trained(run("MPT-7B", "A100-SXM-40GB", 440, true, {6.7e9, "", 32, 4096, 32, 0, 16384, 50432, 2048, false}, 1e12, M4, "",
            440.0 * 9.5 * 24, kAllIn, "C1",
            "https://huggingface.co/mosaicml/mpt-7b model card (\"440 A100-40GBs for about 9.5 days\"; FSDP)",
            "\"Time to Train\" includes restarts (all-in); ALiBi, not rotary (same FLOPs); batch 4M assumed (M); the "
            "fitted set holds llm-foundry's 8-GPU MPT 7B benchmark, not this run"), 8, kFull,
                "mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-7b.yaml: activation_checkpointing true, micro-batch 8"),
        run("StarCoderBase 15.5B", "A100-SXM-80GB", 512, true, {15.5e9, "", 40, 6144, 48, 1, 24576, 49152, 8192, true},
            1e12, 512.0 * 8192, "", 320256, kAllIn, "C2",
            "arXiv 2305.06161 section 5.7 (\"total number of GPU hours that training took (320,256)\"; 512 A100 80GB, "
            "TP4 PP4 DP32, 512 x 8K batch)",
            "multi-query attention (1 K/V head); L, d, heads, FFN (M); fabric not published (default)"),
        trained(run("BloombergGPT 50B", "A100-SXM-40GB", 512, true, {50.6e9, "", 70, 7680, 40, 0, 30720, 131072, 2048, false},
            569e9, M4, "6.25GB/s", 651264, kAllIn, "C2",
            "arXiv 2303.17564 (64 p4d.24xlarge = 512 A100 40GB, ~53 days, 139,200 steps x 32.5 s; the 1.3M GPU-h "
            "often quoted is the budget)",
            "wall-clock x 512 (all-in), not the 1.3M budget; EFA 400 Gb/s per 8-GPU node (6.25 GB/s per GPU); batch "
            "2,048 sequences assumed (M)"), 1, kFull,
                "arXiv 2303.17564: activation checkpointing; micro-batch (M)"),
        run("Falcon-180B", "A100-SXM-40GB", 4096, true, {179.5e9, "", 80, 14848, 232, 8, 59392, 65024, 2048, false}, 3.5e12,
            M4, "6.25GB/s", 7e6, kAllIn, "C2",
            "https://huggingface.co/blog/falcon-180b (\"up to 4096 GPUs ... ~7,000,000 GPU hours\"), quoted on a "
            "third-party page; arXiv 2311.16867 (\"limited interconnect\", AWS)",
            "one significant digit; scope not stated (taken as all-in); parallel attention/MLP not modelled; L, d, FFN, "
            "batch (M); p4d EFA 400 Gb/s per node (6.25 GB/s per GPU)"),
        run("Phi-3-mini 3.8B", "H100-SXM", 512, true, {3.82e9, "llama", 32, 3072, 32, 0, 8192, 32064, 4096, true}, 3.3e12,
            M4, "", 512.0 * 7 * 24, kAllIn, "C1",
            "https://huggingface.co/microsoft/Phi-3-mini-4k-instruct model card (\"512 H100-80G ... 7 days ... 3.3T "
            "tokens\")",
            "wall-clock x 512 (all-in); batch not published (4M assumed); L, d, heads, FFN (M)"),
        run("Olmo 3 7B", "H100-SXM", 1024, false, {7.3e9, "llama", 32, 4096, 32, 0, 11008, 100278, 8192, true}, 5.9e12,
            M4, "", 234000, kAllIn, "C2",
            "arXiv 2512.13961; Ai2 team quoted in the muxup.com post \"Olmo 3 training cost\" (\"~234k H100 hours to "
            "pretrain the 7B\", \"with restarts, evaluations, checkpointing\")",
            "all-in; GPU count and batch not published (1,024 and 4M assumed); sliding-window attention in 3 of 4 "
            "layers not modelled (full attention FLOPs: an overestimate); L, d, FFN (M)"),
        run("Olmo 3 32B", "H100-SXM", 1024, false, {32.2e9, "llama", 64, 5120, 40, 8, 27648, 100278, 8192, true}, 5.9e12,
            M4, "", 1.05e6, kAllIn, "C2",
            "arXiv 2512.13961; Ai2 team quoted in the muxup.com post \"Olmo 3 training cost\" (\"~1.05m H100 hours to "
            "pretrain the 32B\")",
            "all-in; GPU count and batch not published (1,024 and 4M assumed); sliding-window attention not modelled; "
            "the whole shape (M)"),
        laid_out(experts(run("DeepSeek-V3", "H800", 2048, true, {671e9, "llama", 61, 7168, 128, 0, 18432, 129280, 4096, true},
                             14.8e12, 15360.0 * 4096, "ib-ndr", 2.664e6, kCompute, "C1", kDeepSeekV3,
                             "throughput-derived (180K GPU-h per 1T tokens: compute); multi-head latent attention planned "
                             "as standard attention of 128 heads; multi-token prediction not counted; the final batch of "
                             "15,360 sequences priced throughout (ramped from 3,072 over the first 469B tokens); "
                             "--fabric ib-ndr (50 GB/s per GPU); priced on its own cluster at the report's $2 per "
                             "H800-hour (no shipped H800 offer)"),
                         256, 8, 2048, 1, 3, 4),
                 1, 16, 64, 1, true, "fp8", plan::Recompute::none, plan::MoeOverlap::full,
                 "section 3.2: DualPipe over 16 stages of 61 layers, EP64, ZeRO-1, no TP; section 3.2.3: only RMSNorm "
                 "and MLA up-projections recomputed (not modelled: no recompute)"),
    };
    v.back().usd_per_gpu_hour = 2.0;
    for (auto& r : v)
      if (r.gpu_hours <= 0)
        r.excluded = "no confirmed GPU-hours: \"1,830 hours\" appears on one secondary page only and in no primary text";
    return v;
  }();
  return runs;
}

EstimateInputs held_out_inputs(const HeldOutRun& run) {
  EstimateInputs in = validation_inputs(run.gpu, run.gpus, run.params, run.layers, run.hidden, run.heads, run.seq,
                                        run.vocab, run.arch);
  in.tokens = run.tokens;
  in.batch_tokens = run.global_batch;
  if (run.micro_batch > 0) in.micro_batch = run.micro_batch;
  in.recompute = run.recompute;
  if (!run.fabric.empty()) in.fabric = run.fabric;
  in.precision = run.precision;
  in.layout = run.layout;
  in.uneven_stages = run.uneven_stages;
  in.moe_overlap = run.moe_overlap;
  if (run.usd_per_gpu_hour > 0) {
    // The run's own cluster: 8-GPU NVLink nodes at the published rental price.
    const std::string toml = str("schema = \"dlkit-catalog/1\"\n[[offer]]\nprovider = \"", run.name,
                                 " cluster\"\ninstance = \"8x ", run.gpu, "\"\ngpu = \"", run.gpu,
                                 "\"\ngpus = 8\non_demand = ", 8 * run.usd_per_gpu_hour,
                                 "\nsource = \"the run's published rental price\"\nas_of = \"published\"\n");
    in.offers = parse_catalog_toml(toml, str("held-out run ", run.name)).offers;
  }
  return in;
}

std::vector<HeldOutRow> validate_held_out() {
  std::vector<HeldOutRow> out;
  for (const auto& run : held_out_runs()) {
    HeldOutRow h;
    h.run = run;
    const CostReport r = make_estimate(held_out_inputs(run));
    const CostRow* row = &validation_row(r, run.gpu, run.gpus, run.name);
    const double gpus = static_cast<double>(run.gpus);
    h.estimated_gpu_hours = run.scope == HeldOutScope::all_in ? row->gpu_hours() : row->compute_hours * gpus;
    h.layout = row->layout;
    h.efficiency = row->efficiency;
    h.dp_efficiency = row->dp_efficiency;
    h.goodput = row->goodput.factor;
    if (h.scored()) h.ratio = h.estimated_gpu_hours / run.gpu_hours;
    out.push_back(h);
  }
  return out;
}

HeldOutScore score_held_out(const std::vector<HeldOutRow>& rows) {
  HeldOutScore s;
  std::vector<double> errors;
  for (const auto& h : rows) {
    if (!h.scored()) continue;
    errors.push_back(std::fabs(h.ratio - 1));
    s.min_ratio = errors.size() == 1 ? h.ratio : std::min(s.min_ratio, h.ratio);
    s.max_ratio = errors.size() == 1 ? h.ratio : std::max(s.max_ratio, h.ratio);
    if (h.ratio < kHeldOutRatioLow || h.ratio > kHeldOutRatioHigh) ++s.outside;
  }
  s.scored = errors.size();
  if (errors.empty()) return s;
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  s.median_abs_error = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  return s;
}

namespace {

const char* scope_name(HeldOutScope s) { return s == HeldOutScope::all_in ? "all-in" : "compute"; }

}  // namespace

std::string render_held_out(const std::vector<HeldOutRow>& rows, OutputFormat f) {
  const bool human = f == OutputFormat::table || f == OutputFormat::md;
  Table t({{"run", "run", false},
           {"gpu", "GPU", false},
           {"gpus", "GPUs", true},
           {"params", "params", true},
           {"tokens", "tokens", true},
           {"scope", "scope", false},
           {"published_gpu_hours", "published GPU-h", true},
           {"estimated_gpu_hours", "dl-cost GPU-h", true},
           {"ratio", "ratio", true},
           {"layout", "layout", false},
           {"dp_efficiency", "DP eff", true},
           {"goodput", "goodput", true},
           {"status", "status", false},
           {"scored", "scored", false},
           {"source", "source", false},
           {"note", "note", false}});
  for (const auto& h : rows) {
    const HeldOutRun& r = h.run;
    t.add_row({Cell::str(r.name), Cell::str(r.gpu),
               Cell::num(static_cast<double>(r.gpus), str(plan::group_digits(static_cast<double>(r.gpus)), r.gpus_published ? "" : " (assumed)")),
               Cell::num(r.params, format_count(r.params)), Cell::num(r.tokens, format_count(r.tokens)),
               Cell::str(scope_name(r.scope)),
               r.gpu_hours > 0 ? Cell::num(r.gpu_hours, plan::group_digits(std::round(r.gpu_hours))) : Cell::null("none"),
               Cell::num(h.estimated_gpu_hours, plan::group_digits(std::round(h.estimated_gpu_hours))),
               h.scored() ? Cell::num(h.ratio, str("x", format_fixed(h.ratio, 2))) : Cell::null("-"), Cell::str(h.layout),
               Cell::num(h.dp_efficiency, format_fixed(h.dp_efficiency, 3)), Cell::num(h.goodput, format_fixed(h.goodput, 3)),
               Cell::str(r.status), Cell::boolean(h.scored()), Cell::str(r.source), Cell::str(r.note)});
  }
  if (human) {
    const HeldOutScore s = score_held_out(rows);
    t.add_note(str("# held-out: published runs the speed model was not fitted on; ratio = dl-cost's GPU-hours / the "
                   "published (all-in rows: with goodput; compute rows: before it)"));
    t.add_note(str("# ", s.scored, " scored: median |error| ", format_fixed(100 * s.median_abs_error, 1), "% (limit ",
                   format_fixed(100 * kHeldOutMedianLimit, 0), "%), ratios x", format_fixed(s.min_ratio, 2), " .. x",
                   format_fixed(s.max_ratio, 2), ", ", s.outside, " outside x", format_fixed(kHeldOutRatioLow, 1), " .. x",
                   format_fixed(kHeldOutRatioHigh, 1)));
    for (const auto& h : rows)
      if (!h.scored()) t.add_note(str("# not scored: ", h.run.name, ": ", h.run.excluded));
  }
  return t.render(f);
}

std::string render_validation(const std::vector<ValidationRow>& fitted, const std::vector<HeldOutRow>& held_out,
                              OutputFormat f) {
  if (f == OutputFormat::table || f == OutputFormat::md)
    return render_validation(fitted, f) + "\n" + render_held_out(held_out, f);
  // One machine-readable table: the fitted rows compare hours (wall-clock or MFU-implied), the
  // held-out rows GPU-hours; `unit` says which.
  Table t({{"set", "set", false},
           {"run", "run", false},
           {"gpu", "gpu", false},
           {"gpus", "gpus", true},
           {"gpus_published", "gpus_published", false},
           {"params", "params", true},
           {"tokens", "tokens", true},
           {"unit", "unit", false},
           {"published", "published", true},
           {"estimated", "estimated", true},
           {"error", "error", true},
           {"limit", "limit", true},
           {"measured_mfu", "measured_mfu", true},
           {"estimated_mfu", "estimated_mfu", true},
           {"scope", "scope", false},
           {"layout", "layout", false},
           {"dp_efficiency", "dp_efficiency", true},
           {"goodput", "goodput", true},
           {"status", "status", false},
           {"scored", "scored", false},
           {"excluded", "excluded", false},
           {"source", "source", false},
           {"note", "note", false}});
  const auto num = [](double v) { return Cell::num(v, format_fixed(v, 6)); };
  for (const auto& v : fitted)
    t.add_row({Cell::str("fitted"), Cell::str(v.run.name), Cell::str(v.run.gpu), Cell::integer(v.run.gpus),
               Cell::boolean(true), num(v.run.params), v.run.tokens > 0 ? num(v.run.tokens) : Cell::null(),
               Cell::str(v.run.minutes > 0 ? "hours" : "hours per 1B tokens"), num(v.measured_hours),
               num(v.estimated_hours), num(v.error), num(v.limit), num(v.measured_mfu), num(v.estimated_mfu),
               Cell::str("compute"), Cell::null(""), Cell::null(), Cell::null(), Cell::str("fitted"), Cell::boolean(true),
               Cell::null(""), Cell::str(v.run.source), Cell::null("")});
  for (const auto& h : held_out) {
    const HeldOutRun& r = h.run;
    t.add_row({Cell::str("held-out"), Cell::str(r.name), Cell::str(r.gpu), Cell::integer(r.gpus),
               Cell::boolean(r.gpus_published), num(r.params), num(r.tokens), Cell::str("GPU-hours"),
               r.gpu_hours > 0 ? num(r.gpu_hours) : Cell::null(), num(h.estimated_gpu_hours),
               h.scored() ? num(h.ratio - 1) : Cell::null(), Cell::null(), Cell::null(), Cell::null(),
               Cell::str(scope_name(r.scope)), Cell::str(h.layout), num(h.dp_efficiency), num(h.goodput),
               Cell::str(r.status), Cell::boolean(h.scored()), r.excluded.empty() ? Cell::null("") : Cell::str(r.excluded),
               Cell::str(r.source), Cell::str(r.note)});
  }
  return t.render(f);
}

}  // namespace dl::cost
