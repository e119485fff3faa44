// dl-cost onprem: when buying a machine pays for itself against renting the same work.
#include <algorithm>
#include <cmath>

#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/cost/estimate.hpp"
#include "dl/cost/format.hpp"
#include "dl/plan/gpus.hpp"

namespace dl::cost {

OnpremReport make_onprem(const OnpremInputs& in) {
  OnpremReport rep;
  rep.inputs = in;
  if (!(in.price > 0)) throw_option_error("{price}: need the machine's price in USD (> 0), got ", in.price);
  if (!(in.watts >= 0)) throw_option_error("{watts}: need the machine's power draw in W (>= 0), got ", in.watts);
  if (!(in.kwh_price >= 0)) throw_option_error("{kwh_price}: need a price per kWh in USD (>= 0), got ", in.kwh_price);
  if (!(in.utilization > 0 && in.utilization <= 1))
    throw_option_error("{utilization}: the fraction of hours the machine works, in (0, 1], got ", in.utilization);
  if (!(in.years > 0)) throw_option_error("{years}: need a positive service life, got ", in.years);
  if (!(in.pue >= 1)) throw_option_error("{pue}: power usage effectiveness is >= 1, got ", in.pue);
  if (in.gpus && *in.gpus < 1) throw_option_error("{gpus}: need at least 1 GPU");

  Catalog cat = load_catalogs(in.catalogs, {in.strict});
  rep.warnings = cat.warnings;
  const Offer* vs = in.vs.empty() ? nullptr : &find_offer(cat, in.vs);
  if (!in.gpu.empty()) {
    rep.gpu_model = plan::find_gpu(in.gpu).model;
  } else if (vs) {
    if (vs->gpu_model.empty()) throw_option_error("{vs} ", vs->id, ": ", vs->why_unusable(false));
    rep.gpu_model = vs->gpu_model;
  } else {
    throw_option_error("name the machine's GPUs with {gpu} MODEL [{gpus} N], or compare with one offer's hardware: {vs} OFFER");
  }
  rep.gpus = in.gpus.value_or(vs && in.gpu.empty() ? vs->gpu_count : 1);

  SpeedModel sm = make_speed_model(in.bench, in.throughput, in.reference_gpu, in.speed_sources, in.precision, in.mfu, 0,
                                   in.flags);
  std::string why;
  auto s = sm.speed(rep.gpu_model, &why);
  if (!s) throw_usage("on-prem ", rep.gpu_model, ": ", why);
  rep.onprem_speed = *s;
  const auto spec = plan::gpu_spec(rep.gpu_model);
  const Interconnect ic = spec ? interconnect_of(*spec) : Interconnect::pcie;
  const double n = static_cast<double>(rep.gpus);
  rep.onprem_flops_per_s = n * s->flops * in.scaling.efficiency(ic, rep.gpus, rep.gpus);
  const double busy_hours = kHoursPerMonth * in.utilization;
  const double work = rep.onprem_flops_per_s * busy_hours * 3600.0;  // FLOPs per month
  const double power = in.watts / 1000.0 * busy_hours * in.pue * in.kwh_price;
  const double months = 12.0 * in.years;

  std::vector<const Offer*> offers;
  if (vs) offers.push_back(vs);
  else offers = filter_offers(cat, in.gpu_filter, in.provider_filter);
  std::map<std::string, std::vector<std::string>> skipped;
  for (const Offer* o : offers) {
    for (bool spot : in.spot ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      std::string w = o->why_unusable(spot);
      std::optional<GpuSpeed> cs;
      if (w.empty()) cs = sm.speed(o->gpu_model, &w);
      if (!w.empty()) {
        if (vs && !spot) throw_option_error("{vs} ", o->id, ": ", w);
        skipped[(spot ? "spot: " : "") + w].push_back(o->id);
        continue;
      }
      OnpremRow r;
      r.offer = *o;
      r.spot = spot;
      r.gpus = rep.gpus;
      r.instances = (rep.gpus + o->gpu_count - 1) / o->gpu_count;
      r.speed = *cs;
      r.efficiency = in.scaling.efficiency(o->interconnect, rep.gpus, o->gpu_count);
      const double cloud_flops = n * cs->flops * r.efficiency;
      r.cloud_hours_per_month = work / cloud_flops / 3600.0;
      r.cloud_per_month = r.cloud_hours_per_month * *o->price(spot) * static_cast<double>(r.instances);
      r.power_per_month = power;
      r.onprem_per_month = power + in.price / months;
      if (r.cloud_per_month > power) r.breakeven_months = in.price / (r.cloud_per_month - power);
      r.savings_over_life = r.cloud_per_month * months - (in.price + power * months);
      rep.rows.push_back(std::move(r));
    }
  }
  for (const auto& [w, ids] : skipped) {
    std::string list;
    for (size_t i = 0; i < ids.size() && i < 4; ++i) list += (i ? ", " : "") + ids[i];
    if (ids.size() > 4) list += str(", ... (", ids.size() - 4, " more)");
    rep.skipped.push_back(str(ids.size(), ids.size() == 1 ? " offer" : " offers", ": ", w, ": ", list));
  }
  if (rep.rows.empty()) throw_usage("no cloud offer to compare with (", rep.skipped.empty() ? "none match" : rep.skipped.front(), ")");
  std::stable_sort(rep.rows.begin(), rep.rows.end(), [](const OnpremRow& a, const OnpremRow& b) {
    if (a.cloud_per_month != b.cloud_per_month) return a.cloud_per_month < b.cloud_per_month;
    return a.offer.id < b.offer.id;
  });
  OnpremRow& best = rep.rows.front();
  best.best = true;
  const std::string label = best.offer.id + (best.spot ? " (spot)" : "");
  if (best.breakeven_months) {
    rep.callouts.push_back(str("break-even after ", format_fixed(*best.breakeven_months, 1), " months against ", label,
                               vs ? "" : " (the cheapest cloud offer for this work)", ": cloud ",
                               format_usd(best.cloud_per_month), "/month for the same work vs on-prem power ",
                               format_usd(power), "/month"));
    rep.callouts.push_back(*best.breakeven_months <= months
                               ? str("over ", format_fixed(in.years, 1), " years the machine saves ",
                                     format_usd(best.savings_over_life), " (price and power included)")
                               : str("that is after the machine's ", format_fixed(in.years, 1),
                                     "-year life: renting is cheaper by ", format_usd(-best.savings_over_life)));
  } else {
    rep.callouts.push_back(str("never breaks even against ", label, ": the cloud costs ", format_usd(best.cloud_per_month),
                               "/month for this work, less than on-prem power alone (", format_usd(power), "/month)"));
  }
  rep.notes.push_back(str("# on-prem: ", rep.gpus, " x ", rep.gpu_model, ", ", format_usd(in.price), ", ",
                          format_fixed(in.watts, 0), " W at ", format_usd(in.kwh_price), "/kWh", in.pue != 1 ? str(", PUE ", in.pue) : "",
                          ", busy ", format_fixed(100 * in.utilization, 0), "% of ", format_fixed(kHoursPerMonth, 0),
                          " h/month, ", format_fixed(in.years, 1), "-year life"));
  rep.notes.push_back(str("# on-prem speed: ", format_si(rep.onprem_flops_per_s, "FLOP/s"), " (", s->source, ": ", s->detail,
                          "); work per month ", format_flop(work)));
  rep.notes.push_back("# power/month = W/1000 x 730 h x utilization x PUE x $/kWh; cloud/month = hours for the same work "
                      "(730 h x utilization x on-prem speed / cloud speed) x $/h x instances; break-even months = price / "
                      "(cloud/month - power/month)");
  rep.notes.push_back("# not counted: hosting, networking, staff, resale value, financing; the cloud side has no setup cost");
  for (const auto& n : sm.notes) rep.notes.push_back("# " + n);
  for (const auto& sk : rep.skipped) rep.notes.push_back("# skipped " + sk);
  return rep;
}

std::string render_onprem(const OnpremReport& r, OutputFormat f, int64_t top) {
  const size_t shown = top > 0 ? std::min(r.rows.size(), static_cast<size_t>(top)) : r.rows.size();
  const bool machine = f == OutputFormat::json || f == OutputFormat::jsonl || f == OutputFormat::csv;
  auto num = [](double v) { return std::isfinite(v) ? Cell::num(v, format_si(v, "")) : Cell::null(); };
  auto usd = [](double v) { return std::isfinite(v) ? Cell::num(v, format_usd(v)) : Cell::null(); };
  if (machine) {
    std::vector<Column> cols;
    for (const char* k :
         {"rank", "offer", "gpu_model", "pricing", "gpus", "instances", "speed_source", "scaling_efficiency",
          "cloud_hours_per_month", "cloud_usd_per_month", "onprem_power_usd_per_month", "onprem_usd_per_month",
          "breakeven_months", "savings_over_life_usd", "best", "onprem_gpu_model", "onprem_gpus", "onprem_flops_per_s",
          "price_usd", "watts", "kwh_price_usd", "utilization", "years", "pue"})
      cols.push_back({k, k, false});
    Table t(cols);
    for (size_t i = 0; i < shown; ++i) {
      const OnpremRow& x = r.rows[i];
      t.add_row({Cell::integer(static_cast<int64_t>(i + 1)), Cell::str(x.offer.id), Cell::str(x.offer.gpu_model),
                 Cell::str(x.spot ? "spot" : "on-demand"), Cell::integer(x.gpus), Cell::integer(x.instances),
                 Cell::str(x.speed.source), num(x.efficiency), num(x.cloud_hours_per_month), usd(x.cloud_per_month),
                 usd(x.power_per_month), usd(x.onprem_per_month),
                 x.breakeven_months ? num(*x.breakeven_months) : Cell::null("never"), usd(x.savings_over_life),
                 Cell::boolean(x.best), Cell::str(r.gpu_model), Cell::integer(r.gpus), num(r.onprem_flops_per_s),
                 usd(r.inputs.price), num(r.inputs.watts), usd(r.inputs.kwh_price), num(r.inputs.utilization),
                 num(r.inputs.years), num(r.inputs.pue)});
    }
    return t.render(f);
  }
  Table t({{"rank", "#", true},
           {"offer", "vs offer", false},
           {"gpu", "gpu", false},
           {"pricing", "pricing", false},
           {"gpus", "gpus", true},
           {"cloud_hours", "cloud h/month", true},
           {"cloud", "cloud $/month", true},
           {"onprem", "on-prem $/month", true},
           {"breakeven", "break-even", true},
           {"savings", str("saved in ", format_fixed(r.inputs.years, 1), " y"), true},
           {"source", "speed from", false}});
  for (size_t i = 0; i < shown; ++i) {
    const OnpremRow& x = r.rows[i];
    t.add_row({Cell::integer(static_cast<int64_t>(i + 1)), Cell::str(x.offer.id), Cell::str(x.offer.gpu_model),
               Cell::str(x.spot ? "spot" : "on-demand"), Cell::integer(x.gpus),
               Cell::num(x.cloud_hours_per_month, format_fixed(x.cloud_hours_per_month, 1)), usd(x.cloud_per_month),
               usd(x.onprem_per_month),
               x.breakeven_months ? Cell::num(*x.breakeven_months, format_fixed(*x.breakeven_months, 1) + " months")
                                  : Cell::null("never"),
               usd(x.savings_over_life), Cell::str(x.speed.source)});
  }
  if (shown < r.rows.size()) t.add_note(str("# showing ", shown, " of ", r.rows.size(), " offers (--top 0 shows all)"));
  for (const auto& c : r.callouts) t.add_note("# " + c);
  for (const auto& n : r.notes) t.add_note(n);
  return t.render(f);
}

}  // namespace dl::cost
