#include "dl/cli/app.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <mutex>
#include <unistd.h>

#include <chrono>

#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"

namespace dl {

namespace {
std::atomic<bool> g_quiet{false};
std::atomic<int> g_signal{0};
std::mutex g_log_mutex;
std::string g_tool = "dlkit";

// What a second signal prints, composed when the handlers are installed (a handler may only
// write(2) it).
char g_second_line[1024];
size_t g_second_length = 0;

void on_signal(int sig) {
  if (g_signal.load() != 0) {
    // Second signal: the user insists. Exit without cleanup (async-signal-safe), saying so.
    (void)!::write(STDERR_FILENO, g_second_line, g_second_length);
    _exit(128 + sig);
  }
  g_signal.store(sig);
}
}  // namespace

int run_tool(const std::string& tool, const std::function<int()>& body, const OptionNames& flags) {
  g_tool = tool;
  try {
    return body();
  } catch (const OptionError& e) {
    std::fflush(stdout);
    std::cerr << tool << ": error: " << printable(e.named(flags)) << "\n";
    return exit_code(e.kind());
  } catch (const Error& e) {
    std::fflush(stdout);
    std::cerr << tool << ": " << (e.kind() == ErrorKind::diverged ? "diverged: " : "error: ") << printable(e.what()) << "\n";
    return exit_code(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << tool << ": error: out of memory\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << tool << ": error: " << printable(e.what()) << "\n";
    return kExitFailure;
  }
}

void set_log_quiet(bool quiet) { g_quiet = quiet; }

void log_info(const std::string& line) {
  if (g_quiet) return;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::cerr << "[" << g_tool << "] " << printable(line) << "\n";
}

void log_warn(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::cerr << "[" << g_tool << "] warning: " << printable(line) << "\n";
}

void install_interrupt_handlers(std::string_view lost) {
  // On a terminal the line replaces a progress bar's.
  std::string line = str(stderr_is_terminal() ? "\r\033[2K" : "", g_tool, ": interrupted again: stopping immediately", lost);
  line.resize(std::min(line.size(), sizeof g_second_line - 1));
  line += '\n';
  std::copy(line.begin(), line.end(), g_second_line);
  g_second_length = line.size();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() { return g_signal.load() != 0; }
int interrupt_signal() { return g_signal.load(); }
void reset_interrupt_for_tests() { g_signal.store(0); }

double monotonic_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

ProgressBar::ProgressBar(int64_t total, bool enabled)
    : total_(total), enabled_(enabled && stderr_is_terminal()), start_(monotonic_seconds()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, const std::string& status) {
  if (!enabled_) return;
  double now = monotonic_seconds();
  if (done < total_ && last_draw_ >= 0 && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  const int width = 24;
  double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  int fill = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < width) bar += '>';
  bar.resize(width, ' ');
  double elapsed = now - start_;
  std::string eta = done > 0 && done < total_ ? " | eta " + format_duration(elapsed / done * (total_ - done)) : "";
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fprintf(stderr, "\r\033[2Kstep %lld/%lld [%s] %3d%% %s%s", static_cast<long long>(done),
               static_cast<long long>(total_), bar.c_str(), static_cast<int>(frac * 100), status.c_str(), eta.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!enabled_ || !drawn_) return;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fprintf(stderr, "\r\033[2K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace dl
