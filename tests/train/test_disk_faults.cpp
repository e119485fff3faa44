// Disk faults and signals at every write, fsync and rename of a dl-train run, injected through
// io/file_ops.hpp (DL_FAULT): the run exits 1 naming the file and the error (130 for SIGTERM),
// no published checkpoint is lost, every checkpoint left verifies, and --resume continues to the
// uninterrupted run's losses and final checkpoint, bit for bit.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "dl/checkpoint/format.hpp"
#include "support/support.hpp"
#include "support/tiny_gpt.hpp"
#include "train/run_files.hpp"

using namespace dl::test;

namespace {

// kTinyGpt with TensorBoard on and checkpoints kept; two steps are trained beforehand, then
// steps 3 and 4 under faults: checkpoint 3 is mid-run (a step follows it), checkpoint 4 is the
// final one.
const std::vector<std::string> kSets = {"--set", "log.tensorboard=true", "--set", "train.checkpoint_every=3",
                                        "--set", "train.keep_checkpoints=10", "--set", "train.batch_size=4"};
constexpr int kSteps = 4;
constexpr size_t kParallel = 4;  // runs at once: they mostly wait on fsync
// No compiler or dpkg on PATH: env.lock's probes would cost most of a tiny run's time, and the
// environment record is not what is tested here.

// One call of the traced run: its op, the path relative to the run folder ("" for the folder
// itself), and which matching call it is.
struct Call {
  size_t index = 0;  // position in the trace
  std::string op, rel;
  long nth = 0;
};

const std::string kEvents = "events.out.tfevents.";

bool is_events(const std::string& rel) { return rel.rfind(kEvents, 0) == 0; }

// The calls of a traced run, numbered per (op, file) as DL_FAULT counts them. The event file's
// name carries the start time, so it is matched by prefix; env.lock is left out: it is written by
// a background thread and its failure only warns (the environment record is best effort).
std::vector<Call> read_trace(const fs::path& trace, const fs::path& run_dir) {
  std::vector<Call> calls;
  std::map<std::pair<std::string, std::string>, long> seen;
  std::istringstream in(read_file(trace));
  const std::string prefix = run_dir.string() + "/";
  std::string line;
  for (size_t i = 0; std::getline(in, line); ++i) {
    const size_t sp = line.find(' ');
    std::string op = line.substr(0, sp), path = line.substr(sp + 1), rel;
    if (path == run_dir.string()) rel = "";
    else if (path.rfind(prefix, 0) == 0) rel = path.substr(prefix.size());
    else FAIL("a traced call outside the run folder: " << line);
    if (rel == "env.lock") continue;
    if (is_events(rel)) {
      if (op == "open") continue;  // the name may be tried twice within one second
      rel = kEvents + "*";
    }
    calls.push_back({i, op, rel, ++seen[{op, rel}]});
  }
  return calls;
}

// What the matrix's rows call a file.
std::string kind_of(const std::string& rel) {
  if (rel.empty()) return "run folder";
  if (is_events(rel)) return "TensorBoard events";
  if (rel.rfind("checkpoints", 0) != 0) return rel;
  const size_t slash = rel.find('/', std::string("checkpoints/").size());
  if (slash == std::string::npos)
    return rel.rfind("checkpoints/step_", 0) == 0 ? "checkpoint folder (published)" : "checkpoint temp folder";
  return "checkpoint " + rel.substr(slash + 1);
}

struct Case {
  Call call;
  std::string err;  // DL_FAULT's err=
};

std::string describe(const Case& k) {
  return "err=" + k.err + " at " + k.call.op + " #" + std::to_string(k.call.nth) + " of '" + k.call.rel + "'";
}

// A dl-train command line and its extra environment.
struct Job {
  std::vector<std::string> args, env;
};

// Runs the jobs, kParallel at a time; their exit codes and stderr, in order.
std::vector<RunResult> run_all(const std::vector<Job>& jobs) {
  std::vector<RunResult> out(jobs.size());
  for (size_t at = 0; at < jobs.size(); at += kParallel) {
    std::vector<std::unique_ptr<Process>> running;
    for (size_t j = at; j < std::min(jobs.size(), at + kParallel); ++j)
      running.push_back(std::make_unique<Process>(tool("dl-train"), jobs[j].args, jobs[j].env));
    for (size_t k = 0; k < running.size(); ++k) {
      out[at + k].exit_code = running[k]->wait(120);
      out[at + k].err = running[k]->err();
    }
  }
  return out;
}

}  // namespace

