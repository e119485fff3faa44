// open_datasets: source strings, their errors, and which splits exist.
#include <doctest/doctest.h>

#include "dl/data/dataset.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::test;

namespace {
std::string usage_error(const DataConfig& d, int64_t block_size = 64) {
  try {
    open_datasets(d, block_size, 1);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  return "(no error)";
}
DataConfig source(const std::string& s) {
  DataConfig d;
  d.source = s;
  return d;
}
}  // namespace

TEST_CASE("source strings are checked") {
  CHECK(usage_error(source("addition")).find("is not a data source") != std::string::npos);
  CHECK(usage_error(source("synthetic:")).find("is not a data source") != std::string::npos);
  CHECK(usage_error(source("synthetic:multiply")).find("unknown synthetic task 'multiply'") != std::string::npos);
  CHECK(usage_error(source("hdf5:x.h5")).find("unknown source kind 'hdf5'") != std::string::npos);
  DataConfig d = source("synthetic:addition");
  d.val_source = "nope";
  CHECK(usage_error(d).find("data.val_source") != std::string::npos);
  d.val_source.clear();
  d.val_fraction = 1.0;
  CHECK(usage_error(d).find("data.val_fraction") != std::string::npos);
  CHECK(usage_error(source("synthetic:addition"), 0).find("model.block_size") != std::string::npos);
}

TEST_CASE("csv cannot be mixed with token data") {
  DataConfig d = source("csv:" + source_path("configs/data/iris.csv").string());
  d.val_source = "synthetic:addition";
  CHECK(usage_error(d).find("mix feature (csv) and token data") != std::string::npos);
}

TEST_CASE("synthetic:addition as val_source of a text corpus: both byte-level, val is the addition set") {
  TempDir dir("ds");
  write_file(dir / "c.txt", std::string(1000, 'z'));
  DataConfig d = source("text:" + (dir / "c.txt").string());
  d.val_source = "synthetic:addition";
  auto s = open_datasets(d, 32, 1);
  CHECK(s.train->size() == 999 / 32);
  CHECK(s.val->size() == 256);
  CHECK(s.val->stop_text() == ";");
  CHECK(s.train->stop_text().empty());
  CHECK(s.train->prompts(3).empty());
  CHECK(s.train->render("a", "b") == "ab");
  Batch b = s.train->make_batch({0});
  CHECK_FALSE(s.train->score(b, Tensor::zeros({32}, DType::i32)).has_value());
}
