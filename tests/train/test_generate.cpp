// Sampling (lib/train/src/dl/train/generate.cpp): greedy, temperature and top-k draw from the distribution
// they promise, checked with known logits over many draws, and `dl-train sample --top-k 1` is
// greedy end to end.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "dl/backend/backend.hpp"
#include "dl/core/rng.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/train/generate.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"

using namespace dl::test;

namespace {

// Distinct logits, the largest at index 2, then 8, 4, 6, 3 (gaps of at least 0.2).
const std::vector<float> kLogits = {0.3f, -1.2f, 2.0f, 0.9f, 1.5f, -0.4f, 1.1f, 0.0f, 1.8f, -2.0f};

// softmax(logits / t) over the k largest logits (k = 0: all), computed here in double.
std::vector<double> expected(double t, size_t k) {
  std::vector<size_t> order(kLogits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [](size_t a, size_t b) { return kLogits[a] > kLogits[b]; });
  if (k == 0 || k > order.size()) k = order.size();
  std::vector<double> p(kLogits.size(), 0.0);
  const double mx = kLogits[order[0]];
  double sum = 0;
  for (size_t j = 0; j < k; ++j) sum += p[order[j]] = std::exp((kLogits[order[j]] - mx) / t);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<int64_t> draw_counts(double t, int64_t k, int64_t n, uint64_t seed) {
  dl::RandomStream rng(dl::stream_key(seed, "test/sample"));
  std::vector<int64_t> c(kLogits.size(), 0);
  int64_t outside = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t id = dl::sample_token(kLogits.data(), static_cast<int64_t>(kLogits.size()), t, k, rng);
    if (id < 0 || id >= static_cast<int32_t>(kLogits.size())) ++outside;
    else ++c[static_cast<size_t>(id)];
  }
  CHECK(outside == 0);
  return c;
}

// Every token's frequency within 5 standard deviations of its probability (draws are a fixed
// Philox stream, so this is deterministic; a correct sampler sits at about 1 sigma), and a token
// of probability 0 never drawn.
void check_frequencies(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  for (size_t i = 0; i < p.size(); ++i) {
    CAPTURE(i);
    CAPTURE(counts[i]);
    CAPTURE(p[i]);
    if (p[i] == 0) {
      CHECK(counts[i] == 0);
      continue;
    }
    const double sigma = std::sqrt(p[i] * (1 - p[i]) / n);
    CHECK(std::fabs(static_cast<double>(counts[i]) / n - p[i]) <= 5 * sigma);
  }
}

}  // namespace

TEST_CASE("sample_token: temperature 0 and top-k 1 are the argmax; a falling temperature approaches it") {
  dl::RandomStream rng(1);
  const auto V = static_cast<int64_t>(kLogits.size());
  CHECK(dl::sample_token(kLogits.data(), V, 0.0, 0, rng) == 2);
  CHECK(rng.index() == 0);  // greedy takes no random value
  for (double t : {0.5, 1.0, 5.0, 100.0}) {
    CAPTURE(t);
    auto c = draw_counts(t, 1, 2000, 7);
    CHECK(c[2] == 2000);
  }
  // The argmax's share: softmax at 1 and 0.1 (within the bound), and every draw at 1e-3
  // (the runner-up's probability there is e^-200).
  const int64_t n = 20000;
  double share_prev = 0;
  for (double t : {1.0, 0.1, 1e-3}) {
    CAPTURE(t);
    auto c = draw_counts(t, 0, n, 11);
    check_frequencies(c, expected(t, 0));
    double share = static_cast<double>(c[2]) / n;
    CHECK(share > share_prev);
    share_prev = share;
  }
  CHECK(share_prev == 1.0);
}

TEST_CASE("sample_token: frequencies follow softmax(logits / T) over the whole vocabulary") {
  for (double t : {0.5, 1.0, 2.0}) {
    CAPTURE(t);
    check_frequencies(draw_counts(t, 0, 40000, 3), expected(t, 0));
  }
  // top-k at least the vocabulary is no filter.
  CHECK(draw_counts(1.0, 10, 5000, 5) == draw_counts(1.0, 0, 5000, 5));
  CHECK(draw_counts(1.0, 64, 5000, 5) == draw_counts(1.0, 0, 5000, 5));
}

