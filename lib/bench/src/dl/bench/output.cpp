#include "dl/bench/output.hpp"

#include <cstdio>
#include <ostream>
#include <map>
#include <optional>

#include "dl/bench/collective.hpp"
#include "dl/core/error.hpp"
#include "dl/io/csv.hpp"
#include "dl/plan/bench_input.hpp"

namespace dl::bench {

namespace {

// A value as a csv cell: numbers in JSON's round-trip form, so they parse back to the same double.
std::string csv_value(const Row& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csv_field(v.get<std::string>());
  return csv_field(v.dump());
}

std::string csv_header(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? "," : "") + csv_field(keys[i]);
  return out + "\n";
}

std::string csv_line(const Row& r, const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ",";
    auto it = r.find(keys[i]);
    if (it != r.end()) out += csv_value(*it);
  }
  return out + "\n";
}

std::vector<std::string> row_keys(const std::vector<Row>& rows) {
  std::vector<std::string> keys;
  std::map<std::string, bool> seen;
  for (const Row& r : rows)
    for (const auto& [k, v] : r.items())
      if (!seen[k]) {
        seen[k] = true;
        keys.push_back(k);
      }
  return keys;
}

std::string render_csv(const std::vector<Row>& rows) {
  const std::vector<std::string> keys = row_keys(rows);
  std::string out = csv_header(keys);
  for (const Row& r : rows) out += csv_line(r, keys);
  return out;
}

// ---- human tables ----------------------------------------------------------------------------

