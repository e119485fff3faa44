#include "dl/sweep/runs.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/io/jsonl.hpp"
#include "dl/sweep/sweep.hpp"
#include "dl/sweep/toml_literal.hpp"

namespace dl::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

RunData::RunData() = default;
RunData::RunData(RunData&&) noexcept = default;
RunData& RunData::operator=(RunData&&) noexcept = default;
RunData::~RunData() = default;

namespace {

RunData read_run(const fs::path& dir, const std::string& name) {
  RunData r;
  r.name = name;
  r.dir = dir;
  const fs::path cfg = dir / "config.toml";
  if (!fs::exists(cfg))
    throw_usage(dir.string(), " is neither a dl-train run directory (no config.toml) nor a sweep directory (no sweep.json)");
  try {
    toml::table t = toml::parse_file(cfg.string());
    for (auto&& [section, node] : t)
      if (auto sub = node.as_table())
        for (auto&& [key, value] : *sub) r.config[std::string(section.str()) + "." + std::string(key.str())] = display_value(toml_literal(value).value_or("?"));
  } catch (const toml::parse_error& e) {
    throw_usage(cfg.string(), ":", e.source().begin.line, ": TOML syntax error: ", e.description());
  }
  if (fs::exists(dir / "metrics.jsonl")) r.records = read_jsonl(dir / "metrics.jsonl");
  return r;
}

// The metric's (step, value) points of a run, in file order.
void series(const RunData& r, const std::string& metric, std::vector<double>* steps, std::vector<double>* values) {
  for (const auto& rec : r.records)
    if (rec.contains(metric) && rec[metric].is_number() && rec.contains("step")) {
      steps->push_back(rec["step"].get<double>());
      values->push_back(rec[metric].get<double>());
    }
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, const char* fmt = "%.17g") {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// Tick positions from lo to hi at a 1-2-5 spacing, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  const double span = hi - lo;
  if (!(span > 0)) return {lo};
  const double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

}  // namespace

std::vector<RunData> read_runs(const std::vector<fs::path>& dirs) {
  std::vector<RunData> runs;
  for (const auto& d : dirs) {
    if (!fs::is_directory(d)) throw_usage(d.string(), ": no such directory");
    if (is_sweep_dir(d)) {
      const SweepResult s = read_sweep(d);
      for (const auto& t : s.trials) {
        const fs::path td = trial_dir(d, t.id);
        if (fs::exists(td / "config.toml")) runs.push_back(read_run(td, (d / td.filename()).string()));
      }
    } else {
      runs.push_back(read_run(d, d.string()));
    }
  }
  return runs;
}

std::vector<fs::path> runs_input_files(const std::vector<fs::path>& dirs, const std::vector<RunData>& runs) {
  std::vector<fs::path> files;
  for (const auto& d : dirs)
    if (is_sweep_dir(d)) files.push_back(sweep_state_file(d));
  for (const auto& r : runs) files.insert(files.end(), {r.dir / "config.toml", r.dir / "metrics.jsonl"});
  return files;
}

std::string sparkline(const std::vector<double>& v, size_t width) {
  static const char* levels[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  std::vector<double> pts;
  for (double x : v)
    if (std::isfinite(x)) pts.push_back(x);
  if (pts.empty()) return "";
  std::vector<double> s;
  const size_t n = std::min(width, pts.size());
  for (size_t i = 0; i < n; ++i) s.push_back(pts[n == 1 ? 0 : i * (pts.size() - 1) / (n - 1)]);
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  std::string out;
  for (double x : s) {
    const int l = *hi > *lo ? static_cast<int>(std::lround((x - *lo) / (*hi - *lo) * 7)) : 0;
    out += levels[std::clamp(l, 0, 7)];
  }
  return out;
}

Table runs_table(const std::vector<RunData>& runs, bool with_sparkline) {
  // Keys every run has whose values are not all the same.
  std::vector<std::string> differ;
  if (!runs.empty())
    for (const auto& [key, value] : runs.front().config) {
      bool all = true, same = true;
      for (const auto& r : runs) {
        auto it = r.config.find(key);
        all = all && it != r.config.end();
        same = same && it != r.config.end() && it->second == value;
      }
      if (all && !same) differ.push_back(key);
    }
  std::vector<std::string> metrics = {"loss"};
  std::set<std::string> seen = {"loss"};
  for (const auto& r : runs)
    for (const auto& rec : r.records)
      for (const auto& [k, v] : rec.items())
        if (k.rfind("val_", 0) == 0 && v.is_number() && seen.insert(k).second) metrics.push_back(k);

  std::vector<Column> cols = {{"run", "run", false}};
  for (const auto& k : differ) cols.push_back({k, k, true});
  cols.push_back({"steps", "steps", true});
  for (const auto& m : metrics) cols.push_back({m, m, true});
  if (with_sparkline) cols.push_back({"loss_curve", "loss curve", false});
  Table t(cols);
  for (const auto& r : runs) {
    std::vector<Cell> row = {Cell::str(r.name)};
    for (const auto& k : differ) row.push_back(value_cell(r.config.at(k)));
    int64_t steps = 0;
    for (const auto& rec : r.records) steps = std::max(steps, rec.value("step", int64_t{0}));
    row.push_back(Cell::integer(steps));
    for (const auto& m : metrics) {
      std::vector<double> s, v;
      series(r, m, &s, &v);
      row.push_back(v.empty() ? Cell::null() : Cell::num(v.back(), format_fixed(v.back(), 4)));
    }
    if (with_sparkline) {
      std::vector<double> s, v;
      series(r, "loss", &s, &v);
      row.push_back(Cell::str(sparkline(v)));
    }
    t.add_row(std::move(row));
  }
  return t;
}

std::string runs_svg(const std::vector<RunData>& runs, const std::string& metric, bool log_y) {
  constexpr double W = 900, H = 520, left = 80, top = 40, width = 560, height = 400;
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  struct Series {
    std::string name;
    std::vector<double> steps, values;
  };
  std::vector<Series> all;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& r : runs) {
    Series s{r.name, {}, {}};
    series(r, metric, &s.steps, &s.values);
    if (s.values.empty()) throw_usage(r.name, " reports no ", metric, " (metrics.jsonl); choose a metric every run has");
    for (size_t i = 0; i < s.values.size(); ++i) {
      if (log_y && !(s.values[i] > 0))
        throw OptionError("{log_y} needs positive values: ", ErrorKind::usage,
                          str(r.name, " has ", metric, " = ", s.values[i], " at step ", s.steps[i]));
      x0 = std::min(x0, s.steps[i]), x1 = std::max(x1, s.steps[i]);
      y0 = std::min(y0, s.values[i]), y1 = std::max(y1, s.values[i]);
    }
    all.push_back(std::move(s));
  }
  if (all.empty()) throw_usage("no runs to plot");
  if (x1 == x0) x1 = x0 + 1;
  auto f = [&](double v) { return log_y ? std::log10(v) : v; };
  if (f(y1) == f(y0)) y1 = log_y ? y0 * 10 : y0 + 1;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * width; };
  auto py = [&](double y) { return top + height - (f(y) - f(y0)) / (f(y1) - f(y0)) * height; };

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", W, "\" height=\"", H, "\" viewBox=\"0 0 ", W, " ", H,
           "\" font-family=\"sans-serif\" font-size=\"12\" data-left=\"", left, "\" data-top=\"", top, "\" data-width=\"",
           width, "\" data-height=\"", height, "\" data-x-min=\"", num(x0), "\" data-x-max=\"", num(x1),
           "\" data-y-min=\"", num(y0), "\" data-y-max=\"", num(y1), "\" data-log-y=\"", log_y ? 1 : 0, "\">\n");
  o += str("<rect x=\"0\" y=\"0\" width=\"", W, "\" height=\"", H, "\" fill=\"white\"/>\n");
  o += str("<text x=\"", left + width / 2, "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", xml_escape(metric),
           " vs step</text>\n");
  // Axes, ticks, grid lines and labels.
  o += "<g stroke=\"#333\" fill=\"none\">\n";
  o += str("<line x1=\"", left, "\" y1=\"", top + height, "\" x2=\"", left + width, "\" y2=\"", top + height, "\"/>\n");
  o += str("<line x1=\"", left, "\" y1=\"", top, "\" x2=\"", left, "\" y2=\"", top + height, "\"/>\n");
  o += "</g>\n<g fill=\"#333\">\n";
  for (double t : nice_ticks(x0, x1, 6)) {
    const double x = px(t);
    o += str("<line x1=\"", num(x, "%.3f"), "\" y1=\"", top + height, "\" x2=\"", num(x, "%.3f"), "\" y2=\"",
             top + height + 5, "\" stroke=\"#333\"/>\n");
    o += str("<text x=\"", num(x, "%.3f"), "\" y=\"", top + height + 18, "\" text-anchor=\"middle\">", num(t, "%g"), "</text>\n");
  }
  std::vector<double> yt;
  if (log_y) {
    for (double e = std::floor(std::log10(y0)); e <= std::ceil(std::log10(y1)); ++e)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (v >= y0 * (1 - 1e-12) && v <= y1 * (1 + 1e-12)) yt.push_back(v);
      }
    if (yt.size() < 2) yt = {y0, y1};
  } else {
    yt = nice_ticks(y0, y1, 6);
  }
  for (double t : yt) {
    const double y = py(t);
    o += str("<line x1=\"", left - 5, "\" y1=\"", num(y, "%.3f"), "\" x2=\"", left + width, "\" y2=\"", num(y, "%.3f"),
             "\" stroke=\"#ddd\"/>\n");
    o += str("<text x=\"", left - 8, "\" y=\"", num(y + 4, "%.3f"), "\" text-anchor=\"end\">", num(t, "%g"), "</text>\n");
  }
  o += str("<text x=\"", left + width / 2, "\" y=\"", top + height + 38, "\" text-anchor=\"middle\">step</text>\n");
  o += str("<text transform=\"translate(18 ", top + height / 2, ") rotate(-90)\" text-anchor=\"middle\">",
           xml_escape(metric), log_y ? " (log scale)" : "", "</text>\n");
  o += "</g>\n";
  // One path per run, then the legend.
  for (size_t i = 0; i < all.size(); ++i) {
    const Series& s = all[i];
    std::string d, steps, values;
    for (size_t k = 0; k < s.values.size(); ++k) {
      d += str(k ? " L" : "M", num(px(s.steps[k]), "%.3f"), " ", num(py(s.values[k]), "%.3f"));
      steps += (k ? " " : "") + num(s.steps[k]);
      values += (k ? " " : "") + num(s.values[k]);
    }
    o += str("<path d=\"", d, "\" fill=\"none\" stroke=\"", colors[i % 10], "\" stroke-width=\"1.5\" data-run=\"",
             xml_escape(s.name), "\" data-steps=\"", steps, "\" data-values=\"", values, "\"/>\n");
  }
  o += "<g font-size=\"11\">\n";
  for (size_t i = 0; i < all.size(); ++i) {
    const double y = top + 10 + 18 * static_cast<double>(i);
    o += str("<line x1=\"", left + width + 20, "\" y1=\"", y, "\" x2=\"", left + width + 44, "\" y2=\"", y, "\" stroke=\"",
             colors[i % 10], "\" stroke-width=\"2\"/>\n");
    o += str("<text x=\"", left + width + 50, "\" y=\"", y + 4, "\">", xml_escape(all[i].name), "</text>\n");
  }
  o += "</g>\n</svg>\n";
  return o;
}

}  // namespace dl::sweep
