// The smallest GPT run the end-to-end tests train (milliseconds a step on one thread): sampling,
// the launcher, gradient accumulation, dp = "auto" and eval --data start from it, changing keys
// with --set.
#pragma once

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
)";

}  // namespace dl::test
