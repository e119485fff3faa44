// csv:PATH: header detection, labels, cell errors, the shuffled split and train-only statistics.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "dl/data/dataset.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::test;

namespace {
DataConfig csv_source(const fs::path& p, double val_fraction = 0.0, bool normalize = false) {
  DataConfig d;
  d.source = "csv:" + p.string();
  d.val_fraction = val_fraction;
  d.normalize = normalize;
  return d;
}
std::vector<int64_t> all_ids(const Dataset& d) {
  std::vector<int64_t> ids(static_cast<size_t>(d.size()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  return ids;
}
std::string error_of(const DataConfig& d) {
  try {
    open_datasets(d, 0, 1);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("csv: header row detected, string labels mapped in sorted order") {
  TempDir dir("csv");
  write_file(dir / "h.csv", "x, y ,animal\n1.5,2,dog\n\n-3,4e1,cat\r\n5,+6,emu\n7,8,dog\n");
  auto s = open_datasets(csv_source(dir / "h.csv"), 0, 1);
  REQUIRE(s.train);
  CHECK(s.val == nullptr);  // val_fraction 0
  CHECK(s.tokenizer == nullptr);
  CHECK_FALSE(s.train->is_sequence());
  CHECK(s.train->size() == 4);
  CHECK(s.train->n_features() == 2);
  CHECK(s.train->n_classes() == 3);
  Batch b = s.train->make_batch(all_ids(*s.train));
  CHECK(b.inputs.shape() == Shape{4, 2});
  CHECK(b.targets.shape() == Shape{4});
  // Rows come in shuffled order; find each by its first feature.
  std::map<float, std::pair<float, int32_t>> got;
  for (int64_t r = 0; r < 4; ++r)
    got[b.inputs.data<float>()[2 * r]] = {b.inputs.data<float>()[2 * r + 1], b.targets.data<int32_t>()[r]};
  CHECK(got.size() == 4);
  CHECK(got[1.5f] == std::pair<float, int32_t>{2.f, 1});   // dog
  CHECK(got[-3.f] == std::pair<float, int32_t>{40.f, 0});  // cat
  CHECK(got[5.f] == std::pair<float, int32_t>{6.f, 2});    // emu
  CHECK(got[7.f] == std::pair<float, int32_t>{8.f, 1});
}

TEST_CASE("csv: no header, numeric labels, label column first, quoted cells") {
  TempDir dir("csv");
  write_file(dir / "n.csv", "0,1,2\n2,\"3\",4\n0,5,6\n");
  DataConfig d = csv_source(dir / "n.csv");
  d.label_column = 0;
  auto s = open_datasets(d, 0, 1);
  CHECK(s.train->size() == 3);  // the first row is data: all its feature cells are numbers
  CHECK(s.train->n_features() == 2);
  CHECK(s.train->n_classes() == 3);  // max class id 2, + 1
  Batch b = s.train->make_batch(all_ids(*s.train));
  float sum = 0;
  int32_t label_sum = 0;
  for (int64_t i = 0; i < 6; ++i) sum += b.inputs.data<float>()[i];
  for (int64_t i = 0; i < 3; ++i) label_sum += b.targets.data<int32_t>()[i];
  CHECK(sum == 1 + 2 + 3 + 4 + 5 + 6);
  CHECK(label_sum == 2);
  // A string-labelled file whose first row is data (numeric features, string label).
  write_file(dir / "s.csv", "1,2,b\n3,4,a\n");
  auto t = open_datasets(csv_source(dir / "s.csv"), 0, 1);
  CHECK(t.train->size() == 2);
  CHECK(t.train->n_classes() == 2);
}

TEST_CASE("csv: bad cells and shapes are usage errors with file, line and column") {
  TempDir dir("csv");
  write_file(dir / "bad.csv", "a,b,c,label\n1,2,3,x\n\n4,5,abc,y\n");
  CHECK(error_of(csv_source(dir / "bad.csv")) == (dir / "bad.csv").string() + ":4: column 3: 'abc' is not a number");
  write_file(dir / "cols.csv", "1,2,x\n3,y\n");
  CHECK(error_of(csv_source(dir / "cols.csv")).find("cols.csv:2: expected 3 columns, found 2") != std::string::npos);
  write_file(dir / "inf.csv", "1,2,x\n3,inf,y\n");
  CHECK(error_of(csv_source(dir / "inf.csv")).find("inf.csv:2: column 2: 'inf' is not a finite float") !=
        std::string::npos);
  write_file(dir / "neg.csv", "1,2,0\n3,4,-1\n");
  CHECK(error_of(csv_source(dir / "neg.csv")).find("neg.csv:2: column 3: class id -1") != std::string::npos);
  write_file(dir / "hdr.csv", "a,b,label\n");
  CHECK(error_of(csv_source(dir / "hdr.csv")).find("no data rows") != std::string::npos);
  write_file(dir / "one.csv", "1\n2\n");
  CHECK(error_of(csv_source(dir / "one.csv")).find("at least 2 columns") != std::string::npos);
  DataConfig d = csv_source(dir / "neg.csv");
  d.label_column = 3;
  CHECK(error_of(d).find("data.label_column = 3 is out of range") != std::string::npos);
  CHECK(error_of(csv_source(dir / "missing.csv")).find((dir / "missing.csv").string()) != std::string::npos);
  write_file(dir / "q.csv", "1,\"2,x\n");
  CHECK(error_of(csv_source(dir / "q.csv")).find("q.csv:1: unterminated quoted cell") != std::string::npos);
}

TEST_CASE("csv: shuffled split by Sampler(data/csv-split) and normalisation with train statistics only") {
  TempDir dir("csv");
  // 20 rows: feature 0 = i^2 / 10 (skewed, so train and val statistics differ), feature 1 constant.
  std::string text = "f0,f1,label\n";
  std::vector<double> raw;
  for (int i = 0; i < 20; ++i) {
    raw.push_back(i * i / 10.0);
    text += std::to_string(i * i / 10.0) + ",3.5," + std::to_string(i % 4) + "\n";
  }
  write_file(dir / "d.csv", text);
  const uint64_t seed = 99;
  auto s = open_datasets(csv_source(dir / "d.csv", 0.25, true), 0, seed);
  REQUIRE(s.val);
  CHECK(s.train->size() == 15);
  CHECK(s.val->size() == 5);
  CHECK(s.train->n_classes() == 4);
  // The documented split: train example i is data row perm(i), val example j is perm(15 + j).
  Sampler perm(20, seed, "data/csv-split");
  double mean = 0, var = 0;
  for (int64_t i = 0; i < 15; ++i) mean += static_cast<float>(raw[static_cast<size_t>(perm.example_at(i))]);
  mean /= 15;
  for (int64_t i = 0; i < 15; ++i) {
    double dlt = static_cast<float>(raw[static_cast<size_t>(perm.example_at(i))]) - mean;
    var += dlt * dlt;
  }
  const double sd = std::sqrt(var / 15);
  Batch tb = s.train->make_batch(all_ids(*s.train)), vb = s.val->make_batch(all_ids(*s.val));
  double tsum = 0, tsq = 0;
  for (int64_t i = 0; i < 15; ++i) {
    int64_t row = perm.example_at(i);
    float x = tb.inputs.data<float>()[2 * i];
    CHECK(x == doctest::Approx((static_cast<float>(raw[static_cast<size_t>(row)]) - mean) / sd).epsilon(1e-5));
    CHECK(tb.inputs.data<float>()[2 * i + 1] == 0.0f);  // constant feature: (x - mean) / 1
    CHECK(tb.targets.data<int32_t>()[i] == row % 4);
    tsum += x;
    tsq += static_cast<double>(x) * x;
  }
  CHECK(tsum / 15 == doctest::Approx(0.0).epsilon(1e-6));
  CHECK(tsq / 15 == doctest::Approx(1.0).epsilon(1e-5));
  double vsum = 0;
  for (int64_t j = 0; j < 5; ++j) {
    int64_t row = perm.example_at(15 + j);
    float x = vb.inputs.data<float>()[2 * j];
    CHECK(x == doctest::Approx((static_cast<float>(raw[static_cast<size_t>(row)]) - mean) / sd).epsilon(1e-5));
    CHECK(vb.targets.data<int32_t>()[j] == row % 4);
    vsum += x;
  }
  CHECK(std::fabs(vsum / 5) > 1e-3);  // val is scaled by train statistics, not its own

  // Same seed, same split; another seed, another split.
  auto again = open_datasets(csv_source(dir / "d.csv", 0.25, true), 0, seed);
  auto other = open_datasets(csv_source(dir / "d.csv", 0.25, true), 0, seed + 1);
  auto firsts = [](const DataSplits& x) {
    Batch b = x.val->make_batch(all_ids(*x.val));
    return std::vector<float>(b.inputs.data<float>(), b.inputs.data<float>() + b.inputs.numel());
  };
  CHECK(firsts(again) == firsts(s));
  CHECK(firsts(other) != firsts(s));
}

TEST_CASE("csv: a separate val_source file shares label ids and the train statistics") {
  TempDir dir("csv");
  write_file(dir / "tr.csv", "x,label\n1,b\n3,c\n");
  write_file(dir / "va.csv", "x,label\n5,a\n");
  DataConfig d = csv_source(dir / "tr.csv", 0.5, true);
  d.val_source = "csv:" + (dir / "va.csv").string();
  auto s = open_datasets(d, 0, 1);
  CHECK(s.train->size() == 2);  // the whole train file
  CHECK(s.val->size() == 1);
  CHECK(s.train->n_classes() == 3);
  Batch v = s.val->make_batch({0});
  CHECK(v.targets.data<int32_t>()[0] == 0);             // "a" sorts first
  CHECK(v.inputs.data<float>()[0] == doctest::Approx(3.0));  // (5 - 2) / 1
  write_file(dir / "va3.csv", "x,y,label\n5,1,a\n");
  d.val_source = "csv:" + (dir / "va3.csv").string();
  CHECK(error_of(d).find("va3.csv:1: expected 2 columns, found 3") != std::string::npos);
}

TEST_CASE("csv: configs/data/iris.csv is Fisher's iris: 150 rows, 4 features, 3 classes of 50") {
  DataConfig d = csv_source(source_path("configs/data/iris.csv"), 0.1, false);
  auto s = open_datasets(d, 0, 1337);
  CHECK(s.train->size() == 135);
  CHECK(s.val->size() == 15);
  CHECK(s.train->n_features() == 4);
  CHECK(s.train->n_classes() == 3);
  std::vector<int> per_class(3, 0);
  double petal_length_sum[3] = {0, 0, 0};
  bool found_first_row = false;
  for (const Dataset* ds : {s.train.get(), s.val.get()}) {
    Batch b = ds->make_batch(all_ids(*ds));
    for (int64_t r = 0; r < ds->size(); ++r) {
      int32_t y = b.targets.data<int32_t>()[r];
      REQUIRE(y >= 0);
      REQUIRE(y < 3);
      ++per_class[static_cast<size_t>(y)];
      const float* x = b.inputs.data<float>() + 4 * r;
      petal_length_sum[y] += x[2];
      if (x[0] == 5.1f && x[1] == 3.5f && x[2] == 1.4f && x[3] == 0.2f && y == 0) found_first_row = true;
    }
  }
  CHECK(per_class == std::vector<int>{50, 50, 50});
  // Species means of petal length (Fisher 1936): setosa 1.462, versicolor 4.260, virginica 5.552.
  CHECK(petal_length_sum[0] / 50 == doctest::Approx(1.462).epsilon(1e-5));
  CHECK(petal_length_sum[1] / 50 == doctest::Approx(4.260).epsilon(1e-5));
  CHECK(petal_length_sum[2] / 50 == doctest::Approx(5.552).epsilon(1e-5));
  CHECK(found_first_row);
}
