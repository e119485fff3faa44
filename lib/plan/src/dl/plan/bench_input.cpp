#include "dl/plan/bench_input.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/input_file.hpp"
#include "dl/io/csv.hpp"
#include "dl/plan/gpus.hpp"

namespace dl::plan {

using nlohmann::json;

namespace {

constexpr const char* kSchema = "dlkit-bench/1";

void check_row(const nlohmann::ordered_json& row, const std::string& where) {
  if (!row.is_object()) throw_usage(where, ": a dl-bench row must be a JSON object");
  if (!row.contains("schema") || !row["schema"].is_string() || row["schema"] != kSchema)
    throw_usage(where, ": not a dl-bench row (schema must be \"", kSchema, "\"; see docs/FORMATS.md)");
  if (!row.contains("benchmark") || !row["benchmark"].is_string())
    throw_usage(where, ": dl-bench row without a \"benchmark\" kind");
}

// A csv cell as the JSON value it was written from: booleans, integers, finite doubles, else text.
nlohmann::ordered_json cell_value(const std::string& s) {
  if (s == "true") return true;
  if (s == "false") return false;
  const char c = s[0];
  if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.') {
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0) return static_cast<int64_t>(i);
    double d = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(d)) return d;
  }
  return s;
}

// A number from a row, or nullopt when absent or null.
std::optional<double> num(const json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string text(const json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

std::optional<BenchKind> kind(const json& row) { return parse_choice<BenchKind>(text(row, "benchmark")); }

}  // namespace

std::vector<nlohmann::ordered_json> parse_bench_output(const std::string& content, const std::string& source,
                                                       BenchRowsFormat format) {
  using Row = nlohmann::ordered_json;
  std::vector<Row> rows;
  size_t first = content.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    throw_usage(source, ": empty file (expected dl-bench --format ", format == BenchRowsFormat::csv ? "csv" : "json or jsonl",
                " output)");
  if (format == BenchRowsFormat::detect) format = content[first] == '[' ? BenchRowsFormat::json : BenchRowsFormat::jsonl;
  if (format == BenchRowsFormat::json) {
    Row doc;
    try {
      doc = Row::parse(content);
    } catch (const nlohmann::json::exception& e) {
      throw_usage(source, ": not valid JSON (", e.what(), ")");
    }
    if (!doc.is_array()) throw_usage(source, ": expected a JSON array of rows");
    for (size_t i = 0; i < doc.size(); ++i) {
      check_row(doc[i], str(source, ": row ", i + 1));
      rows.push_back(std::move(doc[i]));
    }
  } else if (format == BenchRowsFormat::jsonl) {
    std::istringstream in(content);
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Row row;
      try {
        row = Row::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw_usage(source, ":", n, ": not valid JSON (", e.what(), ")");
      }
      check_row(row, str(source, ":", n));
      rows.push_back(std::move(row));
    }
  } else {
    const auto records = parse_csv(content, source);
    for (size_t i = 1; i < records.size(); ++i) {
      const auto& header = records.front().cells;
      const auto& cells = records[i].cells;
      const std::string where = str(source, ":", records[i].line);
      if (cells.size() != header.size()) throw_usage(where, ": ", cells.size(), " cells for ", header.size(), " columns");
      Row r = Row::object();
      for (size_t c = 0; c < header.size(); ++c)
        if (!cells[c].empty()) r[header[c]] = cell_value(cells[c]);
      check_row(r, where);
      rows.push_back(std::move(r));
    }
  }
  if (rows.empty()) throw_usage(source, ": no dl-bench rows");
  return rows;
}

std::vector<json> parse_bench_rows(const std::string& content, const std::string& source) {
  std::vector<json> rows;
  for (const auto& r : parse_bench_output(content, source)) rows.emplace_back(r);
  return rows;
}

std::vector<json> read_bench_rows(const std::string& path) {
  std::ostringstream os;
  if (path == "-") {
    os << std::cin.rdbuf();
    return parse_bench_rows(os.str(), "stdin");
  }
  const std::string text = read_naming_option("{bench}: cannot read", [&](const std::string& what) { return read_input_file(path, what); });
  return parse_bench_rows(text, path);
}

