// Tables of dl-cost estimate and offers: human formats show display text and notes, machine
// formats (json, jsonl, csv) raw values under stable keys.
#include <algorithm>
#include <cmath>
#include <set>

#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/cost/estimate.hpp"
#include "dl/cost/format.hpp"

namespace dl::cost {

namespace {

bool machine(OutputFormat f) { return f == OutputFormat::json || f == OutputFormat::jsonl || f == OutputFormat::csv; }

Cell num(double v) { return std::isfinite(v) ? Cell::num(v, format_si(v, "")) : Cell::null(); }
Cell opt_num(const std::optional<double>& v) { return v ? num(*v) : Cell::null(); }
Cell usd(double v) { return std::isfinite(v) ? Cell::num(v, format_usd(v)) : Cell::null("-"); }
Cell opt_usd(const std::optional<double>& v) { return v ? usd(*v) : Cell::null("-"); }
Cell opt_bool(const std::optional<bool>& v) { return v ? Cell::boolean(*v) : Cell::null("?"); }

std::string gpus_text(const CostRow& r) {
  if (r.instances > 1) return str(r.gpus, " (", r.instances, "x", r.offer.gpu_count, ")");
  if (r.billed_gpus > r.gpus) return str(r.gpus, " of ", r.billed_gpus);
  return std::to_string(r.gpus);
}

// "1.58-2.12 h", "$22.50-$30.26": the low and high of a range.
Cell range(double lo, double hi, std::string (*fmt)(double)) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return Cell::null("-");
  std::string a = fmt(lo), b = fmt(hi);
  const std::string unit = " h";
  if (a.size() > unit.size() && a.compare(a.size() - unit.size(), unit.size(), unit) == 0 && b.find(" (") == std::string::npos)
    a.resize(a.size() - unit.size());
  return Cell::num(lo, a + "-" + b);
}

// "relative x1.45" (a measurement adjusting the model), "analytic (runs)" (the model, calibrated
// on published runs of this GPU), "analytic" (the model alone: no measurement of this GPU).
std::string speed_from(const GpuSpeed& s) {
  if (s.source != "analytic" && s.model_flops > 0) return str(s.source, " x", format_fixed(s.flops / s.model_flops, 2));
  return s.source == "analytic" && s.measured ? "analytic (runs)" : s.source;
}

std::string marks(const CostRow& r) {
  std::vector<std::string> m;
  if (r.best) m.push_back("best");
  if (r.cheapest) m.push_back("cheapest");
  if (r.fastest) m.push_back("fastest");
  if (r.cheapest_per_gpu_hour) m.push_back("lowest $/GPU-h");
  return join(m, ", ");
}

}  // namespace

