#include "support/support.hpp"

#include "dl/data/gpt2_tokenizer.hpp"

#include <boost/process.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "dl/core/option_error.hpp"
#include "dl/io/child_environment.hpp"

namespace dl::test {

namespace bp = boost::process;

// Polls instead of child::wait_for, which in Boost 1.74 can block for the whole timeout after
// the child has exited.
bool wait_child(bp::child& c, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::error_code ec;
  while (c.running(ec)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TempDir::TempDir(const std::string& tag) {
  std::random_device rd;
  fs::path base = fs::temp_directory_path() / "dlkit-tests";
  fs::create_directories(base);
  for (;;) {
    path_ = base / (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000));
    if (fs::create_directory(path_)) break;
  }
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

RunResult run(const std::string& program, const std::vector<std::string>& args, const std::string& input,
              const std::vector<std::string>& env, double timeout_s) {
  RunResult r;
  bp::ipstream out, err;
  bp::opstream in;
  // A copy: writing to this process's environment would leak one test's variables into every later child.
  bp::environment child_env = dl::child_environment(env);
  bp::child c(bp::exe = program, bp::args = args, bp::std_out > out, bp::std_err > err, bp::std_in < in,
              child_env);
  in << input;
  in.flush();
  in.pipe().close();
  auto drain = [](bp::ipstream& s) {
    std::ostringstream os;
    os << s.rdbuf();
    return os.str();
  };
  auto fo = std::async(std::launch::async, drain, std::ref(out));
  auto fe = std::async(std::launch::async, drain, std::ref(err));
  if (!wait_child(c, timeout_s)) {
    c.terminate();
    r.exit_code = -1;
  } else {
    int status = c.native_exit_code();
    r.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }
  r.out = fo.get();
  r.err = fe.get();
  return r;
}

struct Process::Impl {
  bp::ipstream out, err;
  bp::child child;
  std::thread out_reader, err_reader;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  std::string err_text;
  bool out_done = false;
};

Process::Process(const std::string& program, const std::vector<std::string>& args, const std::vector<std::string>& env)
    : impl_(std::make_unique<Impl>()) {
  // A copy: writing to this process's environment would leak one test's variables into every later child.
  bp::environment child_env = dl::child_environment(env);
  Impl& m = *impl_;
  m.child = bp::child(bp::exe = program, bp::args = args, bp::std_out > m.out, bp::std_err > m.err,
                      bp::std_in < bp::null, child_env);
  m.out_reader = std::thread([&m] {
    std::string line;
    while (std::getline(m.out, line)) {
      std::lock_guard<std::mutex> lock(m.mu);
      m.lines.push_back(line);
      m.cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(m.mu);
    m.out_done = true;
    m.cv.notify_all();
  });
  m.err_reader = std::thread([&m] {
    std::string line;
    while (std::getline(m.err, line)) {
      std::lock_guard<std::mutex> lock(m.mu);
      m.err_text += line + "\n";
    }
  });
}

Process::~Process() {
  if (impl_->child.running()) impl_->child.terminate();
  if (impl_->out_reader.joinable()) impl_->out_reader.join();
  if (impl_->err_reader.joinable()) impl_->err_reader.join();
}

int Process::pid() const { return impl_->child.id(); }

bool Process::wait_for_line(const std::function<bool(const std::string&)>& pred, double timeout_s) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  size_t checked = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (;;) {
    for (; checked < impl_->lines.size(); ++checked)
      if (pred(impl_->lines[checked])) return true;
    if (impl_->out_done) return false;
    if (impl_->cv.wait_until(lock, deadline) == std::cv_status::timeout) return false;
  }
}

void Process::send_signal(int sig) { ::kill(impl_->child.id(), sig); }

int Process::wait(double timeout_s) {
  if (!wait_child(impl_->child, timeout_s)) {
    impl_->child.terminate();
    return -1;
  }
  if (impl_->out_reader.joinable()) impl_->out_reader.join();
  if (impl_->err_reader.joinable()) impl_->err_reader.join();
  int status = impl_->child.native_exit_code();
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::vector<std::string> Process::out_lines() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lines;
}

std::string Process::err() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->err_text;
}

RunResult run_limited(const std::string& program, const std::vector<std::string>& args,
                      const std::vector<std::string>& env, double timeout_s) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr bool sanitized = true;
#elif defined(__has_feature)
  constexpr bool sanitized = __has_feature(address_sanitizer) || __has_feature(thread_sanitizer);
#else
  constexpr bool sanitized = false;
#endif
  if (sanitized) {
    static bool said = false;
    if (!said) std::cerr << "run_limited: no `ulimit -v` under ASan/TSan (they reserve terabytes of address space)\n";
    said = true;
    return run(program, args, "", env, timeout_s);
  }
  std::vector<std::string> shell = {"-c", "ulimit -v 4000000 && exec \"$0\" \"$@\"", program};
  shell.insert(shell.end(), args.begin(), args.end());
  return run("/bin/bash", shell, "", env, timeout_s);
}

std::string tool(const std::string& name) {
  // The emulated-device tests (ctest label `emulated`) take the programs linked to the emulated
  // device from bin-emu/ (DL_TEST_BIN_DIR), and the rest (dl-shard, dl-cost) from bin/.
  if (const char* emulated = std::getenv("DL_TEST_BIN_DIR"); emulated && *emulated) {
    const fs::path p = fs::path(emulated) / name;
    if (fs::exists(p)) return p.string();
  }
  return std::string(DL_BIN_DIR) + "/" + name;
}
fs::path source_path(const std::string& rel) { return fs::path(DL_SOURCE_DIR) / rel; }
fs::path shared_path(const std::string& rel) { return fs::path(DL_SHARED_DIR) / rel; }
std::string torch_python() {
  // A GPU machine's PyTorch is often another interpreter than Debian's (scripts/gpu-check.sh sets it).
  if (const char* p = std::getenv("DL_TORCH_PYTHON"); p && *p) return p;
  return DL_TORCH_PYTHON;
}

// Throws naming the path when the file cannot be opened or read: two missing files must not
// compare equal as two empty strings.
std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("read_file: cannot open " + p.string() + ": " + std::strerror(errno));
  std::ostringstream os;
  if (f.peek() != std::ifstream::traits_type::eof()) os << f.rdbuf();
  if (f.bad() || !os) throw std::runtime_error("read_file: cannot read " + p.string());
  return os.str();
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  f << content;
}

std::vector<std::string> with_nproc(std::vector<std::string> args, int nproc, const std::vector<std::string>& sets) {
  if (nproc > 1) {
    args.push_back("--nproc-per-node");
    args.push_back(std::to_string(nproc));
  }
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) out.push_back(line);
  return out;
}

std::string named_option_error(const std::function<void()>& call, const std::map<std::string, std::string>& flags) {
  try {
    call();
  } catch (const OptionError& e) {
    return e.named(flags);
  }
  return "";
}

std::string usage_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return (e.kind() == ErrorKind::usage ? "" : "(not a usage error) ") + std::string(e.what());
  }
  return "";
}

const Gpt2Tokenizer& gpt2_tokenizer() {
  static const Gpt2Tokenizer t(shared_path("data/gpt2").string());
  return t;
}

}  // namespace dl::test