std::string bench_row_gpu(const json& row) {
  const std::string gm = text(row, "gpu_model");
  return gm.empty() ? "" : canonical_gpu(gm).value_or(gm);
}

std::string ignored_bench_rows_note(size_t rows, const std::string& what, const std::string& source) {
  return str("bench: ", rows, " ", what, " rows", source.empty() ? "" : " of " + source,
             " ignored: a dl-bench row calibrates only a GPU of the model it measured");
}

BenchSummary summarize_bench(const std::vector<json>& all_rows, Precision precision,
                             const std::string& gpu_model, const std::string& source) {
  BenchSummary s;
  s.source = source;
  std::string want;
  if (!gpu_model.empty()) want = canonical_gpu(gpu_model).value_or(gpu_model);
  std::vector<const json*> rows;
  std::set<std::string> models;
  std::map<std::string, size_t> other;  // rows set aside, by model ("" = CPU)
  for (const auto& r : all_rows) {
    const std::string canon = bench_row_gpu(r);
    if (canon.empty() || (!want.empty() && canon != want)) {
      ++other[canon];
      continue;
    }
    rows.push_back(&r);
    models.insert(canon);
  }
  for (const auto& [model, n] : other)
    s.ignored.push_back(ignored_bench_rows_note(n, model.empty() ? "CPU (no gpu_model)" : model, source));
  if (rows.empty()) return s;
  if (models.size() > 1)
    throw_usage(source.empty() ? "bench" : source, ": rows for several GPU models (", join(std::vector(models.begin(), models.end()), ", "),
                "); pick one with --gpu MODEL");
  s.rows = rows.size();
  s.gpu_model = *models.begin();
  s.device = text(*rows.front(), "device");
  s.device_type = text(*rows.front(), "device_type");

  // gemm
  using enum MathPrecision;
  std::vector<MathPrecision> order;
  if (precision == Precision::bf16) order = {bf16, fp16};
  else if (precision == Precision::fp16) order = {fp16, bf16};
  else if (precision == Precision::fp8) order = {fp8};
  else order = {fp32, tf32};
  auto best_gemm = [&](std::optional<MathPrecision> dtype) -> std::optional<std::pair<double, std::string>> {
    std::optional<std::pair<double, std::string>> best;
    for (const json* r : rows) {
      if (kind(*r) != BenchKind::gemm) continue;
      auto f = num(*r, "flops");
      if (!f || *f <= 0) continue;
      std::string d = text(*r, "dtype");
      if (dtype && parse_choice<MathPrecision>(d) != dtype) continue;
      if (!best || *f > best->first) best = std::make_pair(*f, d);
    }
    return best;
  };
  std::optional<std::pair<double, std::string>> g;
  for (MathPrecision d : order)
    if (!g) g = best_gemm(d);
  // A 16-bit GEMM is no measure of FP8 speed: fp8 takes only FP8 rows.
  if (!g && precision != Precision::fp8) g = best_gemm(std::nullopt);
  if (g) {
    s.gemm_flops = g->first;
    s.gemm_dtype = g->second;
  }

  // train: prefer rows at the training precision
  for (int pass = 0; pass < (precision == Precision::fp8 ? 1 : 2) && !s.train_flops; ++pass)
    for (const json* r : rows) {
      if (kind(*r) != BenchKind::train) continue;
      if (pass == 0 && parse_choice<Precision>(text(*r, "precision")) != precision) continue;
      auto tps = num(*r, "tokens_per_sec"), fpt = num(*r, "flops_per_token");
      double nd = num(*r, "num_devices").value_or(num(*r, "world").value_or(1.0));
      if (!tps || !fpt || *tps <= 0 || *fpt <= 0 || nd <= 0) continue;
      double f = *tps * *fpt / nd;
      if (!s.train_flops || f > *s.train_flops) {
        s.train_flops = f;
        s.train_config = text(*r, "config");
      }
    }

  // collective: all-reduce at the largest size, else any op at its largest size
  for (int pass = 0; pass < 2 && !s.busbw; ++pass) {
    for (const json* r : rows) {
      if (kind(*r) != BenchKind::collective) continue;
      std::string op = lower_alnum(text(*r, "op"));
      if (pass == 0 && op != "allreduce") continue;
      double nproc = num(*r, "nproc").value_or(num(*r, "num_devices").value_or(0));
      if (nproc < 2) continue;
      double size = num(*r, "size").value_or(0);
      double bw = std::max(num(*r, "oop_busbw").value_or(0), num(*r, "ip_busbw").value_or(0)) * 1e9;
      if (bw <= 0) continue;
      if (!s.busbw || size > s.busbw_size || (size == s.busbw_size && bw > *s.busbw)) {
        s.busbw = bw;
        s.busbw_size = size;
        s.busbw_op = text(*r, "op");
        s.busbw_nproc = static_cast<int64_t>(nproc);
      }
    }
  }

  // memory: host <-> device copies
  for (const json* r : rows) {
    if (kind(*r) != BenchKind::memory) continue;
    const std::optional<CopyDirection> dir = parse_choice<CopyDirection>(text(*r, "direction"));
    if (dir != CopyDirection::h2d && dir != CopyDirection::d2h) continue;
    auto bytes = num(*r, "bytes"), t = num(*r, "time_s");
    if (!bytes || !t || *t <= 0) continue;
    double bw = *bytes / *t;
    if (!s.host_bw || bw > *s.host_bw) s.host_bw = bw;
  }
  return s;
}

