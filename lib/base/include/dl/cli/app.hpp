// What every tool's main() shares: error reporting and exit codes, logging to stderr, the
// interrupt flag, and the progress display.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "dl/core/option_error.hpp"

namespace dl {

// Runs a tool body: a dl::Error prints "<tool>: error: <message>" on stderr and returns its
// kind's exit code; any other exception is a failure (exit 1). Never prints a stack. The
// library's option errors name each {option} by the tool's `flags` (dl/core/option_error.hpp).
int run_tool(const std::string& tool, const std::function<int()>& body, const OptionNames& flags = {});

// Log lines go to stderr ("[dl-train] ..."); quiet mode keeps warnings and errors only.
void set_log_quiet(bool quiet);
void log_info(const std::string& line);
void log_warn(const std::string& line);

// SIGINT/SIGTERM set a flag instead of killing the process, so a training loop can finish its
// step, write a checkpoint and exit 130. A second signal exits at once (128 + the signal) with one
// line on stderr, "<tool>: interrupted again: stopping immediately<lost>", `lost` saying what
// is left undone (", without a checkpoint ...").
void install_interrupt_handlers(std::string_view lost = "");
bool interrupt_requested();
int interrupt_signal();  // the signal that arrived, 0 when none
void reset_interrupt_for_tests();

// A one-line progress bar redrawn in place on a terminal (stderr); on anything else it does
// nothing, and callers print plain periodic lines instead.
class ProgressBar {
 public:
  ProgressBar(int64_t total, bool enabled);
  ~ProgressBar();
  // Redraws at most ~10 times a second: "step 120/1000 [=====>    ] 12% loss 1.234 | 23.1k tok/s | eta 40s"
  void update(int64_t done, const std::string& status);
  void finish();  // clears the line
  bool enabled() const { return enabled_; }

 private:
  int64_t total_;
  bool enabled_;
  double last_draw_ = -1;
  double start_;
  bool drawn_ = false;
};

double monotonic_seconds();

}  // namespace dl
