// Every example stays true (issue 32): each command of the tools' and subcommands' --help
// "Examples:", README.md's and docs/*.md's command blocks runs in a scratch folder and must exit
// 0. Training is shortened, not skipped: DL_EXAMPLE_MAX_STEPS=1 (each dl-train process trains at
// most one step; dl-bench times one iteration), DL_EXAMPLE_MAX_TRIALS=2 (a sweep samples two
// trials). What needs a GPU, a download, Slurm or another machine is listed below
// (kNotRun, with the reason) and only parsed: the tool's own parser with DL_EXAMPLE_PARSE_ONLY=1,
// so a mistyped flag still fails. Usage lines ("[--steps N]") must name flags their --help lists.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "support/support.hpp"

namespace dl::test::examples {

namespace fs = std::filesystem;



struct Example {
  std::string where;    // "README.md:106" or "dl-train sweep --help"
  std::string group;    // the help or the Markdown block it is in (a continued line joins within it)
  std::string command;  // as written, continuation lines joined
  // A usage line ("dl-train --resume DIR [--steps N]"): not run; each flag it names must be one
  // the tool (or subcommand) lists in its --help.
  bool synopsis = false;
};

// The examples of every tool's and subcommand's --help, run live from `bin_dir`; `helps` gets
// each help text by "tool" or "tool sub".
std::vector<Example> help_examples(const fs::path& bin_dir, std::map<std::string, std::string>* helps);
// The command lines of a Markdown text's shell blocks: fenced sh/bash/shell/console (or bare)
// blocks, and indented blocks' lines that start with a known program; `name` labels them.
std::vector<Example> markdown_examples(const std::string& text, const std::string& name);

struct Outcome {
  bool ok = false;
  std::string how;     // "ran", "parse only: needs a GPU", "synopsis", ...
  std::string report;  // on failure: where, the command, the exit code and stderr's tail
  double seconds = 0;  // wall time, fixtures included
};

// Runs examples, each on its own as a reader would, in its own scratch folder under
// `scratch_root` (a copy of the repository's configs/ and the fixtures the command names),
// `jobs` at a time.
class Runner {
 public:
  Runner(fs::path source_dir, fs::path bin_dir, fs::path scratch_root, std::map<std::string, std::string> helps);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;
  std::vector<Outcome> run(const std::vector<Example>& examples, int jobs);

