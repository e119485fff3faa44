#include "dl/sweep/sweep.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dl/cli/app.hpp"
#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/limits.hpp"
#include "dl/core/option_error.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/child_environment.hpp"
#include "dl/io/dir_lock.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/sweep/asha.hpp"
#include "dl/sweep/sampler.hpp"

namespace dl::sweep {

namespace fs = std::filesystem;
namespace bp = boost::process;
using nlohmann::json;

namespace {

constexpr const char* kStateFile = "sweep.json";

std::vector<int64_t> rungs_of(const SweepSpec& s) { return s.asha ? s.asha->rungs() : std::vector<int64_t>{s.base_steps}; }

// Non-finite metrics (a diverged trial) are stored as null: JSON has no Inf/NaN.
json to_json(const TrialRecord& t, const SweepSpec& s) {
  json params = json::object();
  for (size_t i = 0; i < s.params.size(); ++i) params[s.params[i].key] = t.values[i];
  json results = json::array();
  for (double r : t.results) results.push_back(std::isfinite(r) ? json(r) : json(nullptr));
  return {{"id", t.id},         {"params", params},   {"results", results}, {"ended", t.ended},
          {"status", std::string(choice_name(t.status))}, {"reason", t.reason}, {"steps", t.steps},   {"seconds", t.seconds}};
}

TrialRecord from_json(const json& j, const SweepSpec& s) {
  TrialRecord t;
  t.id = j.at("id").get<int64_t>();
  for (const auto& p : s.params) t.values.push_back(j.at("params").at(p.key).get<std::string>());
  for (const auto& r : j.at("results"))
    t.results.push_back(r.is_null() ? std::numeric_limits<double>::quiet_NaN() : r.get<double>());
  t.ended = j.at("ended").get<bool>();
  t.status = choice_from_name<TrialStatus>(j.at("status").get<std::string>(), "trial status");
  t.reason = j.at("reason").get<std::string>();
  t.steps = j.at("steps").get<int64_t>();
  t.seconds = j.at("seconds").get<double>();
  return t;
}

struct State {
  fs::path dir;
  fs::path sweep_file;
  std::string sweep_text;
  SweepSpec spec;
  std::vector<TrialRecord> trials;  // started trials, by id (ids are 0..size-1)

  void save() const {
    json j{{"version", 1}, {"sweep_file", fs::absolute(sweep_file).string()}, {"sweep_text", sweep_text},
           {"steps", spec.steps_override}};
    json ts = json::array();
    for (const auto& t : trials) ts.push_back(to_json(t, spec));
    j["trials"] = ts;
    write_file_atomic(dir / kStateFile, j.dump(1) + "\n");
  }
};

void require_sweep_dir(const fs::path& dir) {
  if (!fs::exists(dir / kStateFile)) throw_usage(dir.string(), " is not a sweep directory (no ", kStateFile, ")");
}

State load_state(const fs::path& dir) {
  const fs::path f = dir / kStateFile;
  require_sweep_dir(dir);
  json j = read_json_file(f);
  State s;
  s.dir = dir;
  try {
    s.sweep_file = j.at("sweep_file").get<std::string>();
    s.sweep_text = j.at("sweep_text").get<std::string>();
    // "steps" is absent from the state files of sweeps started before --steps existed.
    s.spec = load_sweep(s.sweep_file, s.sweep_text, j.value("steps", int64_t{0}));
    for (const auto& t : j.at("trials")) s.trials.push_back(from_json(t, s.spec));
  } catch (const json::exception& e) {
    throw_usage(f.string(), ": not a sweep state file this version writes (", e.what(), ")");
  }
  return s;
}

std::string read_file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last line of a trial's log that says what went wrong ("dl-train: error: ...").
std::string failure_reason(const fs::path& log, int code) {
  std::istringstream in(read_file_text(log));
  std::string line, last_error, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.find("error:") != std::string::npos) last_error = line;
  }
  std::string why = !last_error.empty() ? last_error : last;
  if (code > 128) why = str("killed by signal ", code - 128, why.empty() ? "" : ": " + why);
  else why = str("exit ", code, why.empty() ? "" : ": " + why);
  return why;
}

bool has_checkpoint(const fs::path& run) {
  std::error_code ec;
  if (!fs::is_directory(run / "checkpoints", ec)) return false;
  for (const auto& e : fs::directory_iterator(run / "checkpoints", ec))
    if (e.path().filename().string().rfind("step_", 0) == 0) return true;
  return false;
}

