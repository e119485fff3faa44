#include "dl/train/generate.hpp"

#include <algorithm>
#include <cmath>

#include "dl/core/half.hpp"

namespace dl {

int32_t sample_token(const float* row, int64_t V, double temperature, int64_t top_k, RandomStream& rng) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(row, row + V) - row);
  std::vector<std::pair<float, int32_t>> cand(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) cand[j] = {row[j], static_cast<int32_t>(j)};
  size_t k = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), cand.size()) : cand.size();
  std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
  double mx = cand[0].first, sum = 0;
  std::vector<double> p(k);
  for (size_t j = 0; j < k; ++j) sum += p[j] = std::exp((cand[j].first - mx) / temperature);
  double u = rng.uniform() * sum;
  size_t j = 0;
  for (; j + 1 < k && u >= p[j]; ++j) u -= p[j];
  return cand[j].second;
}

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                              RandomStream& rng) {
  DL_CHECK(model.context_length() > 0, "generate: a ", model.kind(), " model does not read token sequences");
  if (prompt.empty()) throw_usage("the prompt is empty: give at least one token");
  const int64_t V = model.vocab_size(), Tmax = model.context_length();
  for (int32_t id : prompt)
    if (id < 0 || id >= V) throw_usage("prompt token ", id, " is outside the model's vocabulary of ", V);
  std::vector<int32_t> ctx = prompt, out;
  std::string tail;
  for (int64_t n = 0; n < o.max_tokens; ++n) {
    int64_t T = std::min<int64_t>(static_cast<int64_t>(ctx.size()), Tmax);
    Batch b;
    b.inputs = Tensor::empty({1, T}, DType::i32);
    std::copy(ctx.end() - T, ctx.end(), b.inputs.data<int32_t>());
    model.forward(b);
    Tensor logits = model.logits();
    Tensor host = logits.device().is_cpu() ? logits : Tensor::empty(logits.shape(), logits.dtype());
    if (!logits.device().is_cpu()) model.params().backend().copy(host, logits);
    if (host.dtype() != DType::f32) {  // 16-bit logits: sample from their f32 values
      Tensor wide = Tensor::empty(host.shape(), DType::f32);
      convert_host(wide, host);
      host = wide;
    }
    const float* row = host.data<float>() + (T - 1) * V;
    const int32_t next = sample_token(row, o.vocab > 0 ? std::min(V, o.vocab) : V, o.temperature, o.top_k, rng);
    ctx.push_back(next);
    out.push_back(next);
    if (!o.stop.empty()) {
      tail.push_back(static_cast<char>(next & 0xff));
      if (tail.size() >= o.stop.size() && tail.compare(tail.size() - o.stop.size(), o.stop.size(), o.stop) == 0) break;
    }
  }
  return out;
}

}  // namespace dl
