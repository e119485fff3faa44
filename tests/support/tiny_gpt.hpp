// The smallest GPT run the end-to-end tests train (milliseconds a step on one thread): sampling,
// the launcher, gradient accumulation, dp = "auto" and eval --data start from it, changing keys
// with --set. Tests that keep other keys in their config file write it with tiny_gpt(keys).
// log.env_lock = false: the environment probes cost a tiny run four times its training under ASan
// (0.36 of 0.49 s of CPU); env.lock is tested where it is read (test_dl_train, tests/env).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dl::test {

inline constexpr const char* kTinyGpt = R"([model]
type = "gpt"
n_layer = 1
n_head = 2
n_embd = 16
block_size = 12
vocab_size = 256

[data]
source = "synthetic:addition"

[schedule]
warmup_steps = 2
decay_steps = 8

[train]
steps = 6
batch_size = 8
threads = 1
eval_every = 0
eval_batches = 1
checkpoint_every = 0

[log]
every = 1
samples = 0
progress = "none"
tensorboard = false
env_lock = false
)";

// A config key and its value as TOML writes it: {"model.n_embd", "32"}, {"log.progress", "\"none\""}.
using TomlKey = std::pair<std::string, std::string>;

// kTinyGpt with `keys` set. A key it has keeps its line, so a message naming a line names the
// same one; a key it lacks ends its section, or a new section at the end.
inline std::string tiny_gpt(const std::vector<TomlKey>& keys) {
  std::vector<std::string> lines;
  for (std::string rest = kTinyGpt; !rest.empty();) {
    const size_t end = rest.find('\n');
    lines.push_back(rest.substr(0, end));
    rest.erase(0, end == std::string::npos ? end : end + 1);
  }
  for (const auto& [full, value] : keys) {
    const size_t dot = full.find('.');
    const std::string header = "[" + full.substr(0, dot) + "]", assign = full.substr(dot + 1) + " = ",
                      line = assign + value;
    size_t at = 0;
    while (at < lines.size() && lines[at] != header) ++at;
    if (at == lines.size()) {
      lines.insert(lines.end(), {"", header, line});
      continue;
    }
    size_t end = at + 1;  // past the section's last line
    while (end < lines.size() && lines[end].rfind('[', 0) != 0) ++end;
    size_t i = at + 1;
    while (i < end && lines[i].rfind(assign, 0) != 0) ++i;
    if (i < end) {
      lines[i] = line;
      continue;
    }
    while (lines[end - 1].empty()) --end;  // after the section's last key
    lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(end), line);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// tiny_gpt shaped for the parallel layouts: 2 layers (pp = 2), 4 heads (tp = 2), two addition
// problems per window (block_size 26); every layout of up to 8 ranks trains in seconds on 2 cores.
inline std::string layout_gpt(std::vector<TomlKey> keys) {
  keys.insert(keys.begin(), {{"model.n_layer", "2"}, {"model.n_head", "4"}, {"model.n_embd", "32"}, {"model.block_size", "26"}});
  return tiny_gpt(keys);
}

// tiny_gpt for the thread-count tests: matmuls of 1000 rows by 48, 144, 192 and 256 columns, large
// enough that the pool (and, before GEMMs were split on it, OpenBLAS's threads) cut them; 4 steps
// and the final evaluation; train.threads = 0, so DL_NUM_THREADS (or a sweep's share) decides.
inline std::string threads_gpt(std::vector<TomlKey> keys = {}) {
  keys.insert(keys.begin(), {{"model.n_embd", "48"}, {"model.n_head", "4"}, {"model.block_size", "25"},
                             {"train.batch_size", "40"}, {"train.steps", "4"}, {"train.threads", "0"}});
  return tiny_gpt(keys);
}

}  // namespace dl::test
