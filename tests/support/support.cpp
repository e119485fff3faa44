#include "support/support.hpp"

#include <boost/process.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <unistd.h>

namespace dl::test {

namespace bp = boost::process;

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
  auto child_env = boost::this_process::environment();
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    child_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
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
  if (!c.wait_for(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)))) {
    c.terminate();
    r.exit_code = -1;
  } else {
    r.exit_code = c.exit_code();
  }
  r.out = fo.get();
  r.err = fe.get();
  return r;
}

std::string tool(const std::string& name) { return std::string(DL_BIN_DIR) + "/" + name; }
fs::path source_path(const std::string& rel) { return fs::path(DL_SOURCE_DIR) / rel; }
fs::path shared_path(const std::string& rel) { return fs::path(DL_SHARED_DIR) / rel; }
std::string torch_python() { return DL_TORCH_PYTHON; }

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  f << content;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) out.push_back(line);
  return out;
}

}  // namespace dl::test
