#include "dl/dist/launcher.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "dl/cli/app.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/io/child_environment.hpp"

namespace dl::dist {

namespace bp = boost::process;
namespace fs = std::filesystem;

namespace {

bool looks_like_host_port(const std::string& s, std::string& host, int& port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || s.find('/') != std::string::npos) return false;
  std::string p = s.substr(colon + 1);
  if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) return false;
  host = s.substr(0, colon);
  port = std::atoi(p.c_str());
  return !host.empty() && port > 0 && port < 65536;
}

std::string random_hex() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

std::string status_text(int code) {
  if (code > 128 && code < 128 + 65) {
    const char* name = ::strsignal(code - 128);
    return "status " + std::to_string(code) + " (killed by signal " + std::to_string(code - 128) +
           (name ? std::string(", ") + name : std::string()) + ")";
  }
  return "status " + std::to_string(code);
}

struct Rank {
  int rank = 0;
  bp::child child;
  std::unique_ptr<bp::ipstream> out, err;
  std::thread out_reader, err_reader;
  bool exited = false;
  int code = 0;
};

std::mutex g_out_mutex;

// Copies a rank's stream line by line: rank 0's stdout unchanged to stdout (it is data), every
// other line to stderr behind "[rank N] ".
void forward_lines(bp::ipstream& in, int rank, bool is_stdout) {
  std::string line;
  while (std::getline(in, line)) {
    std::lock_guard<std::mutex> lock(g_out_mutex);
    if (is_stdout && rank == 0) {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "[rank %d] %s\n", rank, line.c_str());
      std::fflush(stderr);
    }
  }
}

}  // namespace

void bind_to_launcher() {
  const char* pid = std::getenv("DL_LAUNCHER_PID");
  if (!pid) return;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died between our start and the prctl: then nobody would kill us.
  if (::getppid() != static_cast<pid_t>(std::atol(pid))) ::_exit(1);
}

int run_rank_tool(const std::string& tool, const std::function<int()>& body, const OptionNames& flags) {
  bind_to_launcher();
  return run_tool(tool, body, flags);
}

