// The launchers users run, end to end: Open MPI's `mpirun -np 2` and Slurm's `srun -n 2` (a
// one-node Slurm this test starts: munged, slurmctld and slurmd as root, its own ports, socket
// and spool under a temp folder) each give the single-process losses; under Slurm dl-train names
// its run directory after the job. Skipped, saying why, where the launcher is missing or its
// daemons cannot start (not root, no munge).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;

namespace {


const std::vector<std::string> kDp2 = {"--set", "parallel.dp=2", "--set", "train.batch_size=4", "--json", "-q"};

std::string first_existing(std::initializer_list<const char*> paths) {
  for (const char* p : paths)
    if (fs::exists(p)) return p;
  return "";
}

// kTinyGpt's losses from one process at batch 8 (the ranks' 2 x 4).
std::map<int64_t, double> single_process_losses(const TempDir& d) {
  RunResult r = run(tool("dl-train"), {(d / "c.toml").string(), "--run-dir", (d / "single").string(), "--json", "-q"},
                    "", {kNoProbes});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return losses_of(r.out);
}

void check_same_losses(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [step_, loss] : want) {
    const auto step = step_;  // clang 14 cannot capture a structured binding in CAPTURE's lambda
    CAPTURE(step);
    CHECK(std::abs(got.at(step) - loss) <= 1e-5 * std::abs(loss));
  }
}

// Whether a process runs (a daemon nobody reaps stays a zombie after it exits).
bool running(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  return f >> pid_field >> comm >> state && state != "Z";
}