// The metric a trial's run reports at `steps`: the last record carrying it at or before that step.
std::optional<double> metric_at(const fs::path& run, const std::string& metric, int64_t steps, int64_t* last_step) {
  const fs::path f = run / "metrics.jsonl";
  if (!fs::exists(f)) return std::nullopt;
  std::optional<double> v;
  for (const auto& r : read_jsonl(f)) {
    const int64_t s = r.value("step", int64_t{0});
    if (last_step) *last_step = std::max(*last_step, s);
    if (s <= steps && r.contains(metric) && r[metric].is_number()) v = r[metric].get<double>();
  }
  return v;
}

struct Child {
  int64_t trial = 0;
  int rung = 0;
  bp::child process;
  double started = 0;
  std::FILE* log = nullptr;
};

class Runner {
 public:
  Runner(State& st, const SweepOptions& o) : s_(st), o_(o), sampler_(st.spec), rungs_(rungs_of(st.spec)) {
    jobs_ = o.jobs > 0 ? o.jobs : s_.spec.jobs;
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads_ = std::max<int64_t>(1, hw / (jobs_ * s_.spec.nproc_per_node));
  }

  bool run() {
    install_interrupt_handlers("; its trials are killed without a checkpoint (continue with dl-train sweep --resume " +
                               s_.dir.string() + ")");
    ProgressBar bar(s_.spec.trials, o_.progress);
    bar_ = &bar;
    bool forwarded = false;
    for (;;) {
      if (interrupt_signal() && !forwarded) {
        forwarded = true;
        for (auto& c : children_) ::kill(c->process.id(), SIGINT);
      }
      reap(forwarded);
      if (forwarded) {
        if (children_.empty()) break;
      } else {
        launch();
        if (children_.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    bar.finish();
    bar_ = nullptr;
    if (forwarded) return false;
    for (const auto& t : s_.trials)
      DL_CHECK(t.ended || t.status == TrialStatus::completed || t.status == TrialStatus::stopped, "trial ", t.id, " is ",
               choice_name(t.status),
               " at the end of the sweep");
    DL_CHECK(static_cast<int64_t>(s_.trials.size()) == s_.spec.trials, "the sweep ended with ", s_.trials.size(),
             " of ", s_.spec.trials, " trials started");
    return true;
  }

 private:
  std::vector<TrialProgress> progress() const {
    std::vector<TrialProgress> p(static_cast<size_t>(s_.spec.trials));
    for (const auto& t : s_.trials) p[static_cast<size_t>(t.id)] = TrialProgress{t.results, t.ended};
    return p;
  }

  // Statuses follow the decisions: a trial at its target rung waits (paused) or is done.
  void settle() {
    const AshaDecision d = asha_decide(progress(), static_cast<int>(rungs_.size()), s_.spec.asha ? s_.spec.asha->eta : 2,
                                       s_.spec.goal);
    for (auto& t : s_.trials) {
      if (t.status == TrialStatus::running || t.ended) continue;
      const auto i = static_cast<size_t>(t.id);
      const int reached = static_cast<int>(t.results.size()) - 1;
      if (d.stopped[i]) t.status = reached == static_cast<int>(rungs_.size()) - 1 ? TrialStatus::completed : TrialStatus::stopped;
      else if (reached == d.target[i]) t.status = TrialStatus::paused;
      else if (t.status != TrialStatus::interrupted) t.status = TrialStatus::ready;
    }
    decision_ = d;
  }

  bool running(int64_t id) const {
    for (const auto& c : children_)
      if (c->trial == id) return true;
    return false;
  }

  // Observations the sampler may use for trial `id`, or false while one of them is unknown.
  bool history_for(int64_t id, std::vector<Observation>* out) const {
    const int64_t n = sampler_.visible(id);
    for (int64_t j = 0; j < n; ++j) {
      if (j >= static_cast<int64_t>(s_.trials.size())) return false;
      const TrialRecord& t = s_.trials[static_cast<size_t>(j)];
      // With asha every trial reports rung 0 (its first result); without, the final one.
      if (t.results.empty()) {
        if (t.ended) continue;  // failed: no metric
        return false;
      }
      out->push_back({t.values, t.results.front()});
    }
    return true;
  }

  void launch() {
    settle();
    while (static_cast<int64_t>(children_.size()) < jobs_) {
      // Trials already started that have a rung to train to, lowest id first; then a new trial.
      TrialRecord* next = nullptr;
      for (auto& t : s_.trials)
        if (!t.ended && !running(t.id) && static_cast<int>(t.results.size()) <= decision_.target[static_cast<size_t>(t.id)]) {
          next = &t;
          break;
        }
      if (!next) {
        const auto id = static_cast<int64_t>(s_.trials.size());
        std::vector<Observation> history;
        if (id >= s_.spec.trials || !history_for(id, &history)) return;
        TrialRecord t;
        t.id = id;
        t.values = sampler_.suggest(id, history);
        s_.trials.push_back(t);
        next = &s_.trials.back();
      }
      start(*next, decision_.target[static_cast<size_t>(next->id)]);
    }
  }

  std::vector<std::string> overrides(const TrialRecord& t) const {
    std::vector<std::string> a;
    for (size_t i = 0; i < s_.spec.params.size(); ++i) a.insert(a.end(), {"--set", s_.spec.params[i].key + "=" + t.values[i]});
    // The learning-rate schedule must not depend on where a trial is stopped: with asha it runs
    // over max_steps whatever rung the trial trains to.
    if (s_.spec.asha && !s_.spec.base_decay_steps_set)
      a.insert(a.end(), {"--set", "schedule.decay_steps=" + std::to_string(s_.spec.asha->max_steps)});
    return a;
  }

  void start(TrialRecord& t, int rung) {
    const fs::path run = trial_dir(s_.dir, t.id);
    std::vector<std::string> args;
    if (has_checkpoint(run)) {
      args = {"--resume", run.string()};
    } else {
      fs::remove_all(run);  // started before but killed before its first checkpoint: start again
      args = {s_.spec.base_config.string(), "--run-dir", run.string()};
      const auto o = overrides(t);
      args.insert(args.end(), o.begin(), o.end());
    }
    args.insert(args.end(), {"--steps", std::to_string(rungs_[static_cast<size_t>(rung)])});
    if (s_.spec.nproc_per_node > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(s_.spec.nproc_per_node)});
    t.status = TrialStatus::running;
    s_.save();

    auto c = std::make_unique<Child>();
    c->trial = t.id;
    c->rung = rung;
    const fs::path log = s_.dir / "logs" / (run.filename().string() + ".log");
    fs::create_directories(log.parent_path());
    c->log = std::fopen(log.c_str(), "a");
    if (!c->log) throw_runtime("cannot open ", log.string(), " for the trial's log");
    std::vector<std::string> sets;
    if (!std::getenv("DL_NUM_THREADS")) sets.push_back("DL_NUM_THREADS=" + std::to_string(threads_));
    bp::environment env = child_environment(sets);
    const pid_t self = ::getpid();
    c->started = monotonic_seconds();
    try {
      // Own process group: a Ctrl-C at the terminal reaches the sweep, which forwards it once.
      // Parent-death signal: a trial never outlives a killed sweep (resume restarts it).
      c->process = bp::child(bp::exe = o_.trainer.string(), bp::args = args, env, bp::std_out > c->log,
                             bp::std_err > c->log, bp::std_in < bp::null,
                             bp::extend::on_exec_setup([self](auto&) {
                               ::setpgid(0, 0);
                               ::prctl(PR_SET_PDEATHSIG, SIGKILL);
                               if (::getppid() != self) ::_exit(1);
                             }));
    } catch (const std::exception& e) {
      std::fclose(c->log);
      throw_runtime("cannot start trial ", t.id, " (", o_.trainer.string(), "): ", e.what());
    }
    children_.push_back(std::move(c));
    show();
  }

  void reap(bool interrupted) {
    bool any = false;
    for (auto it = children_.begin(); it != children_.end();) {
      Child& c = **it;
      std::error_code ec;
      if (c.process.running(ec)) {
        ++it;
        continue;
      }
      const int status = c.process.native_exit_code();
      const int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      std::fclose(c.log);
      TrialRecord& t = s_.trials[static_cast<size_t>(c.trial)];
      t.seconds += monotonic_seconds() - c.started;
      finish(t, c.rung, code, interrupted);
      it = children_.erase(it);
      any = true;
    }
    if (any) {
      s_.save();
      show();
    }
  }

  void finish(TrialRecord& t, int rung, int code, bool interrupted) {
    const fs::path run = trial_dir(s_.dir, t.id);
    const int64_t steps = rungs_[static_cast<size_t>(rung)];
    int64_t last = 0;
    const std::string& m = s_.spec.metric;
    if (code == 0) {
      auto v = metric_at(run, m, steps, &last);
      if (!v) {
        t.ended = true, t.status = TrialStatus::failed, t.reason = str("the run reported no ", m, " by step ", steps);
      } else {
        t.results.resize(static_cast<size_t>(rung));
        t.results.push_back(*v);
        t.steps = steps;
        t.status = TrialStatus::done;
        log(str("trial ", t.id, ": ", m, " ", format_fixed(*v, 4), " at step ", steps));
      }
    } else if (code == kExitInterrupted && interrupted) {
      (void)metric_at(run, m, steps, &last);
      t.steps = last;
      t.status = TrialStatus::interrupted;
    } else {
      (void)metric_at(run, m, steps, &last);
      t.steps = last;
      t.ended = true;
      t.reason = failure_reason(s_.dir / "logs" / (run.filename().string() + ".log"), code);
      if (code == kExitDiverged) {
        // A diverged trial ranks below every result at the rung it was training to.
        t.results.resize(static_cast<size_t>(rung));
        t.results.push_back(std::numeric_limits<double>::quiet_NaN());
        t.status = TrialStatus::diverged;
      } else {
        t.status = TrialStatus::failed;
      }
      log(str("trial ", t.id, " ", choice_name(t.status), ": ", t.reason));
    }
    if (!interrupted) settle();
  }

  void log(const std::string& line) {
    if (o_.quiet) return;
    if (bar_ && bar_->enabled()) bar_->finish();
    log_info(line);
  }

  void show() {
    if (!bar_ || !bar_->enabled()) return;
    int64_t done = 0, stopped = 0;
    int best = -1;
    for (const auto& t : s_.trials) {
      if (t.status == TrialStatus::completed || t.status == TrialStatus::stopped || t.ended) ++done;
      if (t.status == TrialStatus::stopped) ++stopped;
      if (t.status == TrialStatus::completed && !t.results.empty() &&
          (best < 0 || s_.spec.better(t.results.back(), s_.trials[static_cast<size_t>(best)].results.back())))
        best = static_cast<int>(t.id);
    }
    std::string status = str(done, "/", s_.spec.trials, " done, ", children_.size(), " running, ", stopped, " stopped early");
    if (best >= 0)
      status += str(", best ", s_.spec.metric, " ", format_fixed(s_.trials[static_cast<size_t>(best)].results.back(), 4),
                    " (trial ", best, ")");
    bar_->update(done, status);
  }

  State& s_;
  const SweepOptions& o_;
  Sampler sampler_;
  std::vector<int64_t> rungs_;
  int64_t jobs_ = 1, threads_ = 1;
  AshaDecision decision_;
  std::vector<std::unique_ptr<Child>> children_;
  ProgressBar* bar_ = nullptr;
};

double badness(const SweepSpec& s, double v) {
  if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
  return s.goal == Goal::minimize ? v : -v;
}

// Best first: the highest rung reached, then the metric; failed trials last; ties by id.
std::vector<size_t> ranking(const SweepResult& r) {
  std::vector<size_t> order(r.trials.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Rungs with a result; a diverged trial's last rung has none.
  auto reached = [](const TrialRecord& t) {
    return t.results.size() - (!t.results.empty() && !std::isfinite(t.results.back()) ? 1 : 0);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const TrialRecord &x = r.trials[a], &y = r.trials[b];
    if (reached(x) != reached(y)) return reached(x) > reached(y);
    if (x.results.empty() || y.results.empty()) return !x.results.empty() && y.results.empty();
    return badness(r.spec, x.results.back()) < badness(r.spec, y.results.back());
  });
  return order;
}

}  // namespace

fs::path trial_dir(const fs::path& sweep_dir, int64_t id) {
  char name[32];
  std::snprintf(name, sizeof name, "trial-%04lld", static_cast<long long>(id));
  return sweep_dir / name;
}

fs::path sweep_state_file(const fs::path& dir) { return dir / kStateFile; }

bool is_sweep_dir(const fs::path& dir) { return fs::exists(sweep_state_file(dir)); }

SweepResult read_sweep(const fs::path& dir) {
  State s = load_state(dir);
  return SweepResult{s.spec, dir, s.trials, false};
}

SweepResult run_sweep(const SweepOptions& o) {
  // One writer per sweep directory, for as long as the sweep runs (its trials, child processes,
  // each hold their own run directory's lock, never the sweep's: it is close-on-exec).
  constexpr const char* what = "sweep directory";
  DirLock lock;
  if (o.trainer.empty() || !fs::exists(o.trainer)) throw_usage("the trainer ", o.trainer.string(), " does not exist");
  State st;
  st.dir = o.dir;
  if (o.resume) {
    require_sweep_dir(o.dir);
    if (o.steps > 0)
      throw_option_error("{steps} goes with a new sweep: --resume continues ", o.dir.string(), " with the steps it started with");
    lock = lock_dir(o.dir, what);
    st = load_state(o.dir);
    st.dir = o.dir;
    for (auto& t : st.trials)
      if (t.status == TrialStatus::running) t.status = TrialStatus::interrupted;  // the sweep died while it ran
  } else {
    st.sweep_file = fs::absolute(o.sweep_file);
    st.spec = load_sweep(o.sweep_file, std::nullopt, o.steps);
    st.sweep_text = read_file_text(o.sweep_file);
    lock = create_locked_dir(o.dir, what, str("continue it with dl-train sweep --resume ", o.dir.string(), ", or choose another --dir"));
    st.save();
  }
  // DL_EXAMPLE_MAX_TRIALS (a test hook, core/limits.hpp): fewer sampled trials (never fewer than
  // have started); a grid keeps its points.
  if (const auto cap = example_cap("DL_EXAMPLE_MAX_TRIALS"); cap && st.spec.method != Method::grid)
    st.spec.trials = std::max(std::min(st.spec.trials, *cap), static_cast<int64_t>(st.trials.size()));
  Runner runner(st, o);
  const bool finished = runner.run();
  SweepResult r{st.spec, st.dir, st.trials, !finished};
  st.save();
  if (finished && best_trial(r)) write_file_atomic(st.dir / "best.toml", best_config_toml(r));
  return r;
}

Table sweep_table(const SweepResult& r) {
  std::vector<Column> cols = {{"rank", "rank", true}, {"trial", "trial", true}};
  for (const auto& p : r.spec.params) cols.push_back({p.key, p.key, !p.categorical()});
  cols.push_back({r.spec.metric, r.spec.metric, true});
  cols.push_back({"steps", "steps", true});
  cols.push_back({"time_s", "time", true});
  cols.push_back({"status", "status", false});
  cols.push_back({"reason", "reason", false});
  Table table(cols);
  int rank = 0;
  for (size_t i : ranking(r)) {
    const TrialRecord& t = r.trials[i];
    std::vector<Cell> row = {Cell::integer(++rank), Cell::integer(t.id)};
    for (const std::string& lit : t.values) row.push_back(value_cell(lit));
    if (t.results.empty() || !std::isfinite(t.results.back())) row.push_back(Cell::null());
    else row.push_back(Cell::num(t.results.back(), format_fixed(t.results.back(), 4)));
    row.push_back(Cell::integer(t.steps));
    row.push_back(Cell::num(t.seconds, format_duration(t.seconds)));
    row.push_back(Cell::str(std::string(choice_name(t.status))));
    Cell why = t.reason.empty() ? Cell::null() : Cell::str(t.reason);
    if (why.text.size() > 60) why.text = why.text.substr(0, 57) + "...";
    row.push_back(why);
    table.add_row(std::move(row));
  }
  return table;
}

const TrialRecord* best_trial(const SweepResult& r) {
  const auto order = ranking(r);
  if (order.empty() || r.trials[order.front()].results.empty() || !std::isfinite(r.trials[order.front()].results.back()))
    return nullptr;
  return &r.trials[order.front()];
}

std::string best_config_toml(const SweepResult& r) {
  const TrialRecord* b = best_trial(r);
  if (!b) throw_runtime("sweep ", r.dir.string(), ": no trial reported ", r.spec.metric, "; no best config");
  const TrialRecord& best = *b;
  std::vector<std::string> sets;
  for (size_t i = 0; i < r.spec.params.size(); ++i) sets.push_back(r.spec.params[i].key + "=" + best.values[i]);
  if (r.spec.steps_override > 0 && !r.spec.asha) sets.push_back("train.steps=" + std::to_string(r.spec.steps_override));
  if (r.spec.asha) {
    sets.push_back("train.steps=" + std::to_string(r.spec.asha->max_steps));
    if (!r.spec.base_decay_steps_set) sets.push_back("schedule.decay_steps=" + std::to_string(r.spec.asha->max_steps));
  }
  return str("# ", r.spec.base_config.filename().string(), " with the best parameters of sweep ", r.dir.string(),
             " (trial ", best.id, ", ", r.spec.metric, " ", toml_float(best.results.back()), ")\n",
             config_to_toml(load_config(r.spec.base_config, sets)));
}

}  // namespace dl::sweep
