// Two "nodes" in network namespaces this test creates, joined by a veth pair, each running
// dl-train --nnodes 2 --node-rank k: the job gives the single-process losses; a link cut mid-run
// ends every rank within [dist] timeout_s + 15 s with a message naming the collective and the
// peer, leaving no process behind; a link cut and restored before the timeout costs nothing.
// Needs root (CAP_NET_ADMIN); elsewhere each case says why it is skipped.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;

namespace {

// No compiler or dpkg probes for env.lock: they would only slow the runs down.

std::string ip_tool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (fs::exists(p)) return p;
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Two namespaces, node0 (10.231.0.1) and node1 (10.231.0.2), on one veth pair; removed on exit
// (deleting a namespace deletes its end of the pair). Names carry the pid: tests may run at once.
class TwoNodes {
 public:
  static std::unique_ptr<TwoNodes> create(std::string* why) {
    const std::string ip = ip_tool();
    if (ip.empty()) {
      *why = "no ip(8) (Debian's iproute2)";
      return nullptr;
    }
    auto n = std::unique_ptr<TwoNodes>(new TwoNodes(ip));
    RunResult r = n->ip({"netns", "add", n->ns_[0]});
    if (r.exit_code != 0) {
      *why = "`ip netns add` failed (needs root or CAP_SYS_ADMIN): " + r.err;
      return nullptr;
    }
    n->created_ = 1;
    std::vector<std::vector<std::string>> setup = {
        {"netns", "add", n->ns_[1]},
        {"link", "add", n->veth_[0], "type", "veth", "peer", "name", n->veth_[1]},
    };
    for (int k = 0; k < 2; ++k) {
      setup.push_back({"link", "set", n->veth_[k], "netns", n->ns_[k]});
      setup.push_back({"-n", n->ns_[k], "addr", "add", n->addr(k) + "/24", "dev", n->veth_[k]});
      setup.push_back({"-n", n->ns_[k], "link", "set", n->veth_[k], "up"});
      setup.push_back({"-n", n->ns_[k], "link", "set", "lo", "up"});
    }
    for (const auto& args : setup) {
      r = n->ip(args);
      if (r.exit_code != 0) {
        *why = "ip " + args[0] + " " + args[1] + " ... failed: " + r.err;
        return nullptr;
      }
      if (args[0] == "netns") n->created_ = 2;
    }
    return n;
  }
  ~TwoNodes() {
    for (int k = 0; k < created_; ++k) ip({"netns", "del", ns_[k]});
  }

  std::string addr(int node) const { return "10.231.0." + std::to_string(node + 1); }
  // Takes node 0's end of the link down or up: packets stop both ways, connections stay open.
  void link(bool up) { REQUIRE(ip({"-n", ns_[0], "link", "set", veth_[0], up ? "up" : "down"}).exit_code == 0); }

  // dl-train as node `node` of two, meeting at node 0's address.
  std::unique_ptr<Process> start(int node, int port, std::vector<std::string> args) {
    std::vector<std::string> a = {"netns", "exec", ns_[node], tool("dl-train")};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), {"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node", "1", "--rdzv",
                       addr(0) + ":" + std::to_string(port), "--set", "parallel.dp=2", "--set", "train.batch_size=2"});
    // No DL_GLOO_HOST: the host name resolves to loopback in both namespaces, so each rank must
    // find on its own the address that reaches node 0.
    return std::make_unique<Process>(ip_, a, std::vector<std::string>{kNoProbes});
  }

 private:
  explicit TwoNodes(std::string ip) : ip_(std::move(ip)) {
    const std::string tag = std::to_string(::getpid() % 100000);
    ns_[0] = "dlkit" + tag + "n0";
    ns_[1] = "dlkit" + tag + "n1";
    veth_[0] = "dlk" + tag + "a";  // interface names: at most 15 characters
    veth_[1] = "dlk" + tag + "b";
  }
  RunResult ip(const std::vector<std::string>& args) { return run(ip_, args, "", {}, 30); }

  std::string ip_;
  std::string ns_[2], veth_[2];
  int created_ = 0;  // namespaces to delete
};

// Processes whose command line mentions `needle` (a run folder): what a dead job left running.
std::vector<std::string> processes_mentioning(const std::string& needle) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::string cmd;
    try {
      cmd = read_file(e.path() / "cmdline");
    } catch (...) {
      continue;  // exited meanwhile
    }
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(needle) != std::string::npos) out.push_back(pid + ": " + cmd);
  }
  return out;
}

}  // namespace

