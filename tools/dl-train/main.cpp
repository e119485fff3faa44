// dl-train: train a model from a TOML config; evaluate or sample a run's checkpoint.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "dl/device/build_info.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/command_line.hpp"
#include "dl/cli/table.hpp"
#include "dl/config/config.hpp"
#include "dl/core/limits.hpp"
#include "dl/core/version.hpp"
#include "dl/data/gpt2_tokenizer.hpp"
#include "dl/data/tokenize.hpp"
#include "dl/dist/launch_env.hpp"
#include "dl/dist/launcher.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/sweep/runs.hpp"
#include "dl/sweep/sweep.hpp"
#include "dl/train/report.hpp"
#include "dl/train/trainer.hpp"

namespace fs = std::filesystem;

namespace {

// The library's option errors name {option}; these are dl-train's flags for them.
const dl::OptionNames kFlags = {{"nproc_per_node", "--nproc-per-node"}, {"nnodes", "--nnodes"},
                                {"node_rank", "--node-rank"},           {"rdzv", "--rdzv"},
                                {"shard_tokens", "--shard-tokens"},     {"val_fraction", "--val-fraction"},
                                {"log_y", "--log-y"},                   {"steps", "--steps"}};

std::string keys_help() {
  std::string s = "Config keys (--set KEY=VALUE; see configs/ for examples):\n";
  for (const auto& k : dl::config_key_docs())
    s += "  " + k.key + " (" + k.type + ", default " + k.default_value + (k.allowed.empty() ? "" : ", " + k.allowed) +
         "): " + k.help + "\n";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  // Past `ulimit -f` a write fails with EFBIG and is reported, naming the file, like a full disk
  // (the default action of SIGXFSZ ends the process without a word).
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"dl-train: train a GPT, Llama-family or MLP model from a TOML config, on the CPU or an NVIDIA GPU "
               "(train.device; --version says whether this build has the CUDA backend)."};
  // A function, run by --version alone: it loads cuBLASLt and the driver to report their versions.
  app.set_version_flag("--version", [] { return "dl-train " + dl::version_string() + "\n" + dl::device_build_info(); });
  app.footer(
      "Examples:\n"
      "  dl-train configs/addition.toml                      # the built-in synthetic task\n"
      "  dl-train configs/addition.toml --set train.steps=50 --set model.n_layer=2\n"
      "  dl-train configs/addition.toml --run-dir runs/a --json > metrics.jsonl\n"
      "  dl-train --resume runs/a --steps 2000               # continue a run, bit for bit\n"
      "  dl-train configs/addition.toml --env-lock env.lock  # only on a machine matching the lock\n"
      "  dl-train configs/addition.toml --nproc-per-node 4 --set parallel.tp=2   # dp: \"auto\", 4 / (tp x pp) = 2\n"
      "  srun -N2 --ntasks-per-node 8 dl-train big.toml --run-dir runs/big   # Slurm, torchrun, mpirun work too\n"
      "  dl-train sample --run-dir runs/a --prompt '123+456='\n"
      "  dl-train eval --run-dir runs/a --format json\n"
      "  dl-train sweep configs/lr.sweep.toml --jobs 2     # trials, ranked; best.toml in the sweep dir\n"
      "  dl-train runs runs/a runs/b --plot val_loss -o val.svg\n"
      "  dl-train tokenize book.txt --tokenizer gpt2 -o data/book   # text to token shards\n"
      "\n"
      "One process writes a run (or sweep) directory at a time: it holds DIR/.lock while it runs, and a\n"
      "second run, --resume or sweep --resume of that directory exits 2 naming its PID.\n"
      "\n"
      "Exit codes: 0 ok, 1 failure, 2 bad usage or input, 3 diverged (NaN/Inf), 130 interrupted\n"
      "after a checkpoint (a second Ctrl-C stops at once, without one). Run `dl-train --help-keys`\n"
      "for every config key.");

