// csv:PATH — a table of float features and one class-label column, for the MLP classifier.
//
// Rules (docs: data.* keys):
// - Rows are lines (read by dl/io/csv: blank rows are skipped; cells are comma-separated,
//   trimmed, and may be double-quoted, "" inside quotes being a quote, closed on the same line).
//   Every row has the first row's number of cells.
// - The first row is a header when one of its feature cells is not a number.
// - data.label_column picks the label (negative counts from the end). Labels that are all
//   non-negative integers are class ids; otherwise the distinct label strings, sorted bytewise,
//   get ids 0, 1, ... (iris: setosa 0, versicolor 1, virginica 2). With a separate val file the
//   labels of both files are mapped together, so ids agree.
// - Split: rows are shuffled by Sampler(rows, seed, "data/csv-split") at epoch 0 and the last
//   round(rows * val_fraction) of the shuffled order form the validation split: train example i
//   is file row perm(i), val example j is file row perm(n_train + j) (0-based data rows).
// - data.normalize: every feature is standardised with the training split's mean and population
//   standard deviation (a constant feature keeps std 1), in both splits.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "dl/data/sources.hpp"
#include "dl/io/csv.hpp"

namespace dl::data {

namespace {

bool parse_double(std::string_view s, double& v) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_int(std::string_view s, int64_t& v) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// One parsed file: data rows of trimmed cells with their 1-based line numbers.
struct RawCsv {
  std::string path;
  std::vector<std::string> header;  // empty when the file has none
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> lines;
};

RawCsv read_csv(const std::string& path, int64_t label_column, size_t expect_cols) {
  MappedFile file(path, "csv:" + path);
  std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  RawCsv raw;
  raw.path = path;
  size_t ncols = expect_cols, label = 0;
  bool first = true;
  for (CsvRecord& rec : parse_csv(text, path, {.trim = true, .multiline_quotes = false})) {
    const int64_t lineno = rec.line;
    std::vector<std::string>& cells = rec.cells;
    if (first) {
      if (ncols == 0) ncols = cells.size();
      if (ncols < 2)
        throw_usage(path, ":", lineno, ": a csv data file needs at least 2 columns (features and a label), found ",
                    ncols);
      int64_t lc = label_column < 0 ? static_cast<int64_t>(ncols) + label_column : label_column;
      if (lc < 0 || lc >= static_cast<int64_t>(ncols))
        throw_usage("data.label_column = ", label_column, " is out of range for ", path, ", which has ", ncols,
                    " columns");
      label = static_cast<size_t>(lc);
    }
    if (cells.size() != ncols)
      throw_usage(path, ":", lineno, ": expected ", ncols, " columns, found ", cells.size());
    if (first) {
      first = false;
      double v;
      bool header = false;
      for (size_t c = 0; c < ncols; ++c)
        if (c != label && !parse_double(cells[c], v)) header = true;
      if (header) {
        raw.header = std::move(cells);
        continue;
      }
    }
    raw.rows.push_back(std::move(cells));
    raw.lines.push_back(lineno);
  }
  if (raw.rows.empty()) throw_usage("csv:", path, ": the file holds no data rows");
  return raw;
}

struct Table {
  int64_t F = 0;
  int64_t classes = 0;
  std::vector<float> x;  // [rows, F]
  std::vector<int32_t> y;
  std::vector<std::string> class_names;  // string labels in id order; empty for numeric labels
};

class FeatureDataset final : public Dataset {
 public:
  FeatureDataset(std::shared_ptr<const Table> table, std::vector<int64_t> rows, std::string what, bool val,
                 bool normalized)
      : table_(std::move(table)), rows_(std::move(rows)), what_(std::move(what)), val_(val), normalized_(normalized) {}
  std::string describe() const override {
    return str(what_, " ", val_ ? "val" : "train", ": ", rows_.size(), " rows, ", table_->F, " features, ",
               table_->classes, " classes", normalized_ ? " (standardised with the training split's mean/std)" : "");
  }
  int64_t size() const override { return static_cast<int64_t>(rows_.size()); }
  bool is_sequence() const override { return false; }
  int64_t n_features() const override { return table_->F; }
  int64_t n_classes() const override { return table_->classes; }
  Batch make_batch(const std::vector<int64_t>& ids) const override {
    check_example_ids(ids, size(), what_);
    const int64_t n = static_cast<int64_t>(ids.size()), F = table_->F;
    Batch b{Tensor::empty({n, F}, DType::f32), Tensor::empty({n}, DType::i32)};
    for (int64_t r = 0; r < n; ++r) {
      int64_t row = rows_[static_cast<size_t>(ids[static_cast<size_t>(r)])];
      std::copy_n(table_->x.data() + row * F, F, b.inputs.data<float>() + r * F);
      b.targets.data<int32_t>()[r] = table_->y[static_cast<size_t>(row)];
    }
    return b;
  }

