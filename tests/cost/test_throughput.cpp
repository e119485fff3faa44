// The relative-throughput table: benchmark row names, the geometric-mean derivation, and the
// shipped configs/catalog/relative-throughput.toml against ratios computed here, independently,
// from ../shared/data/lambda_pytorch-train-throughput-fp32.csv.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "dl/core/error.hpp"
#include "dl/cost/throughput.hpp"
#include "support/support.hpp"

using dl::test::has;

using namespace dl::cost;
using dl::Precision;

namespace {


// A small CSV reader for the benchmark files (no quoted fields in them): cells split at commas,
// empty cells kept as "".
std::vector<std::vector<std::string>> read_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& line : dl::test::lines(text)) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    size_t i = 0;
    for (;;) {
      size_t j = line.find(',', i);
      cells.push_back(line.substr(i, j == std::string::npos ? std::string::npos : j - i));
      if (j == std::string::npos) break;
      i = j + 1;
    }
    if (!cells.empty() && !cells.back().empty() && cells.back().back() == '\r') cells.back().pop_back();
    rows.push_back(cells);
  }
  return rows;
}

RelativeThroughput shipped() {
  auto p = dl::test::source_path("configs/catalog/relative-throughput.toml");
  return parse_relative_throughput_toml(dl::test::read_file(p), p.string());
}

}  // namespace

TEST_CASE("benchmark row names: GPU and count") {
  struct Case {
    const char* name;
    int64_t count;
    const char* model;
  };
  for (const Case& c : std::vector<Case>{
           {"H100 80GB SXM5", 0, "H100-SXM"},
           {"Dell H100 80GB SXM5", 0, "H100-SXM"},
           {"RAIDZ1 2x H100 80GB SXM5", 2, "H100-SXM"},
           {"LambdaCloud 4xV100 16GB", 4, "V100-SXM2-16GB"},
           {"LambdaCloud H100 80GB PCIe Gen5", 0, "H100-PCIe"},
           {"8x RTX 6000 Ada", 8, "RTX-6000-Ada"},
           {"Quadro RTX 8000", 0, "Quadro-RTX-8000"},
           {"LambdaCloud A10", 0, "A10"},
           {"LambdaOD_2x_Texas_1xH100_80GB_SXM5_192-222-52-120_v2", 1, "H100-SXM"},
           {"ASUS_8xH200_140GB_SXM_lambda-scalar_v2", 8, "H200"},
           {"LambdaOD_1x_Test_1xGH200_96GB_192-222-56-184_v2_bk", 1, "GH200-96GB"},
           {"LambdaOD_1x_Texas_1xH100_80GB_PCIe_209-20-158-50_v2", 1, "H100-PCIe"},
           {"LambdaOD_test_1xB200_192GB_129-213-83-251_v2", 1, "B200"},
           {"LambdaOD_test_1xB300_288GB_v2", 1, ""},                 // not in dlkit's GPU table
           {"LambdaOD_1x_1xGH200_80GB_192-222-58-35_v2", 1, ""},     // no 80 GB GH200
       }) {
    CAPTURE(c.name);
    BenchmarkGpu g = benchmark_gpu(c.name);
    CHECK(g.count == c.count);
    CHECK(g.model == c.model);
  }
}