  std::string config_path, run_dir, resume_dir, device, env_lock, rdzv;
  int nproc_per_node = 1, nnodes = 1, node_rank = 0;
  std::vector<std::string> sets;
  int64_t steps = -1;
  bool json = false, print_config = false, quiet = false, help_keys = false;
  app.add_option("config", config_path, "Training config (TOML); optional with --resume");
  app.add_option("--set", sets, "Override a config key: --set model.n_layer=4 (repeatable)")->type_name("KEY=VALUE");
  app.add_option("--run-dir", run_dir, "Run directory to create (default runs/<config>-<time>; under Slurm runs/<config>-slurm-<job>.<step>); "
                                      "new or empty, and one run at a time writes it");
  app.add_option("--resume", resume_dir, "Continue the run in DIR from its newest good checkpoint (with none yet: train it "
                                         "again from step 0 with its config); not while another process writes DIR");
  app.add_option("--steps", steps, "Train until this many steps in total (overrides train.steps)")
      ->check(CLI::Validator([](std::string& v) { return v.rfind('-', 0) == 0 ? "must be 0 or more, not " + v : ""; },
                             "N >= 0"));
  app.add_option("--device", device, "cpu | cuda | auto (overrides train.device)");
  app.add_option("--env-lock", env_lock,
                 "Refuse to start when this machine has drifted from a dl-envlock lock (CUDA/driver major)");
  app.add_option("--nproc-per-node", nproc_per_node,
                 "Start N ranks on this node (like torchrun); parallel.dp defaults to the world size / (tp x pp)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", nnodes, "Nodes in the job (each runs this command with its --node-rank and the same --run-dir, "
                                     "on a filesystem every node shares)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--node-rank", node_rank, "This node's index, 0..nnodes-1");
  app.add_option("--rdzv", rdzv, "Rendezvous: a folder every node sees, or host:port of node 0 (default: a local folder)");
  app.add_flag("--json", json, "Write metrics as JSON lines to stdout (as in RUN/metrics.jsonl)");
  app.add_flag("--print-config", print_config, "Print the fully resolved config as TOML and exit");
  app.add_flag("-q,--quiet", quiet, "No progress or info logs on stderr");
  app.add_flag("--help-keys", help_keys, "List every config key with its type, default and meaning");

  auto* sample = app.add_subcommand("sample", "Generate text from a GPT run's newest checkpoint");
  sample->footer(
      "Examples:\n"
      "  dl-train sample --run-dir runs/a                    # the data's own prompts, greedy\n"
      "  dl-train sample --run-dir runs/text --prompt 'The ' --tokens 200 --temperature 0.8 --top-k 40");
  std::string s_run, s_prompt, s_format = "table";
  int64_t s_tokens = 64, s_topk = 0, s_count = 1, s_prompts = 4;
  double s_temp = 0.0;
  uint64_t s_seed = 0;
  sample->add_option("--run-dir", s_run, "Run directory")->required();
  sample->add_option("--prompt", s_prompt, "Prompt text (token ids separated by spaces for token-shard runs)");
  sample->add_option("--tokens", s_tokens, "Tokens to generate")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sample->add_option("--temperature", s_temp, "0 = greedy; otherwise sample from softmax(logits / T)")
      ->check(CLI::Range(0.0, 100.0));
  sample->add_option("--top-k", s_topk, "Sample only among the K most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  sample->add_option("--count", s_count, "Samples per prompt")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  sample->add_option("--prompts", s_prompts, "Without --prompt: how many of the data's own prompts (synthetic tasks)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  sample->add_option("--seed", s_seed, "Sampling seed (default: the run's train.seed)");
  sample->add_option("--format", s_format, "table | json | jsonl | csv | md");

  auto* eval = app.add_subcommand("eval", "Loss and accuracy of a run's newest checkpoint");
  eval->footer(
      "Examples:\n"
      "  dl-train eval --run-dir runs/a                      # the run's validation split\n"
      "  dl-train eval --run-dir runs/a --data text:book.txt --format json");
  std::string e_run, e_data, e_format = "table";
  int64_t e_batches = 0;
  eval->add_option("--run-dir", e_run, "Run directory")->required();
  eval->add_option("--data", e_data, "Data source to evaluate (default: the run's validation split)");
  eval->add_option("--max-batches", e_batches, "Evaluate at most N batches (0 = all)");
  eval->add_option("--format", e_format, "table | json | jsonl | csv | md");