// A one-node Slurm cluster for the length of a test. Every path and port is its own, so it
// neither needs nor touches a system Slurm or munge.
class OneNodeSlurm {
 public:
  static std::unique_ptr<OneNodeSlurm> start(const fs::path& dir, std::string* why) {
    const std::string munged = first_existing({"/usr/sbin/munged", "/sbin/munged"});
    const std::string ctld = first_existing({"/usr/sbin/slurmctld", "/sbin/slurmctld"});
    const std::string slurmd = first_existing({"/usr/sbin/slurmd", "/sbin/slurmd"});
    const std::string srun = first_existing({"/usr/bin/srun", "/bin/srun"});
    if (munged.empty() || ctld.empty() || slurmd.empty() || srun.empty()) {
      *why = "Slurm or munge is not installed (Debian's slurm-wlm and munge; scripts/install-deps.sh)";
      return nullptr;
    }
    if (::geteuid() != 0) {
      *why = "slurmd and munged run as root here (SlurmUser=root); this test is not root";
      return nullptr;
    }
    auto s = std::unique_ptr<OneNodeSlurm>(new OneNodeSlurm(dir, srun));
    fs::create_directories(dir / "state");
    fs::create_directories(dir / "spool");
    {
      std::mt19937_64 rng(std::random_device{}());
      std::string key;
      for (int i = 0; i < 1024; ++i) key.push_back(static_cast<char>(rng() & 0xFF));
      write_file(dir / "munge.key", key);
      ::chmod((dir / "munge.key").c_str(), 0600);
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const int port = 17000 + 2 * (::getpid() % 4000);
    const std::string p = dir.string();
    write_file(s->conf_, "ClusterName=dlkit\nSlurmctldHost=" + std::string(host) +
                             "\nSlurmctldPort=" + std::to_string(port) + "\nSlurmdPort=" + std::to_string(port + 1) +
                             "\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n"
                             "AuthInfo=socket=" + p + "/munge.sock\n"
                             "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
                             "StateSaveLocation=" + p + "/state\nSlurmdSpoolDir=" + p + "/spool\n"
                             "SlurmctldPidFile=" + p + "/slurmctld.pid\nSlurmdPidFile=" + p + "/slurmd.pid\n"
                             "SlurmctldLogFile=" + p + "/slurmctld.log\nSlurmdLogFile=" + p + "/slurmd.log\n"
                             "ReturnToService=2\nSchedulerType=sched/builtin\nSelectType=select/linear\n"
                             "NodeName=" + std::string(host) + " CPUs=2 State=UNKNOWN\n"
                             "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n");
    RunResult r = run(munged, {"--force", "--socket=" + p + "/munge.sock", "--key-file=" + p + "/munge.key",
                               "--pid-file=" + p + "/munged.pid", "--log-file=" + p + "/munged.log",
                               "--seed-file=" + p + "/munge.seed"},
                      "", {}, 30);
    if (r.exit_code != 0) {
      *why = "munged did not start: " + r.err;
      return nullptr;
    }
    s->pid_files_.push_back(dir / "munged.pid");
    for (const auto& [daemon, pid_file] : {std::pair{ctld, "slurmctld.pid"}, std::pair{slurmd, "slurmd.pid"}}) {
      r = run(daemon, {"-f", s->conf_.string()}, "", {}, 30);
      if (r.exit_code != 0) {
        *why = daemon + " did not start: " + r.err;
        return nullptr;
      }
      s->pid_files_.push_back(dir / pid_file);
    }
    // The node registers within a second or two; wait for it to take jobs.
    const std::string sinfo = first_existing({"/usr/bin/sinfo", "/bin/sinfo"});
    for (int i = 0; i < 300; ++i) {
      r = run(sinfo, {"-h", "-o", "%t"}, "", {"SLURM_CONF=" + s->conf_.string()}, 30);
      if (r.exit_code == 0 && r.out.find("idle") != std::string::npos) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    *why = "the Slurm node did not come up within 30 s: " + r.out + r.err + read_file(dir / "slurmd.log");
    return nullptr;
  }

  ~OneNodeSlurm() {
    // Only the daemons this object started, by the pids they wrote.
    for (auto it = pid_files_.rbegin(); it != pid_files_.rend(); ++it) {
      std::ifstream f(*it);
      pid_t pid = 0;
      if (f >> pid && pid > 1) {
        ::kill(pid, SIGTERM);
        for (int i = 0; i < 100 && running(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  // srun ARGS in `cwd` with this cluster's config.
  RunResult srun(const std::vector<std::string>& args, const fs::path& cwd) {
    std::vector<std::string> a = {"--chdir=" + cwd.string(), "--export=ALL," + kNoProbes};
    a.insert(a.end(), args.begin(), args.end());
    return run(srun_, a, "", {"SLURM_CONF=" + conf_.string()}, 120);
  }

 private:
  OneNodeSlurm(const fs::path& dir, std::string srun) : conf_(dir / "slurm.conf"), srun_(std::move(srun)) {}
  fs::path conf_;
  std::string srun_;
  std::vector<fs::path> pid_files_;
};

}  // namespace

TEST_CASE("mpirun -np 2 dl-train gives the single-process losses") {
  const std::string mpirun = first_existing({"/usr/bin/mpirun", "/bin/mpirun"});
  if (mpirun.empty()) {
    std::printf("skipped: mpirun: Open MPI is not installed (Debian's openmpi-bin; scripts/install-deps.sh)\n");
    return;
  }
  const std::vector<std::string> np2 = {"--allow-run-as-root", "--oversubscribe", "-np", "2"};
  std::vector<std::string> probe = np2;
  probe.push_back(first_existing({"/bin/true", "/usr/bin/true"}));
  if (RunResult p = run(mpirun, probe, "", {}, 60); p.exit_code != 0) {
    std::printf("skipped: mpirun cannot start 2 processes here: %s\n", p.err.c_str());
    return;
  }
  TempDir d("mpirun");
  write_file(d / "c.toml", kTinyGpt);
  const auto want = single_process_losses(d);
  // Open MPI gives no rendezvous address; on one node dl-train meets on this host. A port of its
  // own rather than the default 29500, so that test runs at the same time do not meet.
  std::vector<std::string> args = np2;
  args.insert(args.end(), {"-x", "MASTER_PORT=" + std::to_string(20000 + ::getpid() % 20000), "-x", kNoProbes,
                           tool("dl-train"), (d / "c.toml").string(), "--run-dir", (d / "run").string()});
  args.insert(args.end(), kDp2.begin(), kDp2.end());
  RunResult r = run(mpirun, args, "", {}, 120);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  check_same_losses(losses_of(r.out), want);
}

TEST_CASE("srun -n 2 dl-train under a one-node Slurm gives the single-process losses in runs/<config>-slurm-<job>") {
  TempDir d("slurm");
  std::string why;
  auto slurm = OneNodeSlurm::start(d / "slurm", &why);
  if (!slurm) {
    std::printf("skipped: Slurm: %s\n", why.c_str());
    return;
  }
  write_file(d / "c.toml", kTinyGpt);
  const auto want = single_process_losses(d);
  // No --run-dir: every rank derives runs/c-slurm-<job>.<step> from the job.
  std::vector<std::string> args = {"-n", "2", tool("dl-train"), (d / "c.toml").string()};
  args.insert(args.end(), kDp2.begin(), kDp2.end());
  RunResult r = slurm->srun(args, d.path());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  check_same_losses(losses_of(r.out), want);
  std::vector<std::string> runs;
  for (const auto& e : fs::directory_iterator(d / "runs")) runs.push_back(e.path().filename().string());
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].rfind("c-slurm-", 0) == 0);
  CHECK(runs[0].find('.') != std::string::npos);  // job.step
  CHECK(losses_of(read_file(d / "runs" / runs[0] / "metrics.jsonl")) == losses_of(r.out));
}
