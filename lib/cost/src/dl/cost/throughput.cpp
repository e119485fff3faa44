#include "dl/cost/throughput.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/input_file.hpp"
#include "dl/cost/catalog.hpp"
#include "dl/io/csv.hpp"
#include "dl/plan/gpus.hpp"

namespace dl::cost {

namespace fs = std::filesystem;

Precision throughput_precision(Precision training_precision) {
  // fp8 has no table: its speed is the FP8 peak's (SpeedModel::speed skips the table).
  if (training_precision == Precision::fp8) return Precision::fp8;
  return training_precision == Precision::fp32 ? Precision::fp32 : Precision::fp16;
}

const RelativeEntry* RelativeThroughput::find(const std::string& gpu_model, Precision training_precision) const {
  const Precision p = throughput_precision(training_precision);
  for (const auto& e : entries)
    if (e.gpu == gpu_model && e.precision == p) return &e;
  return nullptr;
}

namespace {

double geomean(const std::vector<double>& xs) {
  double s = 0;
  for (double x : xs) s += std::log(x);
  return std::exp(s / static_cast<double>(xs.size()));
}

}  // namespace

BenchmarkGpu benchmark_gpu(const std::string& row_name) {
  static const std::regex count_gpu(R"(^(\d+)x([A-Za-z].*)$)");
  static const std::regex count_only(R"(^(\d+)x$)");
  static const std::regex v2_part(R"(^(\d+GB|SXM\d?|PCIe|NVL)$)", std::regex::icase);
  BenchmarkGpu g;
  std::smatch m;
  if (row_name.find('_') != std::string::npos && row_name.find(' ') == std::string::npos) {
    // v2 id: the "<count>x<GPU>" token, then the GPU's size and form-factor tokens.
    std::vector<std::string> parts;
    std::stringstream ss(row_name);
    std::string t;
    while (std::getline(ss, t, '_')) parts.push_back(t);
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!std::regex_match(parts[i], m, count_gpu)) continue;
      g.count = std::atoll(m[1].str().c_str());
      std::vector<std::string> name = {m[2].str()};
      for (size_t j = i + 1; j < parts.size() && std::regex_match(parts[j], v2_part); ++j) name.push_back(parts[j]);
      g.name = join(name, " ");
      break;
    }
    if (g.name.empty()) g.name = row_name;
    g.model = plan::canonical_gpu(g.name).value_or("");
    return g;
  }
  // v1 name: drop "2x" / "4xV100" counts, then leading system or site words ("Dell", "SMC",
  // "LambdaCloud") until the rest is a GPU dlkit knows.
  std::vector<std::string> tokens;
  for (const auto& t : split_words(row_name)) {
    if (std::regex_match(t, m, count_only)) {
      g.count = std::atoll(m[1].str().c_str());
    } else if (std::regex_match(t, m, count_gpu) && std::isdigit(static_cast<unsigned char>(t[0]))) {
      g.count = std::atoll(m[1].str().c_str());
      tokens.push_back(m[2].str());
    } else {
      tokens.push_back(t);
    }
  }
  g.name = join(tokens, " ");
  for (size_t from = 0; from < tokens.size(); ++from) {
    const std::string tail = join(std::span(tokens).subspan(from), " ");
    if (auto model = plan::canonical_gpu(tail)) {
      g.name = tail;
      g.model = *model;
      break;
    }
  }
  return g;
}

BenchmarkTable parse_benchmark_csv(const std::string& text, const std::string& source, std::optional<Precision> precision) {
  BenchmarkTable t;
  t.file = fs::path(source).filename().string();
  if (precision) {
    t.precision = *precision;
  } else {
    if (t.file.find("fp16") != std::string::npos) t.precision = Precision::fp16;
    else if (t.file.find("fp32") != std::string::npos) t.precision = Precision::fp32;
    else throw_usage(source, ": cannot tell the precision from the file name (it names neither fp32 nor fp16)");
  }
  if (t.precision == Precision::bf16) throw_usage(source, ": precision must be fp32 or fp16");
  auto records = parse_csv(text, source);
  if (records.size() < 2) throw_usage(source, ": no benchmark rows");
  const CsvRecord& header = records.front();
  const bool v1 = !header.cells.empty() && header.cells[0] == "name_gpu";
  const int64_t c_num = v1 ? csv_column(header, "num_gpu") : -1;
  if (v1 && c_num < 0) throw_usage(source, ": v1 benchmark table without a num_gpu column");
  std::vector<size_t> bench_cols;
  for (size_t i = 1; i < header.cells.size(); ++i) {
    const std::string& h = header.cells[i];
    if (v1 && (h == "num_gpu" || h == "watt" || h == "price")) continue;
    bench_cols.push_back(i);
    t.benchmarks.push_back(h);
  }
  if (bench_cols.empty()) throw_usage(source, ": no benchmark columns");
  for (size_t r = 1; r < records.size(); ++r) {
    const CsvRecord& rec = records[r];
    if (rec.cells.size() != header.cells.size())
      throw_usage(source, ":", rec.line, ": ", rec.cells.size(), " cells, the header has ", header.cells.size());
    const std::string& name = rec.cells[0];
    BenchmarkGpu g = benchmark_gpu(name);
    int64_t count = g.count;
    if (v1) {
      char* end = nullptr;
      const std::string& c = rec.cells[static_cast<size_t>(c_num)];
      double v = std::strtod(c.c_str(), &end);
      if (c.empty() || end != c.c_str() + c.size()) throw_usage(source, ":", rec.line, ": num_gpu '", c, "' is not a number");
      count = static_cast<int64_t>(v);
    }
    if (count != 1) continue;
    if (g.model.empty()) {
      t.unmapped.push_back(name);
      continue;
    }
    t.names[g.model].push_back(name);
    auto& per = t.values[g.model];
    for (size_t b = 0; b < bench_cols.size(); ++b) {
      const std::string& c = rec.cells[bench_cols[b]];
      if (c.find_first_not_of(" \t") == std::string::npos) {
        ++t.empty_cells;
        continue;
      }
      char* end = nullptr;
      double v = std::strtod(c.c_str(), &end);
      if (end != c.c_str() + c.size() || !std::isfinite(v))
        throw_usage(source, ":", rec.line, ": ", t.benchmarks[b], " value '", c, "' is not a number");
      if (v <= 0) {
        ++t.empty_cells;
        continue;
      }
      per[t.benchmarks[b]].push_back(v);
    }
  }
  return t;
}

