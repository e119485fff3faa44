// Tokenizing speed on one thread, for scripts/bench-tokenize.sh (GPT-2) and
// scripts/bench-hf-tokenizer.sh (tokenizer.json): loads the tokenizer DIR holds (load_tokenizer:
// vocab.json + merges.txt, else tokenizer.json), encodes TEXT_FILE REPEATS times (a fresh merge cache each time, as a new process would
// have) and prints one JSON line with the median time, MB/s and tokens/s.
//   bench_tokenize DIR TEXT_FILE [REPEATS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dl/data/dataset.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tokenize DIR TEXT_FILE [REPEATS]\n");
    return 2;
  }
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  try {
    const auto tok = dl::load_tokenizer(argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::vector<double> times;
    size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      std::vector<int32_t> ids;
      auto enc = tok->make_encoder();
      const auto t0 = std::chrono::steady_clock::now();
      enc->encode_append(text, ids);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      tokens = ids.size();
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    std::printf("{\"impl\": \"dlkit\", \"bytes\": %zu, \"tokens\": %zu, \"time_s\": %.6f, \"mb_per_s\": %.3f, "
                "\"tokens_per_s\": %.0f}\n",
                text.size(), tokens, t, static_cast<double>(text.size()) / 1e6 / t, static_cast<double>(tokens) / t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenize: %s\n", e.what());
    return 2;
  }
  return 0;
}
