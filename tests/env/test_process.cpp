#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "dl/env/process.hpp"
#include "support/support.hpp"

using namespace dl;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A process is gone when /proc has no entry for it or it is a zombie waiting for its parent.
bool process_gone(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string stat;
  std::getline(f, stat);
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

}  // namespace

TEST_CASE("run_process: output, exit codes, environment, missing programs") {
  auto r = run_process({"echo", "hello", "world"});
  CHECK(r.ok());
  CHECK(r.out == "hello world\n");
  CHECK(r.describe() == "ok");

  r = run_process({"sh", "-c", "echo oops >&2; exit 3"});
  CHECK(r.started);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK(r.err == "oops\n");
  CHECK(r.describe() == "exit code 3: oops");

  ProcessOptions o;
  o.env = {"DL_ENV_TEST=forty-two"};
  r = run_process({"sh", "-c", "printf %s \"$DL_ENV_TEST\""}, o);
  CHECK(r.out == "forty-two");

  r = run_process({"dl-no-such-program-xyz"});
  CHECK_FALSE(r.started);
  CHECK(r.describe() == "not found: no dl-no-such-program-xyz on PATH");
  r = run_process({"/nonexistent/dir/prog"});
  CHECK_FALSE(r.started);
  CHECK(r.describe().find("not found") == 0);

  CHECK(find_program("sh").find("/sh") != std::string::npos);
  CHECK(find_program("dl-no-such-program-xyz").empty());
}

TEST_CASE("run_process: a timeout kills the whole process group and returns in time") {
  test::TempDir dir("proc");
  std::string pidfile = (dir / "pid").string();
  ProcessOptions o;
  o.timeout_s = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  // The shell starts a grandchild that would keep the output pipe open for 30 s.
  auto r = run_process({"sh", "-c", "sleep 30 & echo $! > " + pidfile + "; echo started; wait"}, o);
  double took = seconds_since(t0);
  CHECK(r.started);
  CHECK(r.timed_out);
  CHECK_FALSE(r.ok());
  CHECK(r.out == "started\n");
  CHECK(r.describe() == "timed out after 0.5 s (killed)");
  CHECK(took >= 0.45);
  // A hang catch, not a speed check: a kill that missed the grandchild leaves the pipe open for
  // its 30 s sleep.
  CHECK(took < 15.0);
  int pid = std::stoi(test::read_file(pidfile));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = process_gone(pid);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);

  // A child that closes its output but keeps running is cut off too.
  t0 = std::chrono::steady_clock::now();
  r = run_process({"sh", "-c", "exec >/dev/null 2>&1; sleep 30"}, o);
  CHECK(r.timed_out);
  CHECK(seconds_since(t0) < 15.0);  // not the 30 s sleep
}

TEST_CASE("shell_quote_command quotes only what needs it") {
  CHECK(shell_quote_command({"apt-get", "install", "-y", "libfoo=1.2-3"}) == "apt-get install -y libfoo=1.2-3");
  CHECK(shell_quote_command({"apt-get", "install", "pkg=1:2.0~rc1", "a b", "it's"}) ==
        "apt-get install 'pkg=1:2.0~rc1' 'a b' 'it'\\''s'");
  CHECK(shell_quote_command({"python3", "-m", "pip", "install", "numpy==1.26.4"}) == "python3 -m pip install numpy==1.26.4");
}