int launch_local_ranks(const LaunchOptions& o) {
  if (o.nproc_per_node < 1) throw_option_error("{nproc_per_node} must be at least 1");
  if (o.nnodes < 1) throw_option_error("{nnodes} must be at least 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw_option_error("{node_rank} ", o.node_rank, " is not in [0, {nnodes} ", o.nnodes, ")");
  const int world = o.nproc_per_node * o.nnodes;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw_runtime("cannot find this program's path (/proc/self/exe): ", ec.message());

  // Rendezvous for Gloo: our own file store folder, a shared one, or rank 0's TCP store.
  std::vector<std::string> rdzv_env;
  fs::path temp_store;
  std::string host;
  int port = 0;
  std::string run_id = std::getenv("DL_RUN_ID") ? std::getenv("DL_RUN_ID") : "";
  if (o.rdzv.empty()) {
    if (o.nnodes > 1)
      throw_option_error("{nnodes} ", o.nnodes, " needs {rdzv}: a folder every node sees, or host:port of node 0");
    std::string tmpl = (fs::temp_directory_path() / "dlkit-rdzv-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw_runtime("cannot create a rendezvous folder under ", fs::temp_directory_path().string());
    temp_store = tmpl;
    rdzv_env.push_back("DL_RDZV_DIR=" + temp_store.string());
    if (run_id.empty()) run_id = random_hex();
  } else if (looks_like_host_port(o.rdzv, host, port)) {
    rdzv_env.push_back("MASTER_ADDR=" + host);
    rdzv_env.push_back("MASTER_PORT=" + std::to_string(port));
    if (run_id.empty()) run_id = "tcp";
  } else {
    fs::create_directories(o.rdzv, ec);
    if (ec) throw OptionError("{rdzv} ", ErrorKind::usage, str(o.rdzv, ": cannot create the folder (", ec.message(), ")"));
    rdzv_env.push_back("DL_RDZV_DIR=" + fs::absolute(o.rdzv).string());
    // Nodes must agree on the run id without talking: use the batch system's job id, else the
    // folder alone (use a fresh folder per job).
    if (run_id.empty()) run_id = std::getenv("SLURM_JOB_ID") ? std::string("slurm-") + std::getenv("SLURM_JOB_ID") : "shared";
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string threads = std::getenv("DL_NUM_THREADS") ? std::getenv("DL_NUM_THREADS")
                                                             : std::to_string(std::max(1, hw / o.nproc_per_node));

  install_interrupt_handlers();
  std::vector<std::unique_ptr<Rank>> ranks;
  auto cleanup_store = [&] {
    if (!temp_store.empty()) fs::remove_all(temp_store, ec);
  };
  try {
    for (int local = 0; local < o.nproc_per_node; ++local) {
      auto r = std::make_unique<Rank>();
      r->rank = o.node_rank * o.nproc_per_node + local;
      // A copy, not the launcher's own (a program that launches ranks and then goes on, like
      // dl-bench all).
      std::vector<std::string> sets = {"DL_RANK=" + std::to_string(r->rank),
                                       "DL_WORLD_SIZE=" + std::to_string(world),
                                       "DL_LOCAL_RANK=" + std::to_string(local),
                                       "DL_LOCAL_WORLD_SIZE=" + std::to_string(o.nproc_per_node),
                                       "DL_RUN_ID=" + run_id,
                                       "DL_LAUNCHER_PID=" + std::to_string(::getpid()),
                                       "DL_NUM_THREADS=" + threads};
      sets.insert(sets.end(), rdzv_env.begin(), rdzv_env.end());
      bp::environment env = child_environment(sets);
      r->out = std::make_unique<bp::ipstream>();
      r->err = std::make_unique<bp::ipstream>();
      // Own process group: a Ctrl-C at the terminal reaches the launcher only, which forwards it
      // once to each rank.
      r->child = bp::child(bp::exe = exe.string(), bp::args = o.args, env, bp::std_out > *r->out,
                           bp::std_err > *r->err, bp::std_in < bp::null,
                           bp::extend::on_exec_setup([](auto&) { ::setpgid(0, 0); }));
      r->out_reader = std::thread(forward_lines, std::ref(*r->out), r->rank, true);
      r->err_reader = std::thread(forward_lines, std::ref(*r->err), r->rank, false);
      ranks.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    for (auto& r : ranks) r->child.terminate();
    for (auto& r : ranks) {
      if (r->out_reader.joinable()) r->out_reader.join();
      if (r->err_reader.joinable()) r->err_reader.join();
    }
    cleanup_store();
    throw_runtime("cannot start the ranks: ", e.what());
  }

  int first_failure = -1;
  int forwarded_signal = 0;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  for (;;) {
    if (int sig = interrupt_signal(); sig != 0 && forwarded_signal == 0) {
      forwarded_signal = sig;
      for (auto& r : ranks)
        if (!r->exited) ::kill(r->child.id(), sig);
    }
    bool all_done = true;
    // The failure reported is the first seen; among ranks seen dead in the same pass, one killed
    // by a signal goes first: a rank whose peer was killed exits 1 on the broken connection
    // within milliseconds, and it is the kill, not that exit, that the user needs to hear of.
    const Rank* failed = nullptr;
    for (auto& r : ranks) {
      if (r->exited) continue;
      if (r->child.running(ec)) {
        all_done = false;
        continue;
      }
      r->exited = true;
      int status = r->child.native_exit_code();
      r->code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      if (r->code != 0 && !(forwarded_signal && r->code == 130) &&
          (!failed || (WIFSIGNALED(status) && failed->code <= 128)))
        failed = r.get();
    }
    if (failed && first_failure < 0) {
      first_failure = failed->rank;
      // Stop the others: SIGTERM now (they may be blocked in a collective with the dead rank),
      // SIGKILL after the grace period.
      for (auto& other : ranks)
        if (!other->exited) ::kill(other->child.id(), SIGTERM);
      stop_deadline = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(o.stop_grace_s * 1000));
    }
    if (all_done) break;
    if (std::chrono::steady_clock::now() > stop_deadline) {
      for (auto& r : ranks)
        if (!r->exited) ::kill(r->child.id(), SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& r : ranks) {
    if (r->out_reader.joinable()) r->out_reader.join();
    if (r->err_reader.joinable()) r->err_reader.join();
  }
  cleanup_store();

  if (first_failure >= 0) {
    int code = 0;
    for (auto& r : ranks)
      if (r->rank == first_failure) code = r->code;
    std::lock_guard<std::mutex> lock(g_out_mutex);
    std::fprintf(stderr, "dl-train: rank %d exited with %s; stopped the other %d rank(s)\n", first_failure,
                 status_text(code).c_str(), static_cast<int>(ranks.size()) - 1);
    return code == 2 || code == 3 || code == 130 ? code : 1;
  }
  for (auto& r : ranks)
    if (r->code == 130) return 130;  // interrupted (the signal arrived before they finished)
  return 0;
}

}  // namespace dl::dist
