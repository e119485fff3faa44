#include "dl/cost/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dl/cli/table.hpp"
#include "dl/cost/format.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/plan/plan.hpp"

namespace dl::cost {

Goodput goodput(double compute_hours, int64_t gpus, double checkpoint_bytes, std::optional<double> interval_hours,
                const GoodputModel& m) {
  Goodput g;
  const double n = static_cast<double>(std::max<int64_t>(gpus, 1));
  const double failures_per_hour = m.failures_per_gpu_hour * n;
  g.checkpoint_bytes = checkpoint_bytes;
  g.checkpoint_write_hours = checkpoint_bytes > 0 && m.checkpoint_bw > 0 ? checkpoint_bytes / (n * m.checkpoint_bw) / 3600.0 : 0;
  if (interval_hours) {
    g.checkpoint_interval_hours = *interval_hours;
  } else if (failures_per_hour > 0 && g.checkpoint_write_hours > 0) {
    g.checkpoint_interval_hours = std::sqrt(2 * g.checkpoint_write_hours / failures_per_hour);
    g.interval_optimal = true;
  } else {
    g.checkpoint_interval_hours = compute_hours;  // nothing to lose: once, at the end
  }
  g.checkpoint_interval_hours = std::min(g.checkpoint_interval_hours, compute_hours);
  g.wall_hours = compute_hours;
  if (!(compute_hours > 0 && std::isfinite(compute_hours))) return g;
  g.eval_hours = compute_hours * m.eval_share;
  g.checkpoints = g.checkpoint_interval_hours > 0 ? std::ceil(compute_hours / g.checkpoint_interval_hours - 1e-9) : 0;
  const double busy = compute_hours + g.eval_hours + g.checkpoints * g.checkpoint_write_hours;
  const double lost_per_failure = m.restart_hours + g.checkpoint_interval_hours / 2;
  const double bracket = 1 - failures_per_hour * lost_per_failure;
  if (!(bracket > 0)) {
    g.finishes = false;
    g.factor = 0;
    g.wall_hours = std::numeric_limits<double>::infinity();
    return g;
  }
  g.wall_hours = busy / bracket;
  g.failures = failures_per_hour * g.wall_hours;
  g.failure_hours = g.failures * lost_per_failure;
  g.factor = compute_hours / g.wall_hours;
  return g;
}

double checkpoint_bytes(double params, Precision precision, StateOptimizer optimizer) {
  const plan::StateBytes b = plan::state_bytes(precision == Precision::fp8 ? Precision::bf16 : precision, optimizer);
  return params * (b.params + b.optimizer);
}

std::string describe_goodput(const Goodput& g) {
  if (!g.finishes) return "goodput 0: failures come faster than the run can checkpoint and restart";
  const double wall = g.wall_hours > 0 ? g.wall_hours : 1;
  return str("goodput ", format_fixed(g.factor, 3), ": eval ", format_fixed(100 * g.eval_hours / wall, 1), "%, ",
             g.checkpoint_bytes > 0
                 ? str(format_fixed(g.checkpoints, 0), " checkpoints of ", format_bytes(g.checkpoint_bytes), " x ",
                       format_fixed(g.checkpoint_write_hours * 3600, 1), " s (every ",
                       format_hours(g.checkpoint_interval_hours), g.interval_optimal ? ", the optimal interval" : "", ")")
                 : std::string("checkpoints not sized (no model)"),
             ", failures ", format_fixed(g.failures, 2), " losing ", format_hours(g.failure_hours));
}

std::string goodput_note(const GoodputModel& m, const OptionNames& flags) {
  if (m.eval_share == 0 && m.failures_per_gpu_hour == 0 && std::isinf(m.checkpoint_bw))
    return "# goodput: off (hours = compute hours: no evaluation, checkpoint or failure time)";
  return str("# goodput: hours = compute / goodput; evaluation ", format_fixed(100 * m.eval_share, 1), "% (",
             option_flag(flags, "eval_share"), "), checkpoints at ", format_fixed(m.checkpoint_bw / 1e9, 2),
             " GB/s per GPU (", option_flag(flags, "checkpoint_bw"), "; Llama 3: 7 TB/s for 16,384 GPUs), ",
             format_fixed(m.failures_per_gpu_hour * 1e6, 1), " failures per 1M GPU-hours (",
             option_flag(flags, "failure_rate"), "; Llama 3: 419 in 54 days on 16,384 GPUs), each losing ",
             format_hours(m.restart_hours), " (", option_flag(flags, "restart_cost"),
             ") + half a checkpoint interval (config's, else the optimal sqrt(2 x write / failure rate)); docs/COST.md");
}

void check_goodput_model(const GoodputModel& m) {
  if (!(m.eval_share >= 0 && m.eval_share < 10)) throw_option_error("{eval_share}: need a fraction >= 0, got ", m.eval_share);
  if (!(m.checkpoint_bw > 0)) throw_option_error("{checkpoint_bw}: need a bandwidth > 0");
  if (!(m.failures_per_gpu_hour >= 0)) throw_option_error("{failure_rate}: need a rate >= 0 per GPU-hour");
  if (!(m.restart_hours >= 0)) throw_option_error("{restart_cost}: need a duration >= 0");
}

}  // namespace dl::cost