TEST_CASE("shipped table reproduces the geometric-mean ratios of lambda_pytorch-train-throughput-fp32.csv") {
  const std::string file = "lambda_pytorch-train-throughput-fp32.csv";
  auto rows = read_csv(dl::test::read_file(dl::test::shared_path("data/" + file)));
  REQUIRE(rows.size() == 54);
  const auto& header = rows[0];
  REQUIRE(header.size() == 14);
  REQUIRE(header[0] == "name_gpu");
  REQUIRE(header[1] == "num_gpu");
  // Columns 4.. are benchmarks (ssd, bert_base_squad, ..., waveglow); their units differ by 10^4.
  const size_t first = 4;
  // The single-GPU rows and the model each is (written out here, not taken from the library).
  const std::map<std::string, std::string> model_of = {
      {"Quadro RTX 8000", "Quadro-RTX-8000"},
      {"LambdaCloud V100 16GB", "V100-SXM2-16GB"},
      {"RTX 3090", "RTX-3090"},
      {"LambdaCloud A10", "A10"},
      {"LambdaCloud A100 40GB PCIe", "A100-PCIe-40GB"},
      {"A100 80GB PCIe", "A100-PCIe-80GB"},
      {"A100 80GB SXM4", "A100-SXM-80GB"},
      {"RTX 6000 Ada", "RTX-6000-Ada"},
      {"RTX A6000", "RTX-A6000"},
      {"RTX 4090", "RTX-4090"},
      {"H100 80GB PCIe Gen5", "H100-PCIe"},
      {"LambdaCloud H100 80GB PCIe Gen5", "H100-PCIe"},
      {"H100 80GB SXM5", "H100-SXM"},
      {"Dell H100 80GB SXM5", "H100-SXM"},
      {"DellTexas H100 80GB SXM5", "H100-SXM"},
      {"SMC H100 80GB SXM5", "H100-SXM"},
      {"1CC H100 80GB SXM5", "H100-SXM"},
      {"RAIDZ1 H100 80GB SXM5", "H100-SXM"},
  };
  // model -> benchmark -> log values of its rows; empty and 0 cells are missing measurements.
  std::map<std::string, std::map<size_t, std::vector<double>>> logs;
  size_t single = 0, skipped_cells = 0;
  std::vector<std::string> skipped_what;
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    REQUIRE(row.size() == header.size());
    if (std::stod(row[1]) != 1.0) continue;
    ++single;
    auto it = model_of.find(row[0]);
    REQUIRE_MESSAGE(it != model_of.end(), row[0]);
    for (size_t b = first; b < row.size(); ++b) {
      if (row[b].empty() || std::stod(row[b]) <= 0) {
        ++skipped_cells;
        skipped_what.push_back(row[0] + ": " + header[b]);
        continue;
      }
      logs[it->second][b].push_back(std::log(std::stod(row[b])));
    }
  }
  CHECK(single == model_of.size());
  // The file has no empty cells but ten 0.0 cells: transformerxlbase and transformerxllarge of
  // five H100 SXM5 systems. Those benchmarks are skipped for those rows; H100-SXM keeps them
  // through the one row that has them.
  CHECK(skipped_cells == 10);
  std::string skipped_list;
  for (const auto& s : skipped_what) skipped_list += "  " + s + "\n";
  MESSAGE("cells skipped (empty or 0):\n", skipped_list);

  auto mean_of = [&](const std::string& model, size_t b) -> std::optional<double> {
    auto it = logs[model].find(b);
    if (it == logs[model].end() || it->second.empty()) return std::nullopt;
    double s = 0;
    for (double v : it->second) s += v;
    return s / static_cast<double>(it->second.size());  // log of the geometric mean
  };
  RelativeThroughput table = shipped();
  CHECK(table.reference == "A100-SXM-80GB");
  std::string report;
  size_t compared = 0;
  for (const auto& [model_name, per] : logs) {
    const auto& model = model_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
    double sum = 0;
    int n = 0;
    std::vector<std::string> missing;
    for (size_t b = first; b < header.size(); ++b) {
      auto x = mean_of(model, b), y = mean_of("A100-SXM-80GB", b);
      if (!x || !y) {
        missing.push_back(header[b]);  // missing for this GPU or the reference: left out of this pair
        continue;
      }
      sum += *x - *y;  // log of the per-benchmark ratio
      ++n;
    }
    REQUIRE(n > 0);
    const double expected = std::exp(sum / n);
    const RelativeEntry* e = table.find(model, Precision::fp32);
    REQUIRE_MESSAGE(e, model);
    CAPTURE(model);
    CHECK(e->file == file);
    CHECK(e->via.empty());
    CHECK(e->benchmarks == n);
    CHECK(e->missing.size() == missing.size());
    CHECK(e->ratio == doctest::Approx(expected).epsilon(1e-12));
    report += "  " + model + ": " + std::to_string(expected) + " (" + std::to_string(n) + " benchmarks)\n";
    ++compared;
  }
  CHECK(compared == 12);
  MESSAGE("fp32 ratios vs A100-SXM-80GB (geometric mean of per-benchmark ratios):\n", report);
  // Sanity of the numbers themselves.
  CHECK(table.find("A100-SXM-80GB", Precision::fp32)->ratio == 1.0);
  CHECK(table.find("H100-SXM", Precision::fp32)->ratio > table.find("H100-PCIe", Precision::fp32)->ratio);
  CHECK(table.find("H100-PCIe", Precision::fp32)->ratio > table.find("A100-PCIe-80GB", Precision::fp32)->ratio);
  // bf16 and fp16 training read the fp16 (mixed-precision) table.
  CHECK(table.find("RTX-4090", Precision::bf16) == table.find("RTX-4090", Precision::fp16));
  CHECK(table.find("RTX-4090", Precision::bf16)->precision == Precision::fp16);
  CHECK_FALSE(table.find("L4", Precision::bf16));  // not benchmarked by Lambda
}

