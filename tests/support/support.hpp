// Helpers shared by the tests: scratch folders, running binaries and scripts, reading files.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dl {
class Gpt2Tokenizer;
}

namespace dl::test {

namespace fs = std::filesystem;

// A fresh folder under the build's temp area, removed when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "t");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs a program with an argument vector (no shell), optional stdin text and extra environment
// entries ("KEY=VALUE"), and a wall-clock timeout in seconds (exit_code -1 on timeout).
RunResult run(const std::string& program, const std::vector<std::string>& args, const std::string& input = "",
              const std::vector<std::string>& env = {}, double timeout_s = 600);

// run() under `ulimit -v 4000000` (about 4 GB of address space: a shell sets the limit and execs
// the program), for tests that a size beyond the machine fails with exit 2 before it is
// allocated. ASan and TSan builds reserve terabytes of address space, so there the limit is left
// out (the reason is printed once) and the program runs plainly.
RunResult run_limited(const std::string& program, const std::vector<std::string>& args,
                      const std::vector<std::string>& env = {}, double timeout_s = 120);

// A child process running in the background: its stdout lines are collected as they arrive
// (for tests that act on progress, e.g. send SIGINT after step 5).
class Process {
 public:
  Process(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  ~Process();
  int pid() const;
  // Waits until a stdout line satisfies pred or the process ends; true if a line matched.
  bool wait_for_line(const std::function<bool(const std::string&)>& pred, double timeout_s);
  void send_signal(int sig);
  // Waits for exit and returns the exit code (128 + signal when killed); -1 on timeout.
  int wait(double timeout_s);
  std::vector<std::string> out_lines() const;
  std::string err() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Path of a dlkit tool binary ("dl-train") in this build.
std::string tool(const std::string& name);
// dl-train's arguments: `args`, then --nproc-per-node N when nproc > 1 and --set S for each of `sets`.
std::vector<std::string> with_nproc(std::vector<std::string> args, int nproc, const std::vector<std::string>& sets);
// Path under the source tree / the shared reference folder.
fs::path source_path(const std::string& rel);
fs::path shared_path(const std::string& rel);
// The Python with PyTorch for parity tests: $DL_TORCH_PYTHON, else Debian's /usr/bin/python3.
std::string torch_python();

std::string read_file(const fs::path& p);

// What the dl::OptionError that call() throws says once a tool names its options ({backend} ->
// --backend by `flags`); "" when call() throws none.
std::string named_option_error(const std::function<void()>& call, const std::map<std::string, std::string>& flags);
// What the dl::Error that call() throws says, prefixed "(not a usage error) " unless its kind is
// usage; "" when call() throws none.
std::string usage_error_of(const std::function<void()>& call);
void write_file(const fs::path& p, const std::string& content);
std::vector<std::string> lines(const std::string& text);
// Whether `text` contains `part` (messages and outputs checked for a phrase).
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
// An environment entry that hides every program from the tools' probes (env.lock's compiler and
// dpkg), for runs that must not depend on what this machine has installed.
inline const std::string kNoProbes = "PATH=/nonexistent";
// GPT-2's tokenizer from the shared reference folder (data/gpt2), loaded once.
const Gpt2Tokenizer& gpt2_tokenizer();

}  // namespace dl::test