RelativeThroughput derive_relative_throughput(const std::vector<BenchmarkTable>& tables, const std::string& reference) {
  RelativeThroughput rt;
  auto ref = plan::canonical_gpu(reference);
  if (!ref) throw_usage("reference GPU '", reference, "' is not in dlkit's GPU table");
  rt.reference = *ref;
  rt.source = "benchmark tables:";
  for (const auto& t : tables) rt.source += " " + t.file;
  rt.method = "per GPU: geometric mean over benchmarks of (GPU / reference) throughput ratios; single-GPU rows; rows "
              "of one GPU combined per benchmark by geometric mean; empty or 0 cells skipped";
  for (const Precision precision : {Precision::fp32, Precision::fp16}) {
    std::map<std::string, RelativeEntry> rated;
    for (const auto& t : tables) {
      if (t.precision != precision) continue;
      for (const auto& u : t.unmapped) rt.notes.push_back(t.file + ": '" + u + "' is not a GPU in dlkit's table: skipped");
      if (t.empty_cells > 0)
        rt.notes.push_back(str(t.file, ": ", t.empty_cells, " empty or 0 cells of single-GPU rows skipped (a benchmark "
                               "missing for a GPU leaves that benchmark out of its ratio)"));
      std::map<std::string, std::map<std::string, double>> means;
      for (const auto& [model, per] : t.values)
        for (const auto& [b, vals] : per) means[model][b] = geomean(vals);
      std::string anchor;
      double base = 1.0;
      if (means.count(rt.reference)) {
        anchor = rt.reference;
      } else {
        size_t best_rows = 0;
        for (const auto& [model, per] : means) {
          if (!rated.count(model)) continue;
          size_t rows = t.names.at(model).size();
          if (anchor.empty() || rows > best_rows || (rows == best_rows && model > anchor)) anchor = model, best_rows = rows;
        }
        if (anchor.empty()) {
          rt.notes.push_back(t.file + ": no GPU in common with the earlier tables: skipped");
          continue;
        }
        base = rated.at(anchor).ratio;
      }
      for (const auto& [model, per] : means) {
        if (rated.count(model)) continue;
        std::vector<double> ratios;
        RelativeEntry e;
        for (const auto& b : t.benchmarks) {
          auto x = per.find(b);
          auto y = means[anchor].find(b);
          if (x != per.end() && y != means[anchor].end()) ratios.push_back(x->second / y->second);
          else e.missing.push_back(b);
        }
        if (ratios.empty()) {
          rt.notes.push_back(t.file + ": " + model + " has no benchmark in common with " + anchor + ": skipped");
          continue;
        }
        e.precision = precision;
        e.gpu = model;
        e.ratio = base * geomean(ratios);
        e.benchmarks = static_cast<int64_t>(ratios.size());
        e.rows = static_cast<int64_t>(t.names.at(model).size());
        e.file = t.file;
        e.via = anchor == rt.reference ? "" : anchor;
        if (!e.missing.empty())
          rt.notes.push_back(str(t.file, ": ", model, " vs ", anchor, ": ", join(e.missing, ", "),
                                 " missing (empty or 0) for one of the two: skipped for this pair; ", e.benchmarks,
                                 " benchmarks in the geometric mean"));
        rated[model] = e;
      }
    }
    std::vector<RelativeEntry> list;
    for (auto& [m, e] : rated) list.push_back(e);
    std::sort(list.begin(), list.end(), [](const RelativeEntry& a, const RelativeEntry& b) { return a.ratio > b.ratio; });
    for (auto& e : list) rt.entries.push_back(std::move(e));
  }
  return rt;
}

RelativeThroughput load_relative_throughput(const std::vector<std::string>& paths, const std::string& reference) {
  auto read = [](const fs::path& p) {
    return read_naming_option("{throughput}: cannot read", [&](const std::string& what) { return read_input_file(p, what); });
  };
  if (paths.empty()) {
    fs::path p = default_catalog_dir() / "relative-throughput.toml";
    return parse_relative_throughput_toml(read(p), p.string());
  }
  std::vector<RelativeThroughput> tomls;
  std::vector<BenchmarkTable> tables;
  for (const auto& p : paths) {
    if (fs::path(p).extension() == ".toml") tomls.push_back(parse_relative_throughput_toml(read(p), p));
    else tables.push_back(parse_benchmark_csv(read(p), p));
  }
  RelativeThroughput out;
  if (!tables.empty()) out = derive_relative_throughput(tables, reference);
  for (auto& t : tomls) {
    if (out.reference.empty()) {
      out = std::move(t);
      continue;
    }
    if (t.reference != out.reference)
      throw OptionError("{throughput}: ", ErrorKind::usage, str(t.path, " is relative to ", t.reference, ", the others to ", out.reference));
    for (auto& e : t.entries)
      if (!out.find(e.gpu, e.precision)) out.entries.push_back(std::move(e));
    out.source += "; " + t.source;
  }
  out.path = join(paths, ", ");
  return out;
}

}  // namespace dl::cost