 private:
  struct Impl;
  Impl* impl_;
};



namespace {

const std::vector<std::string> kTools = {"dl-train", "dl-bench", "dl-shard", "dl-cost", "dl-envlock"};

// Programs whose lines in an indented Markdown block are commands (other lines there are output,
// formulas or TOML); a fenced sh/bash block's every line is one.
bool is_program(const std::string& word) {
  static const std::set<std::string> programs = {"make",  "cmake", "srun", "torchrun", "mpirun", "huggingface-cli",
                                                 "mkdir", "cp",    "jq"};
  if (std::find(kTools.begin(), kTools.end(), word) != kTools.end() || programs.count(word)) return true;
  for (const std::string prefix : {"scripts/", "./scripts/", "build/"})
    if (word.rfind(prefix, 0) == 0 && word.size() > prefix.size() && word.back() != '/') return true;
  return false;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Words as a shell splits them (quotes removed; no expansions), up to a # comment.
std::vector<std::string> words(const std::string& cmd) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < cmd.size(); ++i) {
    const char c = cmd[i];
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

// The first word that is not a VAR=value assignment.
std::string program_of(const std::string& cmd) {
  for (const auto& w : words(cmd))
    if (w.find('=') == std::string::npos || w[0] == '-') return w;
  return "";
}

// The command without its quoted parts and # comment (for the synopsis markers below).
std::string unquoted(const std::string& cmd) {
  std::string out;
  char quote = 0;
  for (const char c : cmd) {
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    else if (c == '#' && (out.empty() || out.back() == ' ')) break;
    else out += c;
  }
  return out;
}

// A usage line: optional parts in brackets, alternatives as a|b or (a | b), or repetition as "...".
bool looks_like_synopsis(const std::string& cmd) {
  const std::string s = unquoted(cmd);
  static const std::regex alternation(R"([A-Za-z0-9]\|[A-Za-z0-9])");
  return s.find_first_of("[(") != std::string::npos || s.find("...") != std::string::npos ||
         std::regex_search(s, alternation);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The indented lines after a line equal to `title` ("Subcommands:", "Examples:"), up to a blank
// or unindented line.
std::vector<std::string> section(const std::string& help, const std::vector<std::string>& titles) {
  std::vector<std::string> out;
  bool in = false;
  for (const auto& line : split_lines(help)) {
    if (!in) {
      in = std::find(titles.begin(), titles.end(), trim(line)) != titles.end() && line.rfind(' ', 0) != 0;
      continue;
    }
    if (line.rfind("  ", 0) != 0 || trim(line).empty()) break;
    out.push_back(line);
  }
  return out;
}

std::string help_text(const fs::path& bin_dir, const std::string& tool, const std::string& sub) {
  std::vector<std::string> args;
  if (!sub.empty()) args.push_back(sub);
  args.push_back("--help");
  const auto r = dl::test::run((bin_dir / tool).string(), args, "", {}, 30);
  if (r.exit_code != 0) throw std::runtime_error(tool + " " + sub + " --help exited " + std::to_string(r.exit_code));
  return r.out;
}

void add_help_examples(const std::string& help, const std::string& where, std::vector<Example>* out) {
  std::string pending;
  for (const auto& line : section(help, {"Examples:", "Example:"})) {
    std::string cmd = trim(line);
    const std::string first = words(cmd).empty() ? "" : words(cmd)[0];
    if (pending.empty() && !first.empty() && first.back() == ':') continue;  // a note: "then: data.source = ..."
    if (!pending.empty()) cmd = pending + " " + cmd;
    if (cmd.size() >= 1 && cmd.back() == '\\') {
      pending = trim(cmd.substr(0, cmd.size() - 1));
      continue;
    }
    pending.clear();
    out->push_back({where, where, cmd, looks_like_synopsis(cmd)});
  }
}

}  // namespace

std::vector<Example> help_examples(const fs::path& bin_dir, std::map<std::string, std::string>* helps) {
  std::vector<Example> out;
  for (const auto& tool : kTools) {
    const std::string help = help_text(bin_dir, tool, "");
    (*helps)[tool] = help;
    add_help_examples(help, tool + " --help", &out);
    for (const auto& line : section(help, {"Subcommands:", "SUBCOMMANDS:"})) {
      const std::string sub = words(line).at(0);
      const std::string sub_help = help_text(bin_dir, tool, sub);
      (*helps)[tool + " " + sub] = sub_help;
      add_help_examples(sub_help, tool + " " + sub + " --help", &out);
    }
  }
  return out;
}

std::vector<Example> markdown_examples(const std::string& text, const std::string& name) {
  std::vector<Example> out;
  const auto lines = split_lines(text);
  bool fenced = false, shell_fence = false, indented = false, prev_blank = true;
  std::string group;
  int last_indent = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const std::string where = name + ":" + std::to_string(i + 1);
    const std::string t = trim(line);
    if (t.rfind("```", 0) == 0) {
      fenced = !fenced;
      const std::string lang = trim(t.substr(3));
      shell_fence = fenced && (lang.empty() || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console");
      group = name + " block at " + where;
      prev_blank = false;
      continue;
    }
    if (fenced && !shell_fence) continue;
    const bool is_indented = !fenced && line.rfind("    ", 0) == 0 && (indented || prev_blank);
    if (!fenced && !is_indented) {
      indented = false;
      prev_blank = t.empty();
      continue;
    }
    if (is_indented && !indented) group = name + " block at " + where;
    indented = is_indented;
    prev_blank = false;
    if (t.empty() || t[0] == '#') continue;
    std::string cmd = t;
    if (t.rfind("$ ", 0) == 0) cmd = trim(t.substr(2));
    const int indent = static_cast<int>(line.find_first_not_of(' '));
    // A usage line continued on a deeper-indented line: "[--json] [--print-config]".
    if (!out.empty() && out.back().synopsis && out.back().group == group && indent > last_indent &&
        (cmd[0] == '[' || cmd[0] == '-')) {
      out.back().command += " " + cmd;
      continue;
    }
    // A shell line continued with a backslash.
    if (!out.empty() && out.back().group == group && !out.back().command.empty() && out.back().command.back() == '\\') {
      out.back().command = trim(out.back().command.substr(0, out.back().command.size() - 1)) + " " + cmd;
      continue;
    }
    if (!fenced && !is_program(program_of(cmd))) continue;  // output, a formula, TOML
    last_indent = indent;
    out.push_back({where, group, cmd, looks_like_synopsis(cmd)});
  }
  return out;
}

namespace {

// Examples that are not run here, each with why; they are checked as far as this machine allows
// (check_not_run). A pattern ending in '*' matches the start of the command's program, one ending
// in a space the program itself; any other matches anywhere in the command.
struct NotRun {
  const char* pattern;
  const char* reason;
};
const NotRun kNotRun[] = {
    {"make ", "builds and runs the project's own targets (minutes; make test runs this test)"},
    {"cmake ", "configures or builds the project (minutes)"},
    {"scripts/*", "a build, benchmark or device script of the repository (minutes)"},
    {"./scripts/*", "a build, benchmark or device script of the repository (minutes)"},
    {"--device cuda", "needs a GPU"},
    {"--backend nccl", "needs a GPU"},
    {"srun ", "needs Slurm"},
    {"--nnodes 2", "needs a second machine"},
    {"huggingface-cli download", "downloads GPT-2 from the Hugging Face hub"},
    {"configs/finetune-gpt2.toml", "needs GPT-2's 124M weights (the download beside it)"},
    {"dl-train configs/gpt2-124m.toml", "GPT-2 124M: minutes per step on a CPU"},
    {"dl-bench train configs/gpt2-124m.toml", "GPT-2 124M: minutes per step on a CPU"},
    {"--yes", "installs packages on this machine (apt-get, pip)"},
    {"build/bin-emu/", "the emulated device's build (the `emulated` target, part of make test)"},
    {".gpu-carry", "prepares a device call (docs/CUDA.md)"},
};

// Where an example names a placeholder, the test substitutes (the command is shown as written):
//   step_NNNNNNNN (a checkpoint of runs/a)  ->  the checkpoint the fixture run has (it trains
//                                              DL_EXAMPLE_MAX_STEPS steps, not 600)
const std::regex kCheckpointName(R"(step_[0-9]{8})");

}  // namespace

// Files and folders the examples assume (runs/a, env.lock, ...): made once in the world folder
// when an example first names one, copied into the example's scratch folder when the command
// reads it (a command that writes it, -o/--run-dir/--dir/>, gets no copy). Every scratch folder
// also holds a copy of configs/ and an empty runs/.
struct Fixture {
  std::string name;
  std::function<void(const fs::path& world)> make;
};

namespace {

std::string tail_of(const std::string& text, size_t lines) {
  auto all = split_lines(text);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "    " + all[i] + "\n";
  return out;
}

bool names_path(const std::string& cmd, const std::string& name) {
  for (size_t at = cmd.find(name); at != std::string::npos; at = cmd.find(name, at + 1)) {
    const char before = at == 0 ? ' ' : cmd[at - 1];
    const size_t end = at + name.size();
    const char after = end == cmd.size() ? ' ' : cmd[end];
    if (std::string(" '\"=:").find(before) != std::string::npos && std::string(" '\"/").find(after) != std::string::npos)
      return true;
  }
  return false;
}

// What a command writes: the values of -o, --output, --dir, >, and dl-train's --run-dir when it
// trains (not sample/eval, which read it).
std::set<std::string> outputs_of(const std::string& cmd) {
  std::set<std::string> out;
  const auto w = words(cmd);
  const bool reads_run = cmd.find("dl-train sample") != std::string::npos || cmd.find("dl-train eval") != std::string::npos;
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    if (w[i] == "-o" || w[i] == "--output" || w[i] == "--dir" || w[i] == ">" || (w[i] == "--run-dir" && !reads_run))
      out.insert(w[i + 1]);
  }
  return out;
}

// The commands of a pipe or chain (split at |, &&, || and ; outside quotes; a # comment dropped).
std::vector<std::string> commands_of(const std::string& cmd) {
  std::vector<std::string> out(1);
  char quote = 0;
  for (size_t i = 0; i < cmd.size(); ++i) {
    const char c = cmd[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || cmd[i - 1] == ' ')) {
      break;
    } else if (c == '|' || c == ';' || (c == '&' && i + 1 < cmd.size() && cmd[i + 1] == '&')) {
      if (i + 1 < cmd.size() && (cmd[i + 1] == '|' || cmd[i + 1] == '&')) ++i;
      out.emplace_back();
      continue;
    }
    out.back() += c;
  }
  for (auto& part : out) part = trim(part);
  return out;
}

bool file_has_line_starting(const fs::path& file, const std::string& prefix) {
  for (const auto& line : split_lines(read_file(file)))
    if (line.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

struct Runner::Impl {
  fs::path source, bin, root, world;
  std::map<std::string, std::string> helps;
  std::vector<Fixture> fixtures;
  std::mutex world_mutex;
  std::set<std::string> made;
  std::string checkpoint_name;  // runs/a's checkpoint, once made

  std::vector<std::string> env() const {
    const char* path = std::getenv("PATH");
    return {"PATH=" + bin.string() + ":" + (path ? path : "/usr/bin:/bin"), "DL_EXAMPLE_MAX_STEPS=1",
            "DL_EXAMPLE_MAX_TRIALS=2", "DL_NUM_THREADS=1"};
  }

  RunResult bash(const fs::path& dir, const std::string& cmd, const std::vector<std::string>& extra_env = {},
                 double timeout_s = 120) const {
    auto e = env();
    e.insert(e.end(), extra_env.begin(), extra_env.end());
    return dl::test::run("/bin/bash", {"-c", "cd -- \"$0\" || exit 97\nset -o pipefail\n" + cmd, dir.string()}, "", e, timeout_s);
  }

  void must(const fs::path& dir, const std::string& cmd) {
    const auto r = bash(dir, cmd);
    if (r.exit_code != 0)
      throw std::runtime_error("making a fixture: `" + cmd + "` exited " + std::to_string(r.exit_code) + ":\n" +
                               tail_of(r.err, 15));
  }

  void define_fixtures() {
    auto copy_of = [this](const std::string& from_to) {
      return [this, from_to](const fs::path& w) { must(w, "cp -r " + from_to); };
    };
    fixtures = {
        {"runs/a", [this](const fs::path& w) { must(w, "dl-train configs/addition.toml --run-dir runs/a --quiet"); }},
        {"runs/b", [this](const fs::path& w) { need("runs/a"), must(w, "cp -r runs/a runs/b"); }},
        {"runs/baseline", [this](const fs::path& w) { need("runs/a"), must(w, "cp -r runs/a runs/baseline"); }},
        // The folder `dl-shard split runs/a --layout "dp=4,zero=3" -o runs/a-dp4` writes.
        {"runs/a-dp4", [this](const fs::path& w) {
           need("runs/a"), must(w, "dl-shard split runs/a --layout dp=4,zero=3 -o runs/a-dp4");
         }},
        // What `dl-bench all --format json > card.json` writes.
        {"card.json", [this](const fs::path& w) { must(w, "dl-bench all --format json > card.json"); }},
        {"runs/text", [this](const fs::path& w) { must(w, "dl-train configs/text.toml --run-dir runs/text --quiet"); }},
        {"sweeps/lr", [this](const fs::path& w) { must(w, "dl-train sweep configs/lr.sweep.toml --dir sweeps/lr -q"); }},
        {"ckpt", [this](const fs::path& w) { need("runs/a"), must(w, "cp -r runs/a/checkpoints ckpt"); }},
        {"model.safetensors", [this](const fs::path& w) { need("runs/a"), must(w, "dl-shard merge runs/a -o model.safetensors"); }},
        {".venv", [this](const fs::path& w) { must(w, "mkdir -p .venv/bin && ln -s \"$(command -v python3)\" .venv/bin/python"); }},
        {"env.lock", [this](const fs::path& w) { must(w, "dl-envlock snapshot -o env.lock"); }},
        {"mine.lock", [this](const fs::path& w) { need("env.lock"), must(w, "cp env.lock mine.lock"); }},
        {"yours.lock", [this](const fs::path& w) { need("env.lock"), must(w, "cp env.lock yours.lock"); }},
        // What this machine can satisfy (the help's own env.toml asks for CUDA and a driver).
        {"env.toml", [](const fs::path& w) { write_file(w / "env.toml", "deb.libopenblas-dev = \"*\"\n"); }},
        // "Your big config" and "your config": the shipped small one.
        {"big.toml", copy_of("configs/addition.toml big.toml")},
        {"a.toml", copy_of("configs/addition.toml a.toml")},
        {"book.txt", copy_of("/usr/share/common-licenses/GPL-3 book.txt")},
        {"my-text.txt", copy_of("/usr/share/common-licenses/GPL-3 my-text.txt")},
        {"corpus", [this](const fs::path& w) {
           must(w, "mkdir corpus && cp /usr/share/common-licenses/GPL-3 corpus/gpl.txt && "
                   "cp /usr/share/common-licenses/Apache-2.0 corpus/apache.txt");
         }},
        {"gpt2", [](const fs::path& w) { fs::create_directory_symlink(shared_path("data/gpt2"), w / "gpt2"); }},
        {"my-quotes.toml", [](const fs::path& w) {
           write_file(w / "my-quotes.toml",
                      "schema = \"dlkit-catalog/1\"\n[[offer]]\nprovider = \"Quote\"\ninstance = \"8x-h100\"\n"
                      "gpu = \"H100-SXM\"\ngpus = 8\non_demand = 20.0\nsource = \"a quote by mail\"\nas_of = \"2026-11\"\n");
         }},
        {"out", [](const fs::path& w) { fs::create_directory(w / "out"); }},
        // The --hf-config examples' download: Llama 3 8B's config.json as the hub publishes it.
        {"Meta-Llama-3-8B", [](const fs::path& w) {
           fs::create_directory(w / "Meta-Llama-3-8B");
           write_file(w / "Meta-Llama-3-8B/config.json",
                      "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 4096, "
                      "\"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
                      "\"num_key_value_heads\": 8, \"vocab_size\": 128256, \"max_position_embeddings\": 8192, "
                      "\"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, "
                      "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\"}\n");
         }},
    };
  }

  Fixture* fixture(const std::string& name) {
    for (auto& f : fixtures)
      if (f.name == name) return &f;
    return nullptr;
  }

  // Makes a fixture in the world folder (world_mutex held).
  void need(const std::string& name) {
    if (made.count(name)) return;
    fs::create_directories((world / name).parent_path());
    fixture(name)->make(world);
    made.insert(name);
    if (name == "runs/a") {
      for (const auto& e : fs::directory_iterator(world / "runs/a/checkpoints"))
        checkpoint_name = std::max(checkpoint_name, e.path().filename().string());
    }
  }

  // The command with its placeholders made concrete, and the fixtures it reads put in `dir`.
  std::string prepare(const std::string& command, const fs::path& dir) {
    std::lock_guard<std::mutex> lock(world_mutex);
    std::string cmd = command;
    const auto outs = outputs_of(cmd);
    bool wants_checkpoint = std::regex_search(cmd, kCheckpointName);
    for (const auto& f : fixtures) {
      if (!names_path(cmd, f.name) && !(wants_checkpoint && f.name == "runs/a")) continue;
      if (outs.count(f.name) || outs.count(f.name + "/")) continue;
      need(f.name);
      if (fs::exists(dir / f.name) || !names_path(cmd, f.name)) continue;
      fs::create_directories((dir / f.name).parent_path());
      fs::copy(world / f.name, dir / f.name, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    }
    if (wants_checkpoint) cmd = std::regex_replace(cmd, kCheckpointName, checkpoint_name);
    return cmd;
  }

  const NotRun* not_run(const std::string& cmd) const {
    // jq (in a pipe of dl-envlock check's help) is not among the project's dependencies.
    static const NotRun no_jq{"| jq", "jq is not installed here"};
    static const bool have_jq = dl::test::run("/bin/sh", {"-c", "command -v jq"}).exit_code == 0;
    if (!have_jq && cmd.find(no_jq.pattern) != std::string::npos) return &no_jq;
    const std::string prog = program_of(cmd);
    for (const auto& n : kNotRun) {
      const std::string p = n.pattern;
      if (p.back() == '*' ? prog.rfind(p.substr(0, p.size() - 1), 0) == 0
          : p.back() == ' ' && p.find(' ') == p.size() - 1 ? prog == p.substr(0, p.size() - 1)
                                                             : cmd.find(p) != std::string::npos)
        return &n;
    }
    return nullptr;
  }

  std::string help_for(const std::vector<std::string>& w, size_t at) const {
    if (at + 1 < w.size()) {
      auto it = helps.find(w[at] + " " + w[at + 1]);
      if (it != helps.end()) return it->second;
    }
    auto it = helps.find(w[at]);
    return it == helps.end() ? "" : it->second;
  }

  // A usage line: every flag it names is listed in the --help it belongs to.
  std::string check_synopsis(const std::string& cmd) const {
    const auto w = words(unquoted(cmd));
    if (w.empty() || !helps.count(w[0])) return "";  // another program's usage: nothing to compare with
    const std::string help = help_for(w, 0);
    static const std::regex flag(R"((^|[\s\[|])(--?[A-Za-z][A-Za-z0-9-]*))");
    std::string problems;
    const std::string s = unquoted(cmd);
    for (auto it = std::sregex_iterator(s.begin(), s.end(), flag); it != std::sregex_iterator(); ++it) {
      const std::string f = (*it)[2];
      bool listed = false;
      for (size_t at = help.find(f); at != std::string::npos && !listed; at = help.find(f, at + 1)) {
        const char before = at == 0 ? ' ' : help[at - 1];
        const size_t end = at + f.size();
        const char after = end == help.size() ? '\n' : help[end];
        listed = (before == ' ' || before == ',') && std::string(" ,=\n").find(after) != std::string::npos;
      }
      if (!listed) problems += " " + f;
    }
    return problems.empty() ? "" : "flags not in its --help:" + problems;
  }

  // What a not-run example can show here: a dl-* command line parses (DL_EXAMPLE_PARSE_ONLY=1,
  // launcher prefixes and build paths dropped); a make target, a script or a CMake option exists.
  Outcome check_not_run(const Example& e, const std::string& cmd, const fs::path& dir, const NotRun& n) {
    Outcome o;
    o.how = std::string("parse only: ") + n.reason;
    const std::string prog = program_of(cmd);
    std::string problem;
    if (prog == "make") {
      for (const auto& target : words(cmd))
        if (target != "make" && target.find('=') == std::string::npos && target[0] != '-' &&
            !file_has_line_starting(source / "Makefile", target + ":"))
          problem += "no target '" + target + "' in the Makefile; ";
    } else if (prog == "cmake") {
      const auto w = words(cmd);
      std::string lists;
      for (const char* f : {"CMakeLists.txt", "lib/CMakeLists.txt", "tests/CMakeLists.txt"}) lists += read_file(source / f);
      for (size_t i = 0; i < w.size(); ++i) {
        if (w[i].rfind("-D", 0) == 0 && w[i].rfind("-DCMAKE_", 0) != 0) {
          const std::string var = w[i].substr(2, w[i].find('=') - 2);
          if (lists.find(var) == std::string::npos) problem += "no CMake option " + var + "; ";
        }
        if (w[i] == "--target" && i + 1 < w.size() && lists.find("(" + w[i + 1]) == std::string::npos)
          problem += "no CMake target " + w[i + 1] + "; ";
      }
    } else if (prog.find("scripts/") != std::string::npos) {
      if (access((source / prog).c_str(), X_OK) != 0) problem = prog + " is not an executable script in the repository";
    } else if (cmd.find("dl-") != std::string::npos) {
      static const std::regex launcher(R"(^\s*(srun|torchrun|mpirun)\b.*?(?=\bdl-))");
      static const std::regex build_path(R"((^|\s)[\w./-]*/(dl-(train|bench|shard|cost|envlock))\b)");
      // Each dlkit command of a pipe or chain, alone (the other programs may not be here).
      for (const auto& part : commands_of(cmd)) {
        std::string parsed = std::regex_replace(part, launcher, "");
        parsed = std::regex_replace(parsed, build_path, "$1$2");
        if (std::find(kTools.begin(), kTools.end(), program_of(parsed)) == kTools.end()) continue;
        const auto r = bash(dir, parsed, {"DL_EXAMPLE_PARSE_ONLY=1"}, 30);
        if (r.exit_code != 0)
          problem += "its command line does not parse (ran `" + parsed + "` with DL_EXAMPLE_PARSE_ONLY=1, exit " +
                     std::to_string(r.exit_code) + "):\n" + tail_of(r.err, 10);
      }
    } else {
      o.how += " (another program: not checked)";
    }
    o.ok = problem.empty();
    if (!o.ok) o.report = e.where + ": " + e.command + "\n  " + problem;
    return o;
  }

  Outcome run_one(const Example& e, const fs::path& dir) {
    if (e.synopsis) {
      const std::string problem = check_synopsis(e.command);
      return {problem.empty(), "synopsis", problem.empty() ? "" : e.where + ": " + e.command + "\n  " + problem};
    }
    std::string cmd;
    try {
      cmd = prepare(e.command, dir);
    } catch (const std::exception& ex) {
      return {false, "fixture", e.where + ": " + e.command + "\n  " + ex.what()};
    }
    if (const NotRun* n = not_run(e.command)) return check_not_run(e, cmd, dir, *n);
    const auto r = bash(dir, cmd);
    Outcome o{r.exit_code == 0, "ran", ""};
    if (!o.ok)
      o.report = e.where + ": " + e.command + (cmd != e.command ? "\n  (run as: " + cmd + ")" : "") + "\n  exit " +
                 std::to_string(r.exit_code) + (r.exit_code == -1 ? " (timed out)" : "") + "; stderr's tail:\n" +
                 tail_of(r.err, 12);
    return o;
  }
};

Runner::Runner(fs::path source_dir, fs::path bin_dir, fs::path scratch_root, std::map<std::string, std::string> helps)
    : impl_(new Impl) {
  impl_->source = std::move(source_dir);
  impl_->bin = std::move(bin_dir);
  impl_->root = std::move(scratch_root);
  impl_->world = impl_->root / "world";
  impl_->helps = std::move(helps);
  fs::create_directories(impl_->world);
  fs::copy(impl_->source / "configs", impl_->world / "configs", fs::copy_options::recursive);
  impl_->define_fixtures();
}

Runner::~Runner() { delete impl_; }

std::vector<Outcome> Runner::run(const std::vector<Example>& examples, int jobs) {
  std::vector<Outcome> outcomes(examples.size());
  // A command shown in several places (a tool's help and its subcommand's, the README) runs once.
  std::map<std::string, size_t> first;
  std::vector<size_t> distinct, same_as(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    std::string key = examples[i].synopsis ? "synopsis " : "";
    for (const auto& w : words(examples[i].command)) key += w + " ";
    const auto [it, inserted] = first.emplace(key, i);
    if (inserted) distinct.push_back(i);
    same_as[i] = it->second;
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t d = next++; d < distinct.size(); d = next++) {
      const size_t i = distinct[d];
      const fs::path dir = impl_->root / ("example-" + std::to_string(i));
      try {
        fs::create_directories(dir);
        fs::copy(impl_->source / "configs", dir / "configs", fs::copy_options::recursive);
        fs::create_directory(dir / "runs");  // where dl-train puts runs: -o runs/c has its folder
        const auto start = std::chrono::steady_clock::now();
        outcomes[i] = impl_->run_one(examples[i], dir);
        outcomes[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } catch (const std::exception& ex) {
        outcomes[i] = {false, "error", examples[i].where + ": " + examples[i].command + "\n  " + ex.what()};
      }
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < std::max(1, jobs); ++j) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < examples.size(); ++i) {
    if (same_as[i] == i) continue;
    const Outcome& o = outcomes[same_as[i]];
    outcomes[i] = {o.ok, o.how + " (as " + examples[same_as[i]].where + ")",
                   o.ok ? "" : examples[i].where + ": the same command as " + examples[same_as[i]].where + ", which fails",
                   0};
  }
  return outcomes;
}

}  // namespace dl::test::examples

using namespace dl::test;
using namespace dl::test::examples;

namespace {

fs::path bin_dir() { return fs::path(tool("dl-train")).parent_path(); }

std::vector<Example> every_example(std::map<std::string, std::string>* helps) {
  std::vector<Example> all = help_examples(bin_dir(), helps);
  std::vector<fs::path> docs{source_path("README.md")};
  std::vector<fs::path> more;
  for (const auto& e : fs::directory_iterator(source_path("docs")))
    if (e.path().extension() == ".md") more.push_back(e.path());
  std::sort(more.begin(), more.end());
  docs.insert(docs.end(), more.begin(), more.end());
  for (const auto& d : docs) {
    const auto found = markdown_examples(read_file(d), fs::relative(d, source_path("")).string());
    all.insert(all.end(), found.begin(), found.end());
  }
  return all;
}

// The failures' reports, one paragraph each.
std::string failures(const std::vector<Outcome>& outcomes) {
  std::string out;
  for (const auto& o : outcomes)
    if (!o.ok) out += o.report + "\n";
  return out;
}

}  // namespace

TEST_CASE("every example of the --help texts, README.md and docs/*.md runs, or parses where it cannot run here") {
  std::map<std::string, std::string> helps;
  auto examples = every_example(&helps);
  REQUIRE(examples.size() > 50);
  // DL_EXAMPLES_ONLY=README.md (or "dl-shard"): only the examples whose source names it.
  if (const char* only = std::getenv("DL_EXAMPLES_ONLY"); only && *only)
    std::erase_if(examples, [&](const Example& e) { return !has(e.where, only); });
  TempDir scratch("examples");
  Runner runner(source_path(""), bin_dir(), scratch.path(), helps);
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = runner.run(examples, 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::map<std::string, int> how;
  for (const auto& o : outcomes) {
    const std::string kind = o.how.substr(0, o.how.find_first_of(":("));
    ++how[kind.substr(0, kind.find_last_not_of(' ') + 1)];
  }
  std::cerr << "examples: " << examples.size() << " in " << seconds << " s:";
  for (const auto& [k, n] : how) std::cerr << " " << k << " " << n << ";";
  std::cerr << "\n";
  if (std::getenv("DL_EXAMPLES_LIST"))
    for (size_t i = 0; i < examples.size(); ++i)
      std::cerr << examples[i].where << " [" << outcomes[i].how << ", " << outcomes[i].seconds << " s] "
                << examples[i].command << "\n";
  const std::string failed = failures(outcomes);
  CHECK_MESSAGE(failed.empty(), "examples that fail:\n" << failed);
}

TEST_CASE("the collectors take commands, join continued lines and tell usage lines from examples") {
  const std::string md =
      "Text.\n\n"
      "    dl-cost offers --gpu H100     # a comment\n"
      "    step = compute / (1 - bubble)\n"
      "    dl-train --resume DIR [--steps N]\n"
      "                          [--json]\n\n"
      "```toml\nsteps = 5\n```\n"
      "```sh\ndl-shard plan --params 124M \\\n  --gpus 8 --gpu-mem 80GB\n# a comment line\nls | wc -l\n```\n";
  const auto found = markdown_examples(md, "X.md");
  REQUIRE(found.size() == 4);
  CHECK(found[0].where == "X.md:3");
  CHECK(found[0].command == "dl-cost offers --gpu H100     # a comment");
  CHECK_FALSE(found[0].synopsis);
  CHECK(found[1].command == "dl-train --resume DIR [--steps N] [--json]");
  CHECK(found[1].synopsis);
  CHECK(found[2].where == "X.md:12");
  CHECK(found[2].command == "dl-shard plan --params 124M --gpus 8 --gpu-mem 80GB");
  CHECK(found[3].command == "ls | wc -l");
  CHECK(found[0].group != found[2].group);

  std::map<std::string, std::string> helps;
  const auto from_help = help_examples(bin_dir(), &helps);
  // Each subcommand shows examples; a tool shows its own or points at its subcommands' helps.
  for (const auto& entry : helps) {  // not a structured binding: lambdas capture name (clang 15)
    const std::string& name = entry.first;
    const std::string& help = entry.second;
    const bool shows = std::any_of(from_help.begin(), from_help.end(),
                                   [&](const Example& e) { return e.where == name + " --help"; });
    const bool points = name.find(' ') == std::string::npos && has(help, name + " SUBCOMMAND --help` for examples");
    CHECK_MESSAGE((shows || points), name << " --help shows no Examples:");
  }
  CHECK(helps.size() > 20);
}

TEST_CASE("a broken example fails, naming its source, its command and why") {
  // Planted: a mistyped flag in an example that runs, in one only parsed (Slurm), in a usage
  // line, a missing make target, and a pipe whose first half fails; one good example beside them.
  const std::string md =
      "    dl-cost offers --gpu H100 --format csv\n\n"
      "    dl-cost offers --gpuu H100\n\n"
      "    srun -N2 dl-train configs/addition.toml --nproc-per-nod 8\n\n"
      "    dl-train --resume DIR [--stepz N]\n\n"
      "    make demoo\n\n"
      "    dl-cost offers --gpu NoSuchGPU | head -1\n\n"
      // Parsed only (Slurm): each dlkit command of the pipe alone, not the program it pipes into.
      "    srun -N2 dl-cost offers --gpu H100 --format json | no-such-program-here .rows\n";
  const auto examples = markdown_examples(md, "PLANTED.md");
  REQUIRE(examples.size() == 7);
  std::map<std::string, std::string> helps;
  (void)help_examples(bin_dir(), &helps);
  TempDir scratch("examples-planted");
  Runner runner(source_path(""), bin_dir(), scratch.path(), helps);
  const auto outcomes = runner.run(examples, 2);
  CHECK(outcomes[0].ok);
  CHECK_MESSAGE(outcomes[6].ok, outcomes[6].report);
  CHECK(has(outcomes[6].how, "needs Slurm"));
  for (size_t i = 1; i < 6; ++i) {
    INFO(examples[i].command);
    CHECK_FALSE(outcomes[i].ok);
    CHECK(has(outcomes[i].report, examples[i].where + ": " + examples[i].command));
  }
  CHECK(has(outcomes[1].report, "--gpuu"));  // stderr's tail: dl-cost's own error
  CHECK(has(outcomes[2].how, "needs Slurm"));
  CHECK(has(outcomes[2].report, "does not parse"));
  CHECK(has(outcomes[3].report, "flags not in its --help: --stepz"));
  CHECK(has(outcomes[4].report, "no target 'demoo'"));
}
