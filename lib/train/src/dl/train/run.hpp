// The pieces of a training run that the trainer's files share; internal to lib/train.
//   build.cpp     building the model and its communicators from a config; loading a run
//   evaluate.cpp  evaluation and sampling (run_eval, run_sample, the loop's evaluations)
//   metrics.cpp   metrics sinks, records, memory.json and summary.json
//   step.cpp      one training step (step.hpp)
//   loop.cpp      run_training: the loop around the steps
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dl/dist/launch_env.hpp"
#include "dl/io/dir_lock.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/io/tensorboard.hpp"
#include "dl/parallel/mesh.hpp"
#include "dl/parallel/zero.hpp"
#include "dl/checkpoint/checkpoint.hpp"
#include "dl/train/step.hpp"
#include "dl/train/trainer.hpp"

namespace dl {

class RandomStream;

// ---------------------------------------------------------------------------------------------
// build.cpp

// CPU threads per rank: train.threads, or the cores shared among the ranks on this node.
int threads_for(const TrainConfig& t, int local_ranks);
// Refuses to start when this machine breaks a dl-envlock lock (usage error with the drift
// table); other drift is a warning.
void check_machine_against(const std::filesystem::path& env_lock);
// The world communicator of this launch; on a GPU backend, with device collectives (NCCL when
// every rank has its own GPU, else staged through Gloo).
std::unique_ptr<dist::Comm> open_world(const dist::LaunchEnv& env, const Config& c, Backend& be,
                                       const parallel::MeshShape& shape);
std::unique_ptr<Model> build_model(const Config& c, const Dataset& train, Backend& be, parallel::Mesh* mesh);
// Tokens (gpt) or examples (mlp) in one micro-batch row.
int64_t units_per_example(const Model& m, const Config& c);
// Parameters of the whole model, each counted once over every rank (a collective).
int64_t count_params(Model& model, parallel::Mesh& mesh);
// The run directory, early and without the lock (every rank, before the model is built): a new
// run's must be missing or unused, a resumed one must be a run directory. Usage errors.
void check_run_dir(const TrainOptions& opt);
// One writer per run directory (io/dir_lock.hpp): rank 0 takes it, a new run's created and locked
// at once, a resumed one's locked, and holds it for the life of the run; a second writer (a
// fresh run, a --resume) is refused with a usage error naming the holder's PID, on every rank
// (a collective). `checkpoint`: resuming, and the run has one; otherwise it trains from step 0.
struct RunDir {
  DirLock lock;  // rank 0
  bool checkpoint = false;
};
RunDir take_run_dir(const TrainOptions& opt, dist::Comm& world);
// Rank 0 of a new or resumed run: RUN/config.toml and, for a GPT-2 tokenizer, its files in
// RUN/tokenizer/ (published atomically once) now; RUN/env.lock in the background (the
// environment snapshot probes the machine for about half a second while training starts).
std::future<void> write_run_files(const TrainOptions& opt, const Tokenizer* tokenizer);

// A single-process model rebuilt from a run's config and its newest good checkpoint (saved
// under any layout): what eval and sample work on.
struct LoadedRun {
  Config config;
  DataSplits data;
  std::unique_ptr<parallel::Mesh> mesh;
  std::unique_ptr<Model> model;
  std::filesystem::path checkpoint;
  TrainerState state;
};
LoadedRun load_run(const std::filesystem::path& run_dir, const std::vector<std::string>& overrides);

// ---------------------------------------------------------------------------------------------
// evaluate.cpp

// Forward only over `data`'s first max_examples (0: all) in micro-batches of batch_size, split
// over the data-parallel ranks, through the pipeline; every rank gets the global result.
EvalResult evaluate(Model& model, parallel::Mesh& mesh, const Dataset& data, int64_t batch_size, int64_t max_examples);
// Generations for a person to read (single process): the data's own prompts (greedy), or for
// plain text a continuation of the start of a validation window.
std::vector<std::string> demo_samples(Model& model, const Dataset& val, const Tokenizer* tok, int64_t count,
                                      RandomStream& rng);

// ---------------------------------------------------------------------------------------------
// metrics.cpp

using ojson = nlohmann::ordered_json;

// Metrics sinks (rank 0): metrics.jsonl, TensorBoard, and stdout with --json.
class Metrics {
 public:
  Metrics(const std::filesystem::path& run_dir, bool tensorboard, bool to_stdout);
  std::function<void(const ojson&)> on_record;
  void record(const ojson& rec);

 private:
  JsonlWriter jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
  bool to_stdout_;
};

ojson eval_record(int64_t step, const EvalResult& e);
std::string eval_line(int64_t step, const EvalResult& e);
// A logged step's record; with several ranks, every rank's time split (a collective: every rank
// calls it, rank 0 gets the record).
ojson step_record(const StepRecord& s, double tokens_per_sec, double elapsed_s, const LossScaler& scaler,
                  dist::Comm& world);
// RUN/memory.json: every rank's bytes by kind after the first step (a collective; rank 0 writes).
void write_memory_report(const TrainOptions& opt, parallel::Mesh& mesh, parallel::ZeroEngine& engine, Model& model,
                         Backend& be, int64_t params_total);
// RUN/summary.json (rank 0).
void write_summary(const TrainOptions& opt, const parallel::MeshShape& shape, const TrainSummary& summary);
double median(std::vector<double> v);

}  // namespace dl