std::string render_estimate(const CostReport& r, OutputFormat f, int64_t top) {
  const size_t shown = top > 0 ? std::min(r.rows.size(), static_cast<size_t>(top)) : r.rows.size();
  if (machine(f)) {
    std::vector<Column> cols;
    for (const char* k :
         {"rank", "offer", "provider", "instance", "region", "gpu_model", "gpu_name", "gpus", "gpus_per_instance",
          "instances", "billed_gpus", "pricing", "usd_per_hour", "usd_per_gpu_hour", "interconnect", "speed_source",
          "speed_detail", "per_gpu_flops", "scaling_efficiency", "dp_efficiency", "replica_batch_tokens", "microbatches",
          "recompute_factor", "flops_per_s", "tokens_per_s",
          "work_flops", "tokens", "compute_hours", "goodput", "eval_hours", "checkpoint_bytes", "checkpoint_write_hours",
          "checkpoint_interval_hours", "checkpoints", "failures", "failure_hours", "hours", "gpu_hours", "total_usd", "usd_per_1b_tokens", "fits", "layout",
          "hours_low", "hours_high", "usd_low", "usd_high", "model_per_gpu_flops", "speed_adjustment", "speed_measured",
          "mem_per_gpu_bytes", "gpu_mem_bytes", "checkpoint_hours", "preemptions", "spot_overhead_hours", "why_not",
          "cheapest", "fastest", "best", "cheapest_per_gpu_hour", "price_source", "price_as_of", "catalog"})
      cols.push_back({k, k, false});
    Table t(cols);
    for (size_t i = 0; i < shown; ++i) {
      const CostRow& x = r.rows[i];
      const Offer& o = x.offer;
      t.add_row({Cell::integer(static_cast<int64_t>(i + 1)), Cell::str(o.id), Cell::str(o.provider), Cell::str(o.instance),
                 Cell::str(o.region), Cell::str(o.gpu_model), Cell::str(o.gpu_name), Cell::integer(x.gpus),
                 Cell::integer(o.gpu_count), Cell::integer(x.instances), Cell::integer(x.billed_gpus),
                 Cell::str(x.spot ? "spot" : "on-demand"), usd(x.usd_per_hour), usd(x.usd_per_gpu_hour),
                 Cell::str(interconnect_name(o.interconnect)), Cell::str(x.speed.source), Cell::str(x.speed.detail),
                 num(x.speed.flops), num(x.efficiency), num(x.dp_efficiency),
                 x.replica_tokens > 0 ? num(x.replica_tokens) : Cell::null(),
                 x.microbatches > 0 ? Cell::integer(x.microbatches) : Cell::null(), num(x.recompute_factor), num(x.flops_per_s), opt_num(x.tokens_per_s),
                 num(r.experiment.flops), opt_num(r.experiment.tokens), num(x.compute_hours), num(x.goodput.factor),
                 num(x.goodput.eval_hours), num(x.goodput.checkpoint_bytes), num(x.goodput.checkpoint_write_hours),
                 num(x.goodput.checkpoint_interval_hours), num(x.goodput.checkpoints), num(x.goodput.failures),
                 num(x.goodput.failure_hours), num(x.hours), num(x.gpu_hours()), usd(x.total_usd),
                 opt_usd(x.usd_per_1b_tokens), opt_bool(x.fits), Cell::str(x.layout), num(x.hours_low), num(x.hours_high),
                 usd(x.usd_low), usd(x.usd_high), num(x.speed.model_flops),
                 x.speed.model_flops > 0 ? num(x.speed.flops / x.speed.model_flops) : Cell::null(),
                 Cell::boolean(x.speed.measured), num(x.mem_per_gpu),
                 num(o.gpu_mem_bytes), x.spot ? num(x.checkpoint_hours) : Cell::null(),
                 x.spot ? num(x.spot_outcome.preemptions) : Cell::null(),
                 x.spot ? num(x.spot_outcome.overhead_hours) : Cell::null(),
                 x.why_not.empty() ? Cell::null("") : Cell::str(x.why_not), Cell::boolean(x.cheapest),
                 Cell::boolean(x.fastest), Cell::boolean(x.best), Cell::boolean(x.cheapest_per_gpu_hour),
                 Cell::str(x.spot && !o.spot_source.empty() ? o.spot_source : o.price_source),
                 Cell::str(x.spot && !o.spot_as_of.empty() ? o.spot_as_of : o.as_of), Cell::str(o.catalog)});
    }
    return t.render(f);
  }
  Table t({{"rank", "#", true},
           {"offer", "offer", false},
           {"gpu", "gpu", false},
           {"gpus", "gpus", true},
           {"pricing", "pricing", false},
           {"usd_per_hour", "$/h", true},
           {"usd_per_gpu_hour", "$/GPU-h", true},
           {"flops_per_s", "speed", true},
           {"hours", "hours", true},
           {"hours_range", "range", true},
           {"dp_efficiency", "DP eff", true},
           {"goodput", "goodput", true},
           {"total_usd", "total", true},
           {"usd_range", "range", true},
           {"usd_per_1b_tokens", "$/1B tok", true},
           {"fits", "fits", false},
           {"speed_source", "speed from", false},
           {"marks", "", false}});
  for (size_t i = 0; i < shown; ++i) {
    const CostRow& x = r.rows[i];
    t.add_row({Cell::integer(static_cast<int64_t>(i + 1)), Cell::str(x.offer.id), Cell::str(x.offer.gpu_model),
               Cell::str(gpus_text(x)), Cell::str(x.spot ? "spot" : "on-demand"), usd(x.usd_per_hour),
               usd(x.usd_per_gpu_hour), Cell::num(x.flops_per_s, format_si(x.flops_per_s, "FLOP/s")),
               Cell::num(x.hours, format_hours(x.hours)), range(x.hours_low, x.hours_high, format_hours),
               Cell::num(x.dp_efficiency, format_fixed(x.dp_efficiency, 3)),
               Cell::num(x.goodput.factor, format_fixed(x.goodput.factor, 3)), usd(x.total_usd),
               range(x.usd_low, x.usd_high, format_usd), opt_usd(x.usd_per_1b_tokens),
               x.fits ? Cell::boolean(*x.fits) : Cell::null("?"), Cell::str(speed_from(x.speed)), Cell::str(marks(x))});
  }
  if (shown < r.rows.size())
    t.add_note(str("# showing ", shown, " of ", r.rows.size(), " rows (--top 0 shows all)"));
  for (const auto& c : r.callouts) t.add_note("# " + c);
  for (size_t i = 0; i < shown; ++i) {
    const CostRow& x = r.rows[i];
    if (!x.why_not.empty()) t.add_note(str("# ", i + 1, " ", x.offer.id, ": ", x.why_not));
  }
  for (const auto& n : r.notes) t.add_note(n);
  if (shown > 0) t.add_note(str("# 1 ", r.rows[0].offer.id, ": ", describe_goodput(r.rows[0].goodput)));
  if (shown > 0 && !r.rows[0].dp_detail.empty()) t.add_note(str("# 1 ", r.rows[0].offer.id, ": ", r.rows[0].dp_detail));
  // Where each shown GPU model's speed comes from.
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < shown; ++i) seen[r.rows[i].offer.gpu_model] = r.rows[i].speed.source + ": " + r.rows[i].speed.detail;
  for (const auto& [m, d] : seen) t.add_note("# speed " + m + ": " + d);
  return t.render(f);
}