std::optional<double> number(const Row& r, const std::string& key) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
std::string text(const Row& r, const std::string& key) {
  auto it = r.find(key);
  if (it == r.end()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

Cell si(const Row& r, const std::string& key, const std::string& unit) {
  auto v = number(r, key);
  if (!v) return Cell::null();
  std::string t = format_si(*v, unit);
  if (unit.empty()) t.erase(t.find(' '), 1);  // "28.6k", not "28.6 k"
  return Cell::num(*v, t);
}
Cell dur(const Row& r, const std::string& key) {
  auto v = number(r, key);
  return v ? Cell::num(*v, format_duration(*v)) : Cell::null();
}
Cell pct(const Row& r, const std::string& key, double scale = 1.0) {
  auto v = number(r, key);
  return v ? Cell::num(*v, format_fixed(*v * scale, 1) + "%") : Cell::null();
}
Cell integer(const Row& r, const std::string& key) {
  auto it = r.find(key);
  return it != r.end() && it->is_number_integer() ? Cell::integer(it->get<int64_t>()) : Cell::null();
}
Cell spread(const Row& r, const std::string& lo, const std::string& hi) {
  auto a = number(r, lo), b = number(r, hi);
  return a && b ? Cell::str(format_duration(*a) + " .. " + format_duration(*b)) : Cell::null();
}

Table gemm_table(const std::vector<Row>& rows) {
  Table t({{"dtype", "dtype"}, {"m", "M", true}, {"n", "N", true}, {"k", "K", true}, {"time_s", "time", true},
           {"spread", "min .. max", true}, {"flops", "FLOP/s", true}, {"peak_flops", "peak", true},
           {"pct_peak", "% peak", true}, {"checked", "checked", true}, {"max_rel_error", "max rel err", true}});
  for (const Row& r : rows) {
    auto err = number(r, "max_rel_error");
    char e[32];
    std::snprintf(e, sizeof e, "%.1e", err.value_or(0.0));
    t.add_row({Cell::str(text(r, "dtype")), integer(r, "m"), integer(r, "n"), integer(r, "k"), dur(r, "time_s"),
               spread(r, "time_min_s", "time_max_s"), si(r, "flops", "FLOP/s"), si(r, "peak_flops", "FLOP/s"),
               pct(r, "pct_peak"),
               Cell::str(text(r, "checked") + (number(r, "wrong").value_or(0) > 0 ? " (" + text(r, "wrong") + " wrong)" : " ok")),
               err ? Cell::num(*err, e) : Cell::null()});
  }
  return t;
}

Table memory_table(const std::vector<Row>& rows) {
  Table t({{"direction", "direction"}, {"bytes", "size", true}, {"time_s", "time", true},
           {"spread", "min .. max", true}, {"bytes_per_s", "read+write", true}, {"peak_bytes_per_s", "peak", true},
           {"pct_peak", "% peak", true}, {"checked", "checked", true}});
  for (const Row& r : rows) {
    auto bytes = number(r, "bytes");
    t.add_row({Cell::str(text(r, "direction")), bytes ? Cell::num(*bytes, format_bytes(*bytes, true)) : Cell::null(),
               dur(r, "time_s"), spread(r, "time_min_s", "time_max_s"), si(r, "bytes_per_s", "B/s"),
               si(r, "peak_bytes_per_s", "B/s"), pct(r, "pct_peak"),
               Cell::str(text(r, "checked") + (number(r, "wrong").value_or(0) > 0 ? " (" + text(r, "wrong") + " wrong)" : " ok"))});
  }
  return t;
}

Table collective_md_table(const std::vector<Row>& rows) {
  std::vector<Column> cols = {{"size", "size (B)", true}, {"count", "count (elements)", true}, {"type", "type"},
                              {"redop", "redop"}, {"root", "root", true}};
  for (const char* p : {"oop", "ip"})
    for (const char* k : {"time_us", "algbw", "busbw", "wrong"}) {
      std::string key = std::string(p) + "_" + k, name = std::string(k) == "time_us" ? "time (us)" : std::string(k) == "wrong" ? "#wrong" : std::string(k) + " (GB/s)";
      cols.push_back({key, std::string(p) + " " + name, true});
    }
  Table t(cols);
  for (const Row& r : rows) {
    std::vector<Cell> c = {integer(r, "size"), integer(r, "count"), Cell::str(text(r, "type")), Cell::str(text(r, "redop")),
                           integer(r, "root")};
    for (const char* p : {"oop_", "ip_"}) {
      std::string k(p);
      auto tm = number(r, k + "time_us");
      c.push_back(tm ? Cell::num(*tm, format_fixed(*tm, *tm >= 10000 ? 0 : *tm >= 100 ? 1 : 2)) : Cell::null());
      for (const char* b : {"algbw", "busbw"}) {
        auto v = number(r, k + b);
        c.push_back(v ? Cell::num(*v, format_fixed(*v, 2)) : Cell::null());
      }
      c.push_back(integer(r, k + "wrong"));
    }
    t.add_row(std::move(c));
  }
  return t;
}

Table train_table(const std::vector<Row>& rows) {
  Table t({{"config", "config"}, {"model_params", "params", true}, {"batch_tokens", "tokens/step", true},
           {"tokens_per_sec", "tokens/s", true}, {"samples_per_sec", "samples/s", true}, {"mfu", "MFU", true},
           {"step_s", "step", true}, {"compute_s", "compute", true}, {"comm_s", "comm", true}, {"data_s", "data", true},
           {"pipeline_wait_s", "pipeline", true}, {"optimizer_s", "optimizer", true}});
  for (const Row& r : rows)
    t.add_row({Cell::str(text(r, "config")), si(r, "model_params", ""), integer(r, "batch_tokens"), si(r, "tokens_per_sec", ""),
               si(r, "samples_per_sec", ""), pct(r, "mfu", 100.0), dur(r, "step_s"), dur(r, "compute_s"), dur(r, "comm_s"),
               dur(r, "data_s"), dur(r, "pipeline_wait_s"), dur(r, "optimizer_s")});
  return t;
}

// "gemm on AMD EPYC (cpu, 2 threads), OpenBLAS 0.3.21 cblas_sgemm, host box, dlkit 0.1.0"
std::string section_title(const std::string& bench, const Row& first) {
  std::string s = bench + " on " + text(first, "device") + " (" + text(first, "device_type");
  if (parse_choice<plan::BenchKind>(bench) == plan::BenchKind::collective) s += ", " + text(first, "nproc") + " ranks, " + text(first, "op");
  else s += ", " + text(first, "threads") + " threads";
  s += "), " + text(first, "library") + ", host " + text(first, "host") + ", dlkit " + text(first, "dlkit_version");
  return s;
}

std::string notes_text(const Report& report, bool md) {
  std::string out;
  if (report.notes.empty()) return out;
  out += "\n";
  for (const auto& n : report.notes) out += (md ? "- " : "# ") + n + "\n";
  return out;
}

std::string render_human(const Report& report, bool md) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<Row>> groups;
  for (const Row& r : report.rows) {
    std::string b = text(r, "benchmark");
    if (!groups.count(b)) order.push_back(b);
    groups[b].push_back(r);
  }
  std::string out;
  for (const auto& b : order) {
    const auto& rows = groups[b];
    if (!out.empty()) out += "\n";
    out += (md ? "### " : "# ") + section_title(b, rows.front()) + "\n";
    if (md) out += "\n";
    using enum plan::BenchKind;
    const std::optional<plan::BenchKind> kind = parse_choice<plan::BenchKind>(b);
    if (kind == collective && !md) {
      out += format_nccl_table(rows);
      continue;
    }
    Table t = kind == gemm ? gemm_table(rows) : kind == memory ? memory_table(rows) : kind == train ? train_table(rows)
                                                                                                 : collective_md_table(rows);
    out += t.render(md ? OutputFormat::md : OutputFormat::table);
    if (kind == collective) {
      double sum = 0;
      int n = 0;
      for (const Row& r : rows)
        for (const char* k : {"oop_busbw", "ip_busbw"}) {
          sum += number(r, k).value_or(0);
          ++n;
        }
      out += "\nAvg bus bandwidth: " + format_fixed(n ? sum / n : 0.0, 3) + " GB/s\n";
    }
  }
  return out + notes_text(report, md);
}

}  // namespace