TEST_CASE("ENOSPC, EIO and short writes at every write and fsync, SIGTERM and SIGKILL at every step of a "
          "checkpoint's publication: exit 1 naming file and error, no checkpoint lost, resume bit for bit") {
  TempDir d("faults");
  write_file(d / "c.toml", kTinyGpt);
  auto train_args = [&](std::vector<std::string> args) {
    args.insert(args.begin(), (d / "c.toml").string());
    args.insert(args.end(), kSets.begin(), kSets.end());
    return args;
  };
  RunResult full = run(tool("dl-train"), train_args({"--run-dir", (d / "full").string(), "--steps", std::to_string(kSteps), "-q"}), "",
                       {kNoProbes});
  REQUIRE_MESSAGE(full.exit_code == 0, full.err);
  const auto want = losses_of(read_file(d / "full" / "metrics.jsonl"));
  REQUIRE(want.size() == kSteps);
  const fs::path want_ckpt = d / "full" / "checkpoints" / step_name(kSteps);

  // The state every case starts from: steps 1-2 and their checkpoint.
  const fs::path base = d / "base";
  RunResult first = run(tool("dl-train"), train_args({"--run-dir", base.string(), "--steps", "2", "-q"}), "", {kNoProbes});
  REQUIRE_MESSAGE(first.exit_code == 0, first.err);

  // Count the calls: the same resume as the cases run, traced.
  const fs::path traced = d / "traced";
  fs::copy(base, traced, fs::copy_options::recursive);
  RunResult t = run(tool("dl-train"), {"--resume", traced.string(), "--steps", std::to_string(kSteps), "-q"}, "",
                    {kNoProbes, "DL_FAULT_TRACE=" + (d / "trace.txt").string()});
  REQUIRE_MESSAGE(t.exit_code == 0, t.err);
  CHECK(losses_of(read_file(traced / "metrics.jsonl")) == want);
  const std::vector<Call> calls = read_trace(d / "trace.txt", traced);
  // Steps whose checkpoint folder was renamed into place before each trace position.
  std::map<size_t, int64_t> publish_at;
  for (const auto& c : calls)
    if (c.op == "rename" && c.rel.rfind("checkpoints/step_", 0) == 0)
      publish_at[c.index] = std::stoll(c.rel.substr(std::string("checkpoints/step_").size()));

  // What no injected error can show (a process dying keeps the page cache; a power loss does
  // not): every atomic file is synced before its rename, and every file of a checkpoint before
  // the folder's rename.
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& r = calls[i];
    if (r.op != "rename") continue;
    CAPTURE(r.rel);
    const bool folder = r.rel.rfind("checkpoints/step_", 0) == 0;
    const std::string temp = folder ? "checkpoints/." + r.rel.substr(std::string("checkpoints/").size()) + ".tmp/" : "";
    std::set<std::string> written, synced;
    for (size_t k = 0; k < i; ++k) {
      const Call& c = calls[k];
      const bool mine = folder ? c.rel.rfind(temp, 0) == 0 : c.rel == r.rel;
      if (!mine) continue;
      if (c.op == "write") written.insert(c.rel);
      if (c.op == "fsync") synced.insert(c.rel);
      if (c.op == "rename" && !folder) written.clear(), synced.clear();  // an earlier publication of it
    }
    REQUIRE(!written.empty());
    for (const auto& f : written) CHECK_MESSAGE(synced.count(f), f << " is renamed into place before it is synced");
  }

  std::vector<Case> cases;
  for (const auto& c : calls) {
    if (c.op == "write")
      for (const char* e : {"ENOSPC", "EIO", "short"}) cases.push_back(Case{c, e});
    if (c.op == "fsync")
      for (const char* e : {"ENOSPC", "EIO"}) cases.push_back({c, e});
    if (c.rel.rfind("checkpoints", 0) == 0)
      for (const char* e : {"TERM", "KILL"}) cases.push_back({c, e});
  }
  REQUIRE(cases.size() > 100);

  std::vector<Job> jobs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path run_dir = d / ("case" + std::to_string(i));
    fs::copy(base, run_dir, fs::copy_options::recursive);
    const Call& c = cases[i].call;
    const std::string file = c.rel.empty() ? run_dir.string() : (run_dir / c.rel).string();
    jobs.push_back({{"--resume", run_dir.string(), "--steps", std::to_string(kSteps), "-q"},
                    {kNoProbes, "DL_FAULT=op=" + c.op + ",file=" + file + ",nth=" + std::to_string(c.nth) + ",err=" + cases[i].err}});
  }
  const std::vector<RunResult> outcome = run_all(jobs);

  // Each case: the exit, the message, the checkpoints left; then its resume.
  std::map<std::string, std::map<std::string, int>> matrix;  // file kind -> fault -> cases
  size_t lost_total = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    const RunResult& j = outcome[i];
    const fs::path run_dir = d / ("case" + std::to_string(i));
    INFO(describe(k));
    INFO(j.err);
    if (k.err == "KILL") {
      CHECK(j.exit_code == 128 + SIGKILL);
    } else if (k.err == "TERM") {
      // SIGTERM only asks: the checkpoint being written completes; after checkpoint 3 one more
      // step runs and is checkpointed (exit 130), after the final one the run simply ends.
      const bool final_ckpt = k.call.rel.find(step_name(kSteps)) != std::string::npos;
      CHECK(j.exit_code == (final_ckpt ? 0 : 130));
    } else {
      CHECK(j.exit_code == 1);
      const std::string reason = k.err == "EIO" ? "Input/output error" : "No space left on device";
      CHECK(j.err.find(reason) != std::string::npos);
      const std::string named = is_events(k.call.rel) ? kEvents
                                : k.call.rel.empty()  ? run_dir.string()
                                                      : (run_dir / k.call.rel).string();
      CHECK(j.err.find(named) != std::string::npos);
    }
    // No checkpoint published before the fault is lost, and every one left verifies.
    std::set<int64_t> present;
    for (int64_t s : checkpoint_steps(run_dir)) {
      present.insert(s);
      CHECK(dl::verify_checkpoint(run_dir / "checkpoints" / step_name(s)) == "");
    }
    size_t lost = present.count(2) ? 0 : 1;
    for (const auto& [at, step] : publish_at)
      if (at < k.call.index && !present.count(step)) ++lost;
    CHECK(lost == 0);
    lost_total += lost;
    ++matrix[k.call.op + " " + kind_of(k.call.rel)][k.err];
  }

  std::vector<Job> resumes;
  for (size_t i = 0; i < cases.size(); ++i)
    resumes.push_back({{"--resume", (d / ("case" + std::to_string(i))).string(), "--steps", std::to_string(kSteps), "-q"},
                       {kNoProbes}});
  const std::vector<RunResult> resumed = run_all(resumes);
  for (size_t r = 0; r < resumes.size(); ++r) {
    const Case& k = cases[r];
    const fs::path run_dir = d / ("case" + std::to_string(r));
    INFO(describe(k));
    INFO(resumed[r].err);
    REQUIRE(resumed[r].exit_code == 0);
    // Every step once, each loss the uninterrupted run's bits; the final checkpoint the same bytes.
    CHECK(losses_of(read_file(run_dir / "metrics.jsonl")) == want);
    size_t loss_lines = 0;
    for (const auto& l : lines(read_file(run_dir / "metrics.jsonl"))) loss_lines += l.find("\"loss\":") != std::string::npos;
    CHECK(loss_lines == kSteps);
    const fs::path ckpt = run_dir / "checkpoints" / step_name(kSteps);
    for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
      CAPTURE(f);
      CHECK(read_file(ckpt / f) == read_file(want_ckpt / f));
    }
  }

  // The matrix docs/RELIABILITY.md shows: calls faulted per file and fault.
  std::fprintf(stderr, "disk faults: %zu cases over %zu calls, each resumed; %zu checkpoints lost\n", cases.size(),
               calls.size(), lost_total);
  for (const auto& [row, cols] : matrix) {
    std::string line = "  " + row + ":";
    for (const auto& [fault, n] : cols) line += " " + fault + "=" + std::to_string(n);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}