 private:
  std::shared_ptr<const Table> table_;
  std::vector<int64_t> rows_;
  std::string what_;
  bool val_, normalized_;
};

}  // namespace

DataSplits open_csv(const std::string& train_path, const std::string& val_path, const DataConfig& data,
                    uint64_t seed) {
  std::vector<RawCsv> files;
  files.push_back(read_csv(train_path, data.label_column, 0));
  const size_t ncols = files[0].rows[0].size();
  if (!val_path.empty()) files.push_back(read_csv(val_path, data.label_column, ncols));
  const int64_t lc = data.label_column < 0 ? static_cast<int64_t>(ncols) + data.label_column : data.label_column;
  const size_t label = static_cast<size_t>(lc);

  auto table = std::make_shared<Table>();
  table->F = static_cast<int64_t>(ncols) - 1;
  // Labels: integer class ids when every label in every file is an integer, else sorted strings.
  bool numeric = true;
  std::set<std::string> names;
  for (const RawCsv& f : files)
    for (const auto& row : f.rows) {
      int64_t v;
      numeric = numeric && parse_int(row[label], v);
      names.insert(row[label]);
    }
  std::map<std::string, int32_t> ids;
  if (!numeric) {
    for (const std::string& s : names) {
      ids.emplace(s, static_cast<int32_t>(table->class_names.size()));
      table->class_names.push_back(s);
    }
  }
  constexpr int64_t kMaxClasses = 1 << 24;
  for (const RawCsv& f : files)
    for (size_t r = 0; r < f.rows.size(); ++r) {
      const auto& row = f.rows[r];
      for (size_t c = 0; c < ncols; ++c) {
        if (c == label) continue;
        double v;
        if (!parse_double(row[c], v))
          throw_usage(f.path, ":", f.lines[r], ": column ", c + 1, ": '", row[c], "' is not a number");
        if (!std::isfinite(v) || std::fabs(v) > 3.4e38)
          throw_usage(f.path, ":", f.lines[r], ": column ", c + 1, ": '", row[c], "' is not a finite float");
        table->x.push_back(static_cast<float>(v));
      }
      int64_t y;
      if (numeric) {
        parse_int(row[label], y);
        if (y < 0 || y >= kMaxClasses)
          throw_usage(f.path, ":", f.lines[r], ": column ", label + 1, ": class id ", y, " is outside [0, ",
                      kMaxClasses, ")");
      } else {
        y = ids.at(row[label]);
      }
      table->y.push_back(static_cast<int32_t>(y));
      table->classes = std::max<int64_t>(table->classes, y + 1);
    }

  // Rows of each split (indices into the table).
  const int64_t n0 = static_cast<int64_t>(files[0].rows.size());
  std::vector<int64_t> train_rows, val_rows;
  if (files.size() == 2) {
    for (int64_t i = 0; i < n0; ++i) train_rows.push_back(i);
    for (int64_t i = 0; i < static_cast<int64_t>(files[1].rows.size()); ++i) val_rows.push_back(n0 + i);
  } else {
    const int64_t n_val = val_count(n0, data.val_fraction);
    if (n0 - n_val < 1)
      throw_usage("csv:", train_path, ": ", n0, " data row(s) are too few to hold out data.val_fraction = ",
                  data.val_fraction, " for validation and keep some for training");
    Sampler order(n0, seed, "data/csv-split");
    for (int64_t p = 0; p < n0; ++p) (p < n0 - n_val ? train_rows : val_rows).push_back(order.example_at(p));
  }

  if (data.normalize) {
    const int64_t F = table->F;
    for (int64_t j = 0; j < F; ++j) {
      double mean = 0, var = 0;
      for (int64_t r : train_rows) mean += table->x[static_cast<size_t>(r * F + j)];
      mean /= static_cast<double>(train_rows.size());
      for (int64_t r : train_rows) {
        double d = table->x[static_cast<size_t>(r * F + j)] - mean;
        var += d * d;
      }
      double sd = std::sqrt(var / static_cast<double>(train_rows.size()));
      if (!(sd > 1e-12 * std::max(1.0, std::fabs(mean)))) sd = 1.0;  // constant feature
      const int64_t rows = static_cast<int64_t>(table->y.size());
      for (int64_t r = 0; r < rows; ++r) {
        float& v = table->x[static_cast<size_t>(r * F + j)];
        v = static_cast<float>((v - mean) / sd);
      }
    }
  }

  DataSplits out;
  out.train = std::make_unique<FeatureDataset>(table, std::move(train_rows), "csv:" + train_path, false,
                                               data.normalize);
  if (!val_rows.empty())
    out.val = std::make_unique<FeatureDataset>(table, std::move(val_rows),
                                               "csv:" + (val_path.empty() ? train_path : val_path), true,
                                               data.normalize);
  return out;
}

}  // namespace dl::data
