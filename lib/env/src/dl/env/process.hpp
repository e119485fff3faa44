// Running a probe: a child process from an argument vector (posix_spawn, never a shell), with
// its output captured and a wall-clock timeout. The child runs in its own process group, so a
// timeout kills it and everything it started (a script's `sleep`), and reading its output can
// never outlive the deadline.
#pragma once
#include <string>
#include <vector>

namespace dl {

struct ProcessOptions {
  double timeout_s = 10;                 // <= 0: no timeout
  std::vector<std::string> env;          // extra "KEY=VALUE" entries over the inherited environment
  bool inherit_output = false;           // child writes to our stdout/stderr instead of being captured
  size_t max_output = 16u << 20;         // bytes kept per stream; the rest is read and dropped
};

struct ProcessResult {
  bool started = false;     // false: the program was not found or could not be executed
  bool timed_out = false;   // killed (with its process group) when the timeout expired
  int exit_code = -1;       // valid when started && !timed_out
  std::string out, err;     // captured stdout and stderr
  std::string program;      // the resolved path that ran
  std::string error;        // why it did not start, or "timed out after N s"

  bool ok() const { return started && !timed_out && exit_code == 0; }
  // One line for a lock or a log: "ok", "timed out after 2 s (killed)", "exit code 3: <stderr line>".
  std::string describe() const;
};

// Finds `name` on PATH (names with a '/' are returned as they are when executable); "" if absent.
std::string find_program(const std::string& name);

// Runs argv[0] (looked up on PATH unless it contains '/') with argv[1..]. Never throws for a
// missing program, a failure or a timeout: the result says what happened.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

// "apt-get install -y 'pkg=1:2.0~rc1'": an argument vector quoted for showing to a person (POSIX sh
// single quotes where needed). Display only; run_process never uses a shell.
std::string shell_quote_command(const std::vector<std::string>& argv);

}  // namespace dl