  auto* sweep = app.add_subcommand("sweep", "Run a hyperparameter sweep (grid, random, tpe; asha early stopping)");
  sweep->footer(
      "Examples:\n"
      "  dl-train sweep configs/lr.sweep.toml --dir sweeps/lr --jobs 2\n"
      "  dl-train sweep --resume sweeps/lr                   # after Ctrl-C or a crash\n"
      "  dl-train sweep configs/lr.sweep.toml --format json > trials.json\n"
      "The sweep file's format, the methods and how resume stays exact: docs/SWEEPS.md.");
  std::string w_file, w_dir, w_resume, w_format = "table";
  int64_t w_jobs = 0, w_steps = 0;
  bool w_quiet = false;
  sweep->add_option("sweep_file", w_file, "Sweep file (TOML); not with --resume");
  sweep->add_option("--dir", w_dir, "Sweep directory to create (default sweeps/<sweep>-<time>)");
  sweep->add_option("--resume", w_resume, "Continue the sweep in DIR (not while another process runs it)");
  sweep->add_option("--jobs", w_jobs, "Trials at once (default: the sweep file's jobs, else 1); they share the cores")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sweep->add_option("--steps", w_steps, "Train every trial N steps (overrides the base config's train.steps and, with "
                                       "asha, early_stopping.max_steps; like dl-train --steps)")
      ->check(CLI::Range(int64_t{1}, dl::kMaxTrainSteps));
  sweep->add_option("--format", w_format, "table | json | jsonl | csv | md");
  sweep->add_flag("-q,--quiet", w_quiet, "No per-trial log lines on stderr");

