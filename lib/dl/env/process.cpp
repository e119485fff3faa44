// The only translation unit of dl/env that includes Boost.Process (a heavy header).
#include "dl/env/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

namespace dl {

namespace bp = boost::process;

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
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  auto env = boost::this_process::environment();
  for (const auto& kv : options.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const double deadline = options.timeout_s > 0 ? now_s() + options.timeout_s : 0;
  std::error_code ec;

  if (options.inherit_output) {
    bp::child c;
    try {
      c = bp::child(bp::exe = r.program, bp::args = args, env, ec);
    } catch (const std::exception& e) {
      r.error = e.what();
      return r;
    }
    if (ec) {
      r.error = "cannot run " + r.program + ": " + ec.message();
      return r;
    }
    r.started = true;
    c.wait(ec);
    r.exit_code = c.exit_code();
    return r;
  }

  bp::pipe out_pipe, err_pipe;
  // Own process group: a timeout kills the probe and anything it started.
  auto own_group = bp::extend::on_exec_setup([](auto&) { ::setpgid(0, 0); });
  bp::child c;
  try {
    c = bp::child(bp::exe = r.program, bp::args = args, bp::std_in < bp::null, bp::std_out > out_pipe,
                  bp::std_err > err_pipe, env, own_group, ec);
  } catch (const std::exception& e) {
    r.error = e.what();
    return r;
  }
  if (ec) {
    r.error = "cannot run " + r.program + ": " + ec.message();
    return r;
  }
  r.started = true;

  struct Stream {
    int fd;
    std::string* text;
    bool open = true;
  };
  Stream streams[2] = {{out_pipe.native_source(), &r.out}, {err_pipe.native_source(), &r.err}};
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
    int rc = ::poll(pfd, static_cast<nfds_t>(n), wait_ms);
    if (rc < 0) {
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
  // Output is closed; wait for the exit (a child may close its output and keep running).
  while (!r.timed_out && c.running(ec)) {
    if (deadline > 0 && now_s() >= deadline) {
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (r.timed_out) {
    pid_t pid = c.id();
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    r.error = "timed out after " + seconds_text(options.timeout_s) + " s (killed)";
    // Reap it, but never block on it: a process stuck in the kernel (a hung driver) cannot die
    // until it returns, and the snapshot must still complete.
    double give_up = now_s() + 1.0;
    while (c.running(ec) && now_s() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (c.running(ec)) c.detach();
    return r;
  }
  r.exit_code = c.exit_code();
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