std::string render_offers(const Catalog& c, const std::vector<const Offer*>& offers, OutputFormat f) {
  if (machine(f)) {
    std::vector<Column> cols;
    for (const char* k :
         {"offer", "provider", "instance", "region", "gpu_name", "gpu_model", "gpus", "gpu_mem_bytes", "interconnect",
          "on_demand_usd", "spot_usd", "per_gpu_listed_usd", "on_demand_per_gpu_usd", "vcpus", "ram", "price_source",
          "as_of", "spot_source", "spot_as_of", "catalog", "line", "estimable", "why_not_estimated", "notes"})
      cols.push_back({k, k, false});
    Table t(cols);
    for (const Offer* o : offers) {
      const std::string why = o->why_unusable(false);
      t.add_row({Cell::str(o->id), Cell::str(o->provider), Cell::str(o->instance), Cell::str(o->region),
                 Cell::str(o->gpu_name), o->gpu_model.empty() ? Cell::null("") : Cell::str(o->gpu_model),
                 Cell::integer(o->gpu_count), o->gpu_mem_bytes > 0 ? num(o->gpu_mem_bytes) : Cell::null(),
                 Cell::str(interconnect_name(o->interconnect)), opt_usd(o->on_demand), opt_usd(o->spot),
                 opt_usd(o->per_gpu_listed),
                 o->on_demand ? usd(*o->on_demand / static_cast<double>(o->gpu_count)) : Cell::null(),
                 Cell::str(o->vcpus), Cell::str(o->ram), Cell::str(o->price_source), Cell::str(o->as_of),
                 Cell::str(o->spot_source), Cell::str(o->spot_as_of), Cell::str(o->catalog), Cell::integer(o->line),
                 Cell::boolean(why.empty()), why.empty() ? Cell::null("") : Cell::str(why),
                 Cell::str(join(o->notes, "; "))});
    }
    return t.render(f);
  }
  Table t({{"offer", "offer", false},
           {"gpu", "gpu", false},
           {"gpus", "gpus", true},
           {"mem", "mem/GPU", true},
           {"on_demand", "on-demand $/h", true},
           {"spot", "spot $/h", true},
           {"per_gpu", "$/GPU-h", true},
           {"interconnect", "link", false},
           {"as_of", "as of", false},
           {"status", "not estimated because", false}});
  size_t priced = 0, spot = 0, unusable = 0;
  for (const Offer* o : offers) {
    const std::string why = o->why_unusable(false);
    priced += o->on_demand ? 1 : 0;
    spot += o->spot ? 1 : 0;
    unusable += why.empty() ? 0 : 1;
    t.add_row({Cell::str(o->id), Cell::str(o->gpu_model.empty() ? "? " + o->gpu_name : o->gpu_model),
               Cell::integer(o->gpu_count),
               o->gpu_mem_bytes > 0 ? Cell::num(o->gpu_mem_bytes, format_bytes(o->gpu_mem_bytes)) : Cell::null("?"),
               opt_usd(o->on_demand), opt_usd(o->spot),
               o->on_demand ? usd(*o->on_demand / static_cast<double>(o->gpu_count)) : Cell::null("-"),
               Cell::str(interconnect_name(o->interconnect)), Cell::str(o->as_of.empty() ? "-" : o->as_of),
               Cell::str(why)});
  }
  t.add_note(str("# ", offers.size(), " offers of ", c.offers.size(), " in ", join(c.files, ", "), ": ", priced,
                 " with an on-demand price, ", spot, " with a spot price; ", unusable,
                 " listed but not estimated (reason in the last column)"));
  for (const Offer* o : offers)
    for (const auto& n : o->notes) t.add_note("# " + o->id + ": " + n);
  t.add_note("# prices are USD per instance-hour as listed by the source on the 'as of' date (--format json: sources)");
  return t.render(f);
}

std::string render_layout_explanation(const CostReport& r, int64_t top) {
  std::string out;
  std::set<std::string> seen;
  const size_t shown = top > 0 ? std::min(r.rows.size(), static_cast<size_t>(top)) : r.rows.size();
  for (size_t i = 0; i < shown; ++i) {
    const CostRow& row = r.rows[i];
    if (row.explain.empty()) continue;
    const std::string key = str(row.offer.gpu_model, " ", format_bytes(row.offer.gpu_mem_bytes), " x ", row.gpus);
    if (!seen.insert(key).second) continue;
    out += str("\n# layout on ", row.gpus, " x ", row.offer.gpu_model, " (", format_bytes(row.offer.gpu_mem_bytes),
               ", ", row.offer.id, "): ", row.layout, "\n");
    for (const auto& line : row.explain) out += line + "\n";
    if (!row.dp_detail.empty()) out += str("# ", row.dp_detail, "\n");
    if (!row.ep_detail.empty()) out += str("# ", row.ep_detail, "\n");
  }
  return out;
}

}  // namespace dl::cost