  auto* runs = app.add_subcommand("runs", "Compare run (or sweep) directories: differing config keys, final metrics, plots");
  runs->footer(
      "Examples:\n"
      "  dl-train runs runs/a runs/b sweeps/lr\n"
      "  dl-train runs sweeps/lr --plot val_loss -o val_loss.svg --log-y");
  std::vector<std::string> r_dirs;
  std::string r_format = "table", r_plot, r_out;
  bool r_log = false;
  runs->add_option("dirs", r_dirs, "Run directories or sweep directories")->required();
  runs->add_option("--format", r_format, "table | json | jsonl | csv | md");
  runs->add_option("--plot", r_plot, "Draw this metric against step for every run as an SVG (-o FILE)");
  runs->add_option("-o,--output", r_out, "The SVG file to write (with --plot); - for stdout");
  runs->add_flag("--log-y", r_log, "Logarithmic y axis (with --plot)");
  auto* tokenize = app.add_subcommand("tokenize", "Tokenize text files into llm.c token shards (for tokens: data)");
  tokenize->footer(
      "Files are documents: the tokenizer's separator (GPT-2's <|endoftext|>, a tokenizer.json's eos token)\n"
      "goes between them. Shards are OUT/train_NNNNNN.bin (and OUT/val_NNNNNN.bin), the same ids as text:\n"
      "data with data.tokenizer = \"gpt2:DIR\" or \"hf:DIR\" (DIR with vocab.json + merges.txt, or tokenizer.json).\n"
      "Tokens are uint16 (magic 20240520) up to 65,536 ids, else uint32 (magic 20240801: Llama 3, Qwen2).\n"
      "Examples:\n"
      "  dl-train tokenize book.txt --tokenizer gpt2 -o data/book --val-fraction 0.05\n"
      "  dl-train tokenize 'corpus/*.txt' --tokenizer gpt2 -o data/corpus --shard-tokens 100000000\n"
      "  then: data.source = \"tokens:data/book/train_*.bin\", data.val_source = \"tokens:data/book/val_*.bin\"");
  dl::TokenizeOptions t_opt;
  std::string t_tokenizer;
  tokenize->add_option("sources", t_opt.sources, "Text files or globs (quoted), in order")->required();
  tokenize->add_option("--tokenizer", t_tokenizer, "Folder with GPT-2's vocab.json + merges.txt, or a Hugging Face tokenizer.json")
      ->required();
  tokenize->add_option("-o,--output", t_opt.out_dir, "Output folder (new or without shards; required)");
  dl::add_old_flag_name(tokenize, "--out", "--output", t_opt.out_dir);
  tokenize->add_option("--shard-tokens", t_opt.shard_tokens, "Tokens per shard")
      ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}));
  tokenize->add_option("--val-fraction", t_opt.val_fraction, "Share of the bytes, at the end, written as val_*.bin")
      ->check(CLI::Range(0.0, 0.999));
  tokenize->add_option("--threads", t_opt.threads, "Threads (0 = every core)")->check(CLI::NonNegativeNumber);

  if (const auto code = dl::parse_command_line(app, argc, argv, "dl-train")) return *code;

  return dl::dist::run_rank_tool("dl-train", [&]() -> int {
    if (help_keys) {
      std::cout << keys_help();
      return dl::kExitOk;
    }
    if (*sample) {
      dl::SampleOptions o{s_run, s_prompt, s_tokens, s_temp, s_topk, s_count, s_prompts, s_seed};
      auto fmt = dl::parse_output_format(s_format);
      std::cout << dl::format_sample_report(dl::run_sample(o), fmt);
      return dl::kExitOk;
    }
    if (*sweep) {
      dl::sweep::SweepOptions o;
      const auto fmt = dl::parse_output_format(w_format);
      if (!w_resume.empty()) {
        if (!w_file.empty()) dl::throw_usage("--resume continues the sweep in DIR with its own sweep file; drop ", w_file);
        if (!w_dir.empty() && fs::path(w_dir) != fs::path(w_resume)) dl::throw_usage("--resume continues in DIR; drop --dir");
        o.dir = w_resume;
        o.resume = true;
      } else {
        if (w_file.empty()) dl::throw_usage("no sweep file: dl-train sweep SWEEP.toml (or --resume DIR); see --help");
        o.sweep_file = w_file;
        o.dir = w_dir.empty() ? dl::timestamped_dir("sweeps", w_file).string() : w_dir;
      }
      o.jobs = w_jobs;
      o.steps = w_steps;
      o.quiet = w_quiet;
      o.progress = !w_quiet && dl::stderr_is_terminal();
      o.trainer = fs::read_symlink("/proc/self/exe");
      dl::set_log_quiet(w_quiet);
      const auto result = dl::sweep::run_sweep(o);
      if (result.interrupted)
        throw dl::Error(dl::ErrorKind::interrupted, "sweep interrupted; every trial saved its checkpoint (continue with "
                                                    "dl-train sweep --resume " + o.dir.string() + ")");
      std::cout << dl::sweep::sweep_table(result).render(fmt);
      if (!dl::sweep::best_trial(result))
        dl::throw_runtime("no trial of the sweep reported ", result.spec.metric, ": every trial failed or diverged (their "
                          "logs: ", (o.dir / "logs").string(), ")");
      dl::log_info("best config: " + (o.dir / "best.toml").string());
      return dl::kExitOk;
    }
    if (*runs) {
      std::vector<fs::path> dirs(r_dirs.begin(), r_dirs.end());
      const auto data = dl::sweep::read_runs(dirs);
      if (!r_plot.empty()) {
        if (r_out.empty()) dl::throw_usage("--plot ", r_plot, " needs -o FILE.svg");
        const auto out = dl::output_target(r_out, dl::sweep::runs_input_files(dirs, data));
        dl::write_output(out, dl::sweep::runs_svg(data, r_plot, r_log));
        return dl::kExitOk;
      }
      if (!r_out.empty() || r_log) dl::throw_usage("-o and --log-y go with --plot METRIC");
      const auto fmt = dl::parse_output_format(r_format);
      std::cout << dl::sweep::runs_table(data, fmt == dl::OutputFormat::table).render(fmt);
      return dl::kExitOk;
    }
    if (*tokenize) {
      if (t_opt.out_dir.empty()) dl::throw_usage("tokenize: no output folder: give -o/--output FOLDER");
      dl::check_thread_count(t_opt.threads, "--threads");  // before the folder: 100000 threads never start
      const std::vector<fs::path> inputs(t_opt.sources.begin(), t_opt.sources.end());
      // Not a device or a file, not inside a source; a symlink leads to its folder (README "Outputs").
      t_opt.out_dir = dl::output_folder(t_opt.out_dir, inputs).string();
      const auto tok = dl::load_tokenizer(t_tokenizer);
      const dl::TokenizeSummary s = dl::tokenize_to_shards(*tok, t_opt);
      std::cerr << dl::describe_tokenize_summary(s);
      std::cout << dl::format_tokenize_shards(s);
      return dl::kExitOk;
    }
    if (*eval) {
      auto fmt = dl::parse_output_format(e_format);
      dl::EvalOptions o{e_run, e_data, e_batches, {}};
      std::cout << dl::format_eval_report(dl::run_eval(o), fmt);
      return dl::kExitOk;
    }

    dl::refuse_near_subcommand(app, config_path);  // `dl-train evl` is a mistyped eval, not a missing config
    if (steps >= 0) sets.push_back("train.steps=" + std::to_string(steps));
    if (!device.empty()) sets.push_back("train.device=\"" + device + "\"");
    dl::TrainOptions o;
    const auto env = dl::dist::process_environment();
    if (!resume_dir.empty()) {
      if (!run_dir.empty() && fs::path(run_dir) != fs::path(resume_dir))
        dl::throw_usage("--resume continues the run in its own directory; drop --run-dir");
      // A config given with --resume replaces the run's; otherwise the run's resolved config.
      o.config = config_path.empty() ? dl::load_run_config(resume_dir, sets) : dl::load_config(config_path, sets);
      o.run_dir = resume_dir;
      o.resume = true;
    } else {
      if (config_path.empty()) dl::throw_usage("no config: dl-train CONFIG.toml (or --resume RUN_DIR); see --help");
      o.config = dl::load_config(config_path, sets);
      o.run_dir = run_dir.empty() ? dl::default_run_dir(config_path, env) : fs::path(run_dir);
    }
    if (print_config) {
      std::cout << dl::config_to_toml(o.config);
      return dl::kExitOk;
    }
    o.json = json;
    o.quiet = quiet;
    o.env_lock = env_lock;
    o.max_steps_here = dl::example_cap("DL_EXAMPLE_MAX_STEPS").value_or(-1);
    const auto role = dl::dist::launch_role(nproc_per_node, nnodes, env);
    if (role == dl::dist::LaunchRole::launcher) {
      // Refused here once rather than by every rank: a layout that does not fit the world.
      dl::check_launch(o.config, nproc_per_node * nnodes, nproc_per_node);
      // Each node's launcher would stamp its own default directory.
      if (nnodes > 1 && run_dir.empty() && resume_dir.empty() && !dl::default_run_dir_is_shared(env))
        dl::throw_usage("--nnodes ", nnodes, ": pass the same --run-dir to every node, on a filesystem they share "
                        "(every rank writes its part of each checkpoint there)");
      // Every rank runs this same command line (plus the run directory chosen here, so all of
      // them agree on it).
      dl::dist::LaunchOptions lo;
      lo.nproc_per_node = nproc_per_node;
      lo.nnodes = nnodes;
      lo.node_rank = node_rank;
      lo.rdzv = rdzv;
      lo.args.assign(argv + 1, argv + argc);
      if (run_dir.empty() && resume_dir.empty()) lo.args.insert(lo.args.end(), {"--run-dir", o.run_dir.string()});
      return dl::dist::launch_local_ranks(lo);
    }
    // Started by another launcher (torchrun, mpirun): the default run directory's time stamp
    // could differ between ranks, so it must be given (under Slurm the job id names it).
    if (role == dl::dist::LaunchRole::external_rank && run_dir.empty() && resume_dir.empty() &&
        !dl::default_run_dir_is_shared(env))
      dl::throw_usage("several ranks must share one run directory: pass --run-dir (the same on every rank)");
    dl::TrainSummary s = dl::run_training(o);
    if (!json && s.rank == 0) std::cout << dl::format_train_summary(s, dl::OutputFormat::table);
    return dl::kExitOk;
  }, kFlags);
}