std::string render_report(const Report& given, OutputFormat format) {
  const Report report = with_emulation_marked(given);
  switch (format) {
    case OutputFormat::json: {
      Row arr = Row::array();
      for (const Row& r : report.rows) arr.push_back(r);
      return arr.dump(2) + "\n";
    }
    case OutputFormat::jsonl: {
      std::string out;
      for (const Row& r : report.rows) out += r.dump() + "\n";
      return out;
    }
    case OutputFormat::csv: return render_csv(report.rows);
    case OutputFormat::md: return render_human(report, true);
    case OutputFormat::table: return render_human(report, false);
  }
  return "";
}

void RowStream::add(const Row& given) {
  const Row row = with_emulation_marked(Report{{given}, {}, {}}).rows.front();
  const bool first = added_++ == 0;
  switch (format_) {
    case OutputFormat::table:
      if (first) out_ << "# " << section_title(text(row, "benchmark"), row) << "\n" << nccl_table_header();
      out_ << nccl_table_line(row);
      break;
    case OutputFormat::jsonl: out_ << row.dump() << "\n"; break;
    case OutputFormat::csv:
      if (first) {
        keys_ = row_keys({row});
        out_ << csv_header(keys_);
      }
      out_ << csv_line(row, keys_);
      break;
    case OutputFormat::json:
    case OutputFormat::md: return;
  }
  out_.flush();
}

void RowStream::finish(const Report& given) {
  switch (format_) {
    case OutputFormat::table:
      if (added_) out_ << nccl_table_footer(with_emulation_marked(given).rows);
      out_ << notes_text(given, false);
      break;
    case OutputFormat::jsonl:
    case OutputFormat::csv: break;
    case OutputFormat::json:
    case OutputFormat::md: out_ << render_report(given, format_); break;
  }
  out_.flush();
}

std::vector<Row> parse_rows(const std::string& content, OutputFormat format, const std::string& source) {
  switch (format) {
    case OutputFormat::json: return plan::parse_bench_output(content, source, plan::BenchRowsFormat::json);
    case OutputFormat::jsonl: return plan::parse_bench_output(content, source, plan::BenchRowsFormat::jsonl);
    case OutputFormat::csv: return plan::parse_bench_output(content, source, plan::BenchRowsFormat::csv);
    case OutputFormat::table:
    case OutputFormat::md: break;
  }
  throw_usage(source, ": ", format_name(format), " is for people; read back json, jsonl or csv");
}

}  // namespace dl::bench
