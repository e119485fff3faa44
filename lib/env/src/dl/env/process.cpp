// Running probes. Boost.Process only finds programs on PATH here; children start through
// posix_spawn (see run_process).
#include "dl/env/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <spawn.h>
#include <sys/wait.h>

#include <boost/process/search_path.hpp>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <thread>

namespace dl {

namespace bp = boost::process;
extern "C" char** environ;

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string first_line(const std::string& text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = text.find('\n', b);
  std::string line = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

}  // namespace

std::string ProcessResult::describe() const {
  if (!started) return error.empty() ? "could not start" : error;
  if (timed_out) return error;
  if (exit_code != 0) {
    std::string line = first_line(err);
    if (line.empty()) line = first_line(out);
    return "exit code " + std::to_string(exit_code) + (line.empty() ? "" : ": " + line);
  }
  return "ok";
}

std::string find_program(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  return bp::search_path(name).string();
}

namespace {

// Children are started with posix_spawn (glibc: clone with CLONE_VFORK, then exec), not fork:
// fork runs every library's pthread_atfork handlers in the parent, and OpenBLAS's handler joins
// its worker threads, which deadlocks when another thread is in a BLAS call — dl-train probes
// the environment while it trains. (Boost.Process 1.74's use_vfork does not link.)
std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& o : overrides)
      if (o.substr(0, o.find('=')) == key) replaced = true;
    if (!replaced) env.push_back(kv);
  }
  for (const auto& o : overrides)
    if (o.find('=') != std::string::npos) env.push_back(o);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// 0 while running; otherwise fills the exit code (128 + signal when killed).
bool reap(pid_t pid, int& code, bool block) {
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid, &status, block ? 0 : WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got != pid) return false;
  code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  ProcessResult r;
  if (argv.empty()) {
    r.error = "empty command";
    return r;
  }
  r.program = find_program(argv[0]);
  if (r.program.empty()) {
    r.error = argv[0].find('/') == std::string::npos ? "not found: no " + argv[0] + " on PATH"
                                                     : "not found: " + argv[0] + " is not an executable file";
    return r;
  }
  std::vector<std::string> args = argv;
  args[0] = r.program;
  std::vector<std::string> envs = child_environment(options.env);
  std::vector<char*> c_args = c_strings(args), c_env = c_strings(envs);
  const double deadline = options.timeout_s > 0 ? now_s() + options.timeout_s : 0;

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawnattr_init(&attr);
  // Own process group (a timeout kills the probe and anything it started), default signal
  // dispositions and an empty mask whatever this process has installed.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  if (!options.inherit_output) {
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      r.error = std::string("pipe: ") + std::strerror(errno);
      return r;
    }
    ::posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    ::posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  }
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, r.program.c_str(), &fa, &attr, c_args.data(), c_env.data());
  ::posix_spawn_file_actions_destroy(&fa);
  ::posix_spawnattr_destroy(&attr);
  if (!options.inherit_output) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
  }
  if (rc != 0) {
    if (!options.inherit_output) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
    }
    r.error = "cannot run " + r.program + ": " + std::strerror(rc);
    return r;
  }
  r.started = true;
  if (options.inherit_output) {
    reap(pid, r.exit_code, true);
    return r;
  }

  struct Stream {
    int fd;
    std::string* text;
    bool open = true;
  };
  Stream streams[2] = {{out_pipe[0], &r.out}, {err_pipe[0], &r.err}};
  for (auto& s : streams) ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) | O_NONBLOCK);
  char buf[65536];
  while (streams[0].open || streams[1].open) {
    int wait_ms = -1;
    if (deadline > 0) {
      double left = deadline - now_s();
      if (left <= 0) {
        r.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(left * 1000) + 1;
    }
    pollfd pfd[2];
    int n = 0;
    Stream* map[2];
    for (auto& s : streams)
      if (s.open) {
        pfd[n] = {s.fd, POLLIN, 0};
        map[n++] = &s;
      }
    int prc = ::poll(pfd, static_cast<nfds_t>(n), wait_ms);
    if (prc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = ::read(map[i]->fd, buf, sizeof buf);
      if (got > 0) {
        size_t keep = std::min(static_cast<size_t>(got), options.max_output - std::min(options.max_output, map[i]->text->size()));
        map[i]->text->append(buf, keep);
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        map[i]->open = false;
      }
    }
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  // Output is closed; wait for the exit (a child may close its output and keep running).
  bool exited = false;
  while (!r.timed_out && !(exited = reap(pid, r.exit_code, false))) {
    if (deadline > 0 && now_s() >= deadline) {
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (r.timed_out) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    r.error = "timed out after " + seconds_text(options.timeout_s) + " s (killed)";
    // Reap it, but never block on it: a process stuck in the kernel (a hung driver) cannot die
    // until it returns, and the snapshot must still complete.
    double give_up = now_s() + 1.0;
    int ignored;
    while (!reap(pid, ignored, false) && now_s() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    r.exit_code = -1;
    return r;
  }
  return r;
}

std::string shell_quote_command(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                   "-_./=:+,@%") == std::string::npos;
    if (i) out += ' ';
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char ch : a) {
      if (ch == '\'') out += "'\\''";
      else out += ch;
    }
    out += '\'';
  }
  return out;
}

}  // namespace dl