TEST_CASE("the library's derivation from all four Lambda files equals the shipped table") {
  std::vector<BenchmarkTable> tables;
  for (const char* f : {"lambda_pytorch-train-throughput-fp32.csv", "lambda_pytorch-train-throughput-v2-fp32.csv",
                        "lambda_pytorch-train-throughput-fp16.csv", "lambda_pytorch-train-throughput-v2-fp16.csv"}) {
    auto p = dl::test::shared_path(std::string("data/") + f);
    tables.push_back(parse_benchmark_csv(dl::test::read_file(p), p.string()));
  }
  CHECK(tables[0].precision == Precision::fp32);
  CHECK(tables[2].precision == Precision::fp16);
  CHECK(tables[0].empty_cells == 10);
  RelativeThroughput derived = derive_relative_throughput(tables);
  RelativeThroughput ship = shipped();
  REQUIRE(derived.entries.size() == ship.entries.size());
  for (const auto& e : ship.entries) {
    CAPTURE(e.gpu);
    CAPTURE(e.precision);
    const RelativeEntry* d = derived.find(e.gpu, e.precision);
    REQUIRE(d);
    CHECK(d->ratio == doctest::Approx(e.ratio).epsilon(1e-12));
    CHECK(d->benchmarks == e.benchmarks);
    CHECK(d->rows == e.rows);
    CHECK(d->file == e.file);
    CHECK(d->via == e.via);
  }
  // H200 and GH200 only appear in the v2 files, which have no A100: chained through H100-SXM.
  const RelativeEntry* h200 = ship.find("H200", Precision::bf16);
  REQUIRE(h200);
  CHECK(h200->via == "H100-SXM");
  CHECK(h200->ratio > ship.find("H100-SXM", Precision::bf16)->ratio);
  std::string notes;
  for (const auto& n : derived.notes) notes += n + "\n";
  CHECK(has(notes, "'LambdaOD_1x_1xGH200_80GB_192-222-58-35_v2' is not a GPU in dlkit's table: skipped"));
  // B200 (in the table since it got a datasheet row) is rated through H100-SXM like H200.
  REQUIRE(ship.find("B200", Precision::bf16));
  CHECK(ship.find("B200", Precision::bf16)->via == "H100-SXM");
  CHECK(has(notes, "lambda_pytorch-train-throughput-fp32.csv: 10 empty or 0 cells of single-GPU rows skipped"));
}

TEST_CASE("derivation: geometric mean of ratios, empty cells skipped for that pair and said so") {
  // Three benchmarks whose units differ by 10^3; the H100 lacks b2 (empty) and the 4090 has b3 at 0.
  const std::string csv =
      "name_gpu,num_gpu,watt,price,b1,b2,b3\n"
      "A100 80GB SXM4,1.0,400,1,100.0,10.0,1000.0\n"
      "H100 80GB SXM5,1.0,700,1,200.0,,4000.0\n"
      "Dell H100 80GB SXM5,1.0,700,1,800.0,,4000.0\n"
      "RTX 4090,1.0,450,1,50.0,20.0,0.0\n"
      "2x RTX 4090,2.0,900,2,99.0,39.0,1.0\n"
      "TPU v9,1.0,1,1,1.0,1.0,1.0\n";
  BenchmarkTable t = parse_benchmark_csv(csv, "bench-fp16.csv");
  CHECK(t.precision == Precision::fp16);
  CHECK(t.benchmarks == std::vector<std::string>{"b1", "b2", "b3"});
  CHECK(t.empty_cells == 3);
  CHECK(t.unmapped == std::vector<std::string>{"TPU v9"});
  RelativeThroughput rt = derive_relative_throughput({t});
  // H100: b1 rows 200 and 800 -> geometric mean 400 -> ratio 4; b3 ratio 4; b2 missing.
  const RelativeEntry* h = rt.find("H100-SXM", Precision::bf16);
  REQUIRE(h);
  CHECK(h->ratio == doctest::Approx(4.0).epsilon(1e-12));
  CHECK(h->benchmarks == 2);
  CHECK(h->missing == std::vector<std::string>{"b2"});
  CHECK(h->rows == 2);
  // 4090: b1 0.5, b2 2, b3 missing -> sqrt(0.5 x 2) = 1 (the 2x row is not a single-GPU row).
  const RelativeEntry* r = rt.find("RTX-4090", Precision::fp16);
  REQUIRE(r);
  CHECK(r->ratio == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(r->missing == std::vector<std::string>{"b3"});
  // Averaging the raw numbers instead would give (50+20)/(100+10+0)... a different answer:
  CHECK(std::fabs(r->ratio - (50.0 + 20.0) / (100.0 + 10.0)) > 0.3);
  std::string notes;
  for (const auto& n : rt.notes) notes += n + "\n";
  MESSAGE(notes);
  CHECK(has(notes, "H100-SXM vs A100-SXM-80GB: b2 missing (empty or 0) for one of the two: skipped for this pair; 2 benchmarks"));
  CHECK(has(notes, "3 empty or 0 cells"));
  CHECK(has(notes, "'TPU v9' is not a GPU in dlkit's table"));
  // Errors name the file.
  try {
    parse_benchmark_csv("name_gpu,num_gpu,watt,price,b1\nA10,1,1,1,fast\n", "x-fp32.csv");
    FAIL("expected an error");
  } catch (const dl::Error& e) {
    CHECK(has(e.what(), "x-fp32.csv:2: b1 value 'fast' is not a number"));
  }
  CHECK_THROWS_AS(parse_benchmark_csv(csv, "bench.csv"), dl::Error);  // precision not in the name
}
