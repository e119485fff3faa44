// dl-bench's output formats: json, jsonl and csv parse back to the same rows, and dl-cost's reader
// (dl/plan/bench_input) accepts them.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "dl/bench/collective.hpp"
#include "dl/bench/gemm.hpp"
#include "dl/bench/memory.hpp"
#include "dl/bench/output.hpp"
#include "dl/core/error.hpp"
#include "dl/dist/comm.hpp"
#include "dl/plan/bench_input.hpp"

using namespace dl::bench;

namespace {

// Real rows of three benchmarks, measured small.
Report sample_report() {
  CommonOptions c;
  c.repeat = 2;
  c.warmup = 1;
  c.threads = 1;
  apply_common(c);
  Report r;
  GemmOptions g;
  g.sizes = {{64, 64, 64}, {32, 48, 16}};
  r.append(run_gemm(g, c));
  MemoryOptions m;
  m.bytes = 1 << 20;
  r.append(run_memory(m, c));
  CollectiveOptions co;
  co.max_bytes = 1024;
  co.factor = 16;
  auto self = dl::dist::make_self_comm();
  r.append(run_collective(co, c, *self));
  return r;
}

// The same row: every non-null, non-empty value of `want` is in `got` with the same value
// (numbers to the last bit); nothing else is in `got`.
void check_same(const Row& want, const Row& got, bool csv) {
  size_t present = 0;
  for (const auto& [key, v] : want.items()) {
    const auto& k = key;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(k);
    const bool empty = v.is_null() || (v.is_string() && v.get<std::string>().empty());
    if (csv && empty) {
      CHECK_FALSE(got.contains(k));
      continue;
    }
    REQUIRE(got.contains(k));
    ++present;
    if (v.is_number()) CHECK(got[k].get<double>() == v.get<double>());
    else CHECK(got[k] == v);
  }
  CHECK(got.size() == present);
}

}  // namespace

TEST_CASE("json, jsonl and csv parse back to the same rows") {
  const Report r = sample_report();
  REQUIRE(r.rows.size() == 5);  // 2 gemm, 1 memory, 2 collective (8 and 128 bytes)
  for (dl::OutputFormat f : {dl::OutputFormat::json, dl::OutputFormat::jsonl, dl::OutputFormat::csv}) {
    CAPTURE(dl::format_name(f));
    const std::string text = render_report(r, f);
    std::vector<Row> back = parse_rows(text, f);
    REQUIRE(back.size() == r.rows.size());
    for (size_t i = 0; i < back.size(); ++i) check_same(r.rows[i], back[i], f == dl::OutputFormat::csv);
  }
  // csv: one header with the union of keys, one line per row.
  const std::string csv = render_report(r, dl::OutputFormat::csv);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 6);
  CHECK(csv.rfind("schema,benchmark,time,host,", 0) == 0);
}

TEST_CASE("dl-cost's reader takes json and jsonl output and finds the gemm and collective numbers") {
  const Report r = sample_report();
  for (dl::OutputFormat f : {dl::OutputFormat::json, dl::OutputFormat::jsonl}) {
    auto rows = dl::plan::parse_bench_rows(render_report(r, f), "bench");
    REQUIRE(rows.size() == r.rows.size());
    // This machine's rows are CPU rows: they calibrate no GPU, and say so (plan/bench_input.hpp).
    const auto on_cpu = dl::plan::summarize_bench(rows, dl::Precision::fp32);
    CHECK(!on_cpu.gemm_flops);
    REQUIRE(on_cpu.ignored.size() == 1);
    CHECK(on_cpu.ignored[0].rfind(dl::str("bench: ", rows.size(), " CPU (no gpu_model) rows ignored"), 0) == 0);
    // The same rows named as a GPU's: the reader finds their numbers.
    for (auto& row : rows) row["gpu_model"] = "H100-SXM";
    auto s = dl::plan::summarize_bench(rows, dl::Precision::fp32);
    REQUIRE(s.gemm_flops);
    CHECK(s.gemm_dtype == "fp32");
    double best = 0;
    for (const Row& row : r.rows)
      if (row["benchmark"] == "gemm") best = std::max(best, row["flops"].get<double>());
    CHECK(*s.gemm_flops == best);
    CHECK(s.device_type == "cpu");
  }
}

TEST_CASE("human formats: a section per benchmark, nccl-tests' layout for collectives, notes") {
  const Report r = sample_report();
  const std::string table = render_report(r, dl::OutputFormat::table);
  CHECK(table.find("# gemm on ") != std::string::npos);
  CHECK(table.find("# memory on ") != std::string::npos);
  CHECK(table.find("# collective on ") != std::string::npos);
  CHECK(table.find("#       size         count      type   redop    root     time   algbw   busbw #wrong") != std::string::npos);
  CHECK(table.find("# Avg bus bandwidth    : ") != std::string::npos);
  CHECK(table.find("# gemm: FLOPs = 2 M N K") != std::string::npos);
  const std::string md = render_report(r, dl::OutputFormat::md);
  CHECK(md.find("### gemm on ") != std::string::npos);
  CHECK(md.find("| dtype | M | N | K |") != std::string::npos);
  CHECK(md.find("| size (B) | count (elements) |") != std::string::npos);
  CHECK_THROWS_AS(parse_rows(table, dl::OutputFormat::table), dl::Error);
  CHECK_THROWS_AS(parse_rows("[{\"a\": ", dl::OutputFormat::json), dl::Error);
}

TEST_CASE("RowStream: each collective row printed and flushed as its size finishes; together render_report's text") {
  // dl-bench collective printed nothing until the whole sweep was done (33 s for -b 8 -e 128M).
  CommonOptions c;
  c.repeat = 2;
  c.warmup = 1;
  c.quiet = true;
  apply_common(c);
  CollectiveOptions co;
  co.max_bytes = 4096;
  co.factor = 8;  // 8, 64, 512, 4096
  auto self = dl::dist::make_self_comm();
  for (const dl::OutputFormat f : {dl::OutputFormat::table, dl::OutputFormat::jsonl, dl::OutputFormat::csv,
                                   dl::OutputFormat::json, dl::OutputFormat::md}) {
    CAPTURE(dl::format_name(f));
    std::ostringstream out;
    RowStream stream(out, f);
    std::vector<size_t> seen;  // what was printed when each row reached the stream
    const Report r = run_collective(co, c, *self, [&](const Row& row) {
      seen.push_back(out.str().size());
      stream.add(row);
    });
    REQUIRE(r.rows.size() == 4);
    REQUIRE(seen.size() == 4);
    const bool streams = f != dl::OutputFormat::json && f != dl::OutputFormat::md;
    // Before the second row arrived, the first was out (with the header where there is one).
    if (streams) CHECK(seen[1] > 0);
    else CHECK(seen[3] == 0);  // documents print whole at the end
    if (f == dl::OutputFormat::table) CHECK(out.str().find(nccl_table_header()) != std::string::npos);
    stream.finish(r);
    CHECK(out.str() == render_report(r, f));
  }
}