BenchSummary read_bench_summary(const std::string& path, Precision precision, const std::string& gpu_model) {
  return summarize_bench(read_bench_rows(path), precision, gpu_model, path == "-" ? "stdin" : path);
}

Hardware apply_bench(const Hardware& base, const BenchSummary& b, std::vector<std::string>* notes) {
  Hardware hw = base;
  auto note = [&](std::string line) {
    if (notes) notes->push_back(std::move(line));
  };
  std::string from = b.source.empty() ? "the bench file" : b.source;
  for (const auto& n : b.ignored) note(n);
  std::vector<std::string> used;
  if (!b.gpu_model.empty()) hw.gpu_model = b.gpu_model;
  if (b.train_flops) {
    hw.peak_flops = *b.train_flops;
    hw.achievable_fraction = 1.0;
    used.push_back("train");
    note(str("compute: ", format_si(*b.train_flops, "FLOP/s"), " per device achieved in training (",
             b.train_config.empty() ? "train row" : b.train_config, ", ", from, "); no MFU factor applied"));
  } else if (b.gemm_flops) {
    hw.peak_flops = *b.gemm_flops;
    used.push_back("gemm");
    note(str("compute: ", format_si(*b.gemm_flops, "FLOP/s"), " measured ", b.gemm_dtype, " GEMM (", from,
             ") x ", format_fixed(hw.achievable_fraction, 2), " achievable fraction"));
  }
  if (b.busbw) {
    hw.intra_node_bw = *b.busbw;
    used.push_back("collective");
    note(str("intra-node bandwidth: ", format_fixed(*b.busbw / 1e9, 1), " GB/s busbw measured (", b.busbw_op, ", ",
             b.busbw_nproc, " ranks, ", format_bytes(b.busbw_size), " messages, ", from, ")"));
  }
  if (b.host_bw) {
    hw.host_bw = *b.host_bw;
    used.push_back("memory");
    note(str("host bandwidth: ", format_fixed(*b.host_bw / 1e9, 1), " GB/s measured host<->device copy (", from, ")"));
  }
  if (!used.empty()) {
    hw.source = "measured (" + join(used, "+") + ") from " + from;
  } else {
    note(str(from, ": no gemm, train, collective or memory rows ", b.rows ? "usable" : "of this GPU",
             " for the plan; datasheet values kept"));
  }
  return hw;
}

}  // namespace dl::plan
