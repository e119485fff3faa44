// dl-cost validate: the default estimate of each published run against its measurement.
#include <algorithm>
#include <cmath>

#include "dl/core/error.hpp"
#include "dl/cost/estimate.hpp"
#include "dl/cost/format.hpp"
#include "dl/plan/gpus.hpp"
#include "dl/plan/speed.hpp"

namespace dl::cost {

EstimateInputs validation_inputs(const std::string& gpu, int64_t gpus, double params, int64_t layers, int64_t hidden,
                                 int64_t heads, int64_t seq, int64_t vocab, const plan::ArchHints& arch) {
  EstimateInputs in;
  in.catalogs = {"builtin"};
  in.gpu_filter = gpu;
  in.gpus = {gpus};
  in.precision = "bf16";
  in.params = params;
  in.layers = layers, in.hidden = hidden, in.heads = heads, in.seq = seq, in.vocab = vocab;
  in.arch = arch;  // a Llama-family run's real K/V heads, SwiGLU width and untied head
  return in;
}

const CostRow& validation_row(const CostReport& r, const std::string& gpu, int64_t gpus, const std::string& run) {
  const int64_t per_instance = std::min<int64_t>(gpus, 8);
  for (const auto& x : r.rows)
    if (!x.spot && x.offer.gpu_count == per_instance && x.instances * x.offer.gpu_count == gpus) return x;
  throw_runtime("validation: the shipped catalog has no ", per_instance, "-GPU ", gpu, " instance for ", run);
}

std::vector<ValidationRow> validate_published_runs() {
  std::vector<ValidationRow> out;
  for (const auto& run : plan::published_runs()) {
    ValidationRow v;
    v.run = run;
    v.limit = run.gpus >= 100 ? 0.30 : 0.25;
    EstimateInputs in = validation_inputs(run.gpu, run.gpus, run.params, run.layers, run.hidden, run.heads, run.seq,
                                          run.vocab, run.arch);
    in.tokens = run.minutes > 0 ? run.tokens : 1e9;
    const CostReport r = make_estimate(in);
    const CostRow* row = &validation_row(r, run.gpu, run.gpus, run.name);
    const double peak = *plan::gpu_spec(run.gpu)->peak_flops(MathPrecision::bf16);
    const double gpu_seconds = static_cast<double>(run.gpus) * peak;
    v.offer = row->offer.id;
    // The published figures are training throughput (MFU): compare compute hours, before the
    // goodput factor (evaluation, checkpoints, failures) that all-in GPU-hours would include.
    v.estimated_hours = row->compute_hours;
    v.estimated_mfu = r.experiment.flops / (row->compute_hours * 3600.0 * gpu_seconds);
    v.measured_mfu = plan::run_mfu(run);
    // The same work at the measured MFU (wall-clock runs: their own minutes).
    v.measured_hours = run.minutes > 0 ? run.minutes / 60.0 : r.experiment.flops / (gpu_seconds * v.measured_mfu) / 3600.0;
    v.error = v.estimated_hours / v.measured_hours - 1;
    out.push_back(v);
  }
  return out;
}

std::string render_validation(const std::vector<ValidationRow>& rows, OutputFormat f) {
  const bool human = f == OutputFormat::table || f == OutputFormat::md;
  Table t({{"run", "run", false},
           {"gpu", "GPU", false},
           {"gpus", "GPUs", true},
           {"params", "params", true},
           {"measured", "published", true},
           {"estimate", "dl-cost", true},
           {"measured_mfu", "MFU published", true},
           {"estimated_mfu", "MFU dl-cost", true},
           {"error", "error", true},
           {"limit", "limit", true},
           {"source", "source", false}});
  for (const auto& v : rows) {
    const bool wall = v.run.minutes > 0;
    auto time = [&](double h) {
      return wall ? Cell::num(h, format_fixed(h * 60.0, 1) + " min") : Cell::num(h, format_hours(h) + " per 1B tok");
    };
    t.add_row({Cell::str(v.run.name), Cell::str(v.run.gpu), Cell::integer(v.run.gpus),
               Cell::num(v.run.params, format_count(v.run.params)), time(v.measured_hours), time(v.estimated_hours),
               Cell::num(v.measured_mfu, format_fixed(100 * v.measured_mfu, 1) + "%"),
               Cell::num(v.estimated_mfu, format_fixed(100 * v.estimated_mfu, 1) + "%"),
               Cell::num(v.error, str(v.error >= 0 ? "+" : "", format_fixed(100 * v.error, 1), "%")),
               Cell::num(v.limit, format_fixed(100 * v.limit, 0) + "%"), Cell::str(v.run.source)});
  }
  if (human) {
    const plan::SpeedCalibration& c = plan::speed_calibration();
    t.add_note(str("# error = dl-cost's hours / the run's - 1 (MFU rows: the hours the published MFU implies for the "
                   "same work); the runs are the calibration's own (in-sample): beta ",
                   format_fixed(c.beta, 3), ", range x", format_fixed(c.low, 3), " .. x", format_fixed(c.high, 3)));
  }
  return t.render(f);
}

}  // namespace dl::cost
