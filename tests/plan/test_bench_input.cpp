// Reading dl-bench output (docs/FORMATS.md, schema dlkit-bench/1) and letting measured values
// replace datasheet ones.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/plan/bench_input.hpp"
#include "support/support.hpp"

using namespace dl;
using namespace dl::plan;
using nlohmann::json;

namespace {

json row(const std::string& benchmark, json extra, const std::string& gpu = "H100-SXM") {
  json r{{"schema", "dlkit-bench/1"}, {"benchmark", benchmark}, {"time", "2026-11-01T00:00:00Z"},
         {"host", "box"}, {"device_type", gpu.empty() ? "cpu" : "cuda"},
         {"device", gpu.empty() ? "CPU" : "NVIDIA H100 80GB HBM3"}, {"gpu_model", gpu}, {"num_devices", 1}};
  for (auto& [k, v] : extra.items()) r[k] = v;
  return r;
}

}  // namespace

TEST_CASE("bench rows: json array and jsonl, errors name the file and line") {
  json a = json::array({row("gemm", {{"dtype", "bf16"}, {"flops", 700e12}}), row("gemm", {{"dtype", "fp32"}, {"flops", 50e12}})});
  auto rows = parse_bench_rows(a.dump(2), "a.json");
  CHECK(rows.size() == 2);
  std::string jsonl = a[0].dump() + "\n\n" + a[1].dump() + "\n";
  CHECK(parse_bench_rows(jsonl, "a.jsonl").size() == 2);
  // files
  test::TempDir dir("bench-in");
  test::write_file(dir / "b.jsonl", jsonl);
  CHECK(read_bench_rows((dir / "b.jsonl").string()).size() == 2);
  try {
    parse_bench_rows(a[0].dump() + "\n{not json\n", "x.jsonl");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("x.jsonl:2") != std::string::npos);
  }
  json wrong = a[0];
  wrong["schema"] = "other/1";
  CHECK_THROWS_AS(parse_bench_rows(wrong.dump(), "w.jsonl"), Error);
  CHECK_THROWS_AS(parse_bench_rows("", "empty.json"), Error);
  CHECK_THROWS_AS(parse_bench_rows("[]", "none.json"), Error);
  CHECK_THROWS_AS(read_bench_rows((dir / "missing.json").string()), Error);
}

TEST_CASE("summarize: gemm at the training precision, train rows, collectives, host copies") {
  std::vector<json> rows = {
      row("gemm", {{"dtype", "bf16"}, {"m", 4096}, {"flops", 600e12}}),
      row("gemm", {{"dtype", "bf16"}, {"m", 8192}, {"flops", 780e12}}),
      row("gemm", {{"dtype", "fp16"}, {"flops", 790e12}}),
      row("gemm", {{"dtype", "fp32"}, {"flops", 51e12}}),
      row("collective", {{"op", "allreduce"}, {"nproc", 8}, {"size", 1e6}, {"oop_busbw", 100.0}, {"ip_busbw", 110.0}}),
      row("collective", {{"op", "allreduce"}, {"nproc", 8}, {"size", 1e9}, {"oop_busbw", 430.0}, {"ip_busbw", 440.0}}),
      row("collective", {{"op", "all_gather"}, {"nproc", 8}, {"size", 4e9}, {"oop_busbw", 300.0}, {"ip_busbw", 310.0}}),
      row("memory", {{"direction", "h2d"}, {"bytes", 1e9}, {"time_s", 0.04}}),
      row("memory", {{"direction", "d2d"}, {"bytes", 1e9}, {"time_s", 0.001}}),
  };
  BenchSummary s = summarize_bench(rows, Precision::bf16, "", "b.json");
  CHECK(s.gpu_model == "H100-SXM");
  CHECK(s.rows == rows.size());
  CHECK(*s.gemm_flops == 780e12);  // best bf16 row, not the faster fp16 one
  CHECK(s.gemm_dtype == "bf16");
  CHECK(*s.busbw == 440e9);        // all-reduce at its largest size, in-place was better
  CHECK(s.busbw_nproc == 8);
  CHECK(*s.host_bw == 25e9);
  CHECK_FALSE(s.train_flops);
  CHECK(*summarize_bench(rows, Precision::fp32).gemm_flops == 51e12);

  Hardware hw;  // datasheet defaults
  hw.achievable_fraction = 0.45;
  std::vector<std::string> notes;
  Hardware m = apply_bench(hw, s, &notes);
  CHECK(m.peak_flops == 780e12);
  CHECK(m.achievable_fraction == 0.45);  // a GEMM peak is still scaled to training
  CHECK(m.intra_node_bw == 440e9);
  CHECK(m.host_bw == 25e9);
  CHECK(m.inter_node_bw == hw.inter_node_bw);
  CHECK(m.source.find("measured") != std::string::npos);
  CHECK(notes.size() == 3);

  // A train row's throughput is already achieved: FLOP/s = tokens/s x FLOPs/token / devices.
  rows.push_back(row("train", {{"config", "gpt2-124m.toml"}, {"precision", "bf16"}, {"tokens_per_sec", 400000.0},
                               {"flops_per_token", 859885056.0}, {"num_devices", 2}}));
  BenchSummary t = summarize_bench(rows, Precision::bf16);
  REQUIRE(t.train_flops);
  CHECK(*t.train_flops == doctest::Approx(400000.0 * 859885056.0 / 2));
  Hardware mt = apply_bench(hw, t);
  CHECK(mt.peak_flops == doctest::Approx(400000.0 * 859885056.0 / 2));
  CHECK(mt.achievable_fraction == 1.0);

  // Rows of two GPU models need a choice; the choice takes aliases.
  std::vector<json> mixed = {row("gemm", {{"dtype", "bf16"}, {"flops", 700e12}}),
                             row("gemm", {{"dtype", "bf16"}, {"flops", 250e12}}, "A100-SXM-80GB")};
  CHECK_THROWS_AS(summarize_bench(mixed, Precision::bf16), Error);
  CHECK(*summarize_bench(mixed, Precision::bf16, "A100 80GB SXM4").gemm_flops == 250e12);
  // A row calibrates only its own GPU model: for an L4 none applies, and each set aside is said
  // (it was an error); CPU rows (no gpu_model) are set aside the same way.
  const BenchSummary l4 = summarize_bench(mixed, Precision::bf16, "L4", "b.json");
  CHECK(l4.rows == 0);
  CHECK(!l4.gemm_flops);
  CHECK(l4.ignored == std::vector<std::string>{
                          "bench: 1 A100-SXM-80GB rows of b.json ignored: a dl-bench row calibrates only a GPU of the model it measured",
                          "bench: 1 H100-SXM rows of b.json ignored: a dl-bench row calibrates only a GPU of the model it measured"});
  std::vector<std::string> l4_notes;
  apply_bench(hw, l4, &l4_notes);
  CHECK(l4_notes.size() == 3);
  CHECK(l4_notes.back() == "b.json: no gemm, train, collective or memory rows of this GPU for the plan; datasheet values kept");
  const BenchSummary on_cpu =
      summarize_bench({row("train", {{"tokens_per_sec", 20000.0}, {"flops_per_token", 2e7}}, "")}, Precision::bf16);
  CHECK(!on_cpu.train_flops);
  CHECK(on_cpu.ignored.size() == 1);
  CHECK(on_cpu.ignored[0].rfind("bench: 1 CPU (no gpu_model) rows ignored", 0) == 0);
}