TEST_CASE("two nodes in network namespaces: the single-process losses; a cut link ends every rank within "
          "timeout_s + 15 s naming the collective and the peer; a link restored in time costs nothing") {
  std::string why;
  auto nodes = TwoNodes::create(&why);
  if (!nodes) {
    std::printf("skipped: network namespaces: %s\n", why.c_str());
    return;
  }
  TempDir d("netns");
  write_file(d / "c.toml", kTinyGpt);
  // kTinyGpt for `steps` steps (by default its own schedule's 20); node 0 prints the metrics.
  auto node_args = [&](const std::string& run_dir, int node, const std::vector<std::string>& sets) {
    std::vector<std::string> a = {(d / "c.toml").string(), "--run-dir", run_dir, "-q", "--set", "train.steps=20"};
    if (node == 0) a.push_back("--json");
    a.insert(a.end(), sets.begin(), sets.end());
    return a;
  };
  RunResult single = run(tool("dl-train"), node_args((d / "single").string(), 0, {"--set", "train.batch_size=4"}), "",
                         {kNoProbes});
  REQUIRE_MESSAGE(single.exit_code == 0, single.err);
  const auto want = losses_of(single.out);
  REQUIRE(want.size() == 20);
  const int port = 20000 + ::getpid() % 20000;

  SUBCASE("the two-node run equals the single-process losses") {
    const std::string run_dir = (d / "two").string();
    auto n0 = nodes->start(0, port, node_args(run_dir, 0, {}));
    auto n1 = nodes->start(1, port, node_args(run_dir, 1, {}));
    const int c0 = n0->wait(120), c1 = n1->wait(120);
    INFO(n0->err() << n1->err());
    REQUIRE(c0 == 0);
    REQUIRE(c1 == 0);
    std::string out;
    for (const auto& l : n0->out_lines()) out += l + "\n";
    const auto got = losses_of(out);
    REQUIRE(got.size() == want.size());
    for (const auto& [step_, loss] : want) {
      const auto step = step_;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
      CAPTURE(step);
      CHECK(std::abs(got.at(step) - loss) <= 1e-5 * std::abs(loss));
    }
  }

  SUBCASE("a link cut mid-run ends every rank within timeout_s + 15 s, naming the collective and the peer") {
    const double timeout_s = 5;
    const std::string run_dir = (d / "cut").string();
    const std::vector<std::string> long_run = {"--set", "train.steps=1000000", "--set",
                                               "dist.timeout_s=" + std::to_string(static_cast<int>(timeout_s))};
    auto n0 = nodes->start(0, port + 1, node_args(run_dir, 0, long_run));
    auto n1 = nodes->start(1, port + 1, node_args(run_dir, 1, long_run));
    REQUIRE(n0->wait_for_line([](const std::string& l) { return l.find("\"step\":20,") != std::string::npos; }, 120));
    nodes->link(false);
    const auto cut = std::chrono::steady_clock::now();
    const int c0 = n0->wait(timeout_s + 60);
    const double t0 = seconds_since(cut);
    const int c1 = n1->wait(timeout_s + 60);
    const double t1 = seconds_since(cut);
    std::printf("network cut: node 0 exited %d after %.1f s, node 1 exited %d after %.1f s (timeout_s %.0f)\n", c0, t0,
                c1, t1, timeout_s);
    for (int node = 0; node < 2; ++node) {
      CAPTURE(node);
      const std::string err = node == 0 ? n0->err() : n1->err();
      INFO(err);
      CHECK((node == 0 ? c0 : c1) == 1);
      CHECK((node == 0 ? t0 : t1) <= timeout_s + 15);
      // A training step's collectives: whichever was in flight, by name, and the other rank.
      const bool collective = err.find("allreduce of") != std::string::npos ||
                              err.find("allgather of") != std::string::npos ||
                              err.find("barrier of") != std::string::npos ||
                              err.find("broadcast of") != std::string::npos;
      CHECK(collective);
      CHECK(err.find("waiting for peer world rank " + std::to_string(1 - node)) != std::string::npos);
    }
    CHECK(processes_mentioning(run_dir).empty());
  }

  SUBCASE("a link cut and restored within the timeout: the run finishes") {
    const std::string run_dir = (d / "blip").string();
    const std::vector<std::string> run_args = {"--set", "train.steps=600", "--set", "dist.timeout_s=20"};
    auto n0 = nodes->start(0, port + 2, node_args(run_dir, 0, run_args));
    auto n1 = nodes->start(1, port + 2, node_args(run_dir, 1, run_args));
    REQUIRE(n0->wait_for_line([](const std::string& l) { return l.find("\"step\":20,") != std::string::npos; }, 120));
    nodes->link(false);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    nodes->link(true);
    const auto restored = std::chrono::steady_clock::now();
    const int c0 = n0->wait(120), c1 = n1->wait(120);
    std::printf("network blip: 3 s cut; the run finished %.1f s after the link came back\n", seconds_since(restored));
    INFO(n0->err() << n1->err());
    CHECK(c0 == 0);
    CHECK(c1 == 0);
    std::string out;
    for (const auto& l : n0->out_lines()) out += l + "\n";
    const auto got = losses_of(out);
    CHECK(got.size() == 600);
    // The steps before the cut are the single-process ones.
    for (const auto& [step_, loss] : want) {
      const auto step = step_;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
      CAPTURE(step);
      CHECK(std::abs(got.at(step) - loss) <= 1e-5 * std::abs(loss));
    }
  }
}