TEST_CASE("sample_token: top-k never emits a token outside the k most likely and renormalises over them") {
  // At temperature 20 the distribution is nearly flat, so a filter that let one more token in
  // would show it within a few draws.
  for (int64_t k : {2, 3, 5}) {
    for (double t : {1.0, 20.0}) {
      CAPTURE(k);
      CAPTURE(t);
      auto c = draw_counts(t, k, 20000, 13);
      std::set<size_t> drawn;
      for (size_t i = 0; i < c.size(); ++i)
        if (c[i] > 0) drawn.insert(i);
      const std::set<size_t> top[] = {{2, 8}, {2, 8, 4}, {2, 8, 4, 6, 3}};
      CHECK(drawn == top[k == 2 ? 0 : k == 3 ? 1 : 2]);
      check_frequencies(c, expected(t, static_cast<size_t>(k)));
    }
  }
}

TEST_CASE("dl-train sample: --top-k 1 is greedy whatever the temperature; temperature sampling follows the seed") {
  TempDir d("sample");
  write_file(d / "c.toml", kTinyGpt);

  const std::string run_dir = (d / "run").string();
  RunResult t = run(tool("dl-train"), {(d / "c.toml").string(), "--run-dir", run_dir, "--steps", "2", "--quiet"});
  INFO(t.err);
  REQUIRE(t.exit_code == 0);
  // Three completions of one prompt; JSON output (bytes that are not UTF-8 come back as U+FFFD).
  auto sample = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"sample", "--run-dir", run_dir, "--prompt", "12+34=", "--tokens", "8",
                                     "--count", "3", "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = run(tool("dl-train"), args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<std::string> out;
    for (const auto& s : nlohmann::json::parse(r.out)) out.push_back(s["completion"].get<std::string>());
    REQUIRE(out.size() == 3);
    return out;
  };
  auto greedy = sample({"--temperature", "0"});
  CHECK(greedy[0] == greedy[1]);
  CHECK(greedy[0] == greedy[2]);
  CHECK(sample({"--temperature", "5", "--top-k", "1"}) == greedy);
  // At temperature 100 (nearly uniform over 256 bytes) three 8-token samples differ from each
  // other and from greedy; the same seed repeats them exactly.
  auto hot = sample({"--temperature", "100", "--seed", "9"});
  CHECK(hot[0] != greedy[0]);
  CHECK(hot[0] != hot[1]);
  CHECK(sample({"--temperature", "100", "--seed", "9"}) == hot);
  RunResult bad = run(tool("dl-train"), {"sample", "--run-dir", run_dir, "--temperature", "-1"});
  CHECK(bad.exit_code == 2);
  // A negative k is a usage error, not "no filter".
  bad = run(tool("dl-train"), {"sample", "--run-dir", run_dir, "--top-k", "-1"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--top-k") != std::string::npos);
}

TEST_CASE("generate draws ids below GenerateOptions::vocab only: a padded model never emits an id its tokenizer lacks") {
  dl::GptConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 16;
  c.vocab_size = 40;
  c.init_std = 1.0;  // far from uniform, so that every id is likely somewhere in 300 draws
  dl::GptModel model(c, dl::cpu_backend());
  model.params().initialize(3);
  dl::GenerateOptions go;
  go.max_tokens = 300;
  go.temperature = 3.0;
  auto draw = [&](int64_t vocab) {
    go.vocab = vocab;
    dl::RandomStream rng(dl::stream_key(9, "test/vocab"));
    return dl::generate(model, {1, 2, 3}, go, rng);
  };
  const auto all = draw(0), limited = draw(10);
  CHECK(*std::max_element(all.begin(), all.end()) >= 10);  // without the limit the padding is drawn
  CHECK(limited.size() == 300);
  CHECK(*std::max_element(limited.begin(), limited.end()) < 10);
}
