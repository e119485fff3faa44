// dl-bench end to end: the built binary's collectives over launched ranks, the training step,
// the machine card, the output formats, and exit code 2 with a clear message on bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "dl/bench/collective.hpp"
#include "dl/bench/common.hpp"
#include "dl/bench/output.hpp"
#include "dl/cli/app.hpp"
#include "support/support.hpp"

using dl::test::has;

using nlohmann::json;
using dl::test::run;
using dl::test::tool;

namespace {

const std::string kBench = tool("dl-bench");


json rows_of(const dl::test::RunResult& r) {
  INFO("stderr: ", r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("a 2-rank Gloo all-reduce: #wrong 0, nccl-tests' sizes, algbw = size / time, busbw = algbw x 2(n-1)/n") {
  auto r = run(kBench, {"collective", "allreduce", "--nproc-per-node", "2", "-b", "8", "-e", "1M", "-f", "4", "-n", "5", "-w", "2",
                        "--format", "json"});
  json rows = rows_of(r);
  REQUIRE(rows.size() == 9);  // 8, 32, ..., 524288
  int64_t size = 8;
  for (const auto& row : rows) {
    CHECK(row["schema"] == "dlkit-bench/1");
    CHECK(row["op"] == "allreduce");
    CHECK(row["backend"] == "gloo");
    CHECK(row["library"] == "Gloo");
    CHECK(row["nproc"] == 2);
    CHECK(row["num_devices"] == 2);
    CHECK(row["size"] == size);
    CHECK(row["count"] == size / 4);
    CHECK(row["type"] == "float");
    CHECK(row["redop"] == "sum");
    CHECK(row["root"] == -1);
    CHECK(row["repeat"] == 5);
    CHECK(row["oop_wrong"] == 0);
    CHECK(row["ip_wrong"] == 0);
    for (const char* p : {"oop_", "ip_"}) {
      const std::string k(p);
      const double t = row[k + "time_us"].get<double>() * 1e-6;
      REQUIRE(t > 0);
      CHECK(row[k + "algbw"].get<double>() == doctest::Approx(static_cast<double>(size) / 1e9 / t));
      CHECK(row[k + "busbw"].get<double>() == doctest::Approx(row[k + "algbw"].get<double>() * 2.0 * (2 - 1) / 2));
    }
    size *= 4;
  }
  MESSAGE("2-rank Gloo allreduce at 512 KiB: busbw ", rows.back()["oop_busbw"].get<double>(), " GB/s out of place, ",
          rows.back()["ip_busbw"].get<double>(), " GB/s in place");
  // Only rank 0 prints: exactly one JSON document on stdout.
  CHECK(std::count(r.out.begin(), r.out.end(), '[') == 1);

  // The table is nccl-tests' layout with its footer.
  auto t = run(kBench, {"collective", "allreduce", "--nproc-per-node", "2", "-b", "1K", "-e", "4K", "-f", "2", "-n", "3", "-w", "1", "-q"});
  REQUIRE(t.exit_code == 0);
  CHECK(has(t.out, "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"));
  CHECK(has(t.out, "        1024           256     float     sum      -1"));
  CHECK(has(t.out, "# Out of bounds values : 0 OK"));
  CHECK(has(t.out, "# Avg bus bandwidth    : "));
}

TEST_CASE("every collective on 2 ranks verifies its output: #wrong 0, the count column as nccl-tests prints it") {
  struct Case {
    std::string op;
    int64_t count_at_4k;  // 4096 bytes of floats on 2 ranks
    std::string redop;
    int root;
  };
  for (const Case& c : {Case{"allgather", 512, "none", -1}, Case{"reducescatter", 512, "sum", -1},
                        Case{"broadcast", 1024, "none", 1}, Case{"sendrecv", 1024, "sum", -1}}) {
    CAPTURE(c.op);
    auto r = run(kBench, {"collective", c.op, "--nproc-per-node", "2", "-b", "4K", "-e", "256K", "-f", "64", "-r", "1", "-n", "3",
                          "-w", "1", "--format", "jsonl", "-q"});
    INFO("stderr: ", r.err);
    REQUIRE(r.exit_code == 0);
    auto rows = dl::bench::parse_rows(r.out, dl::OutputFormat::jsonl);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0]["size"] == 4096);
    CHECK(rows[0]["count"] == c.count_at_4k);
    CHECK(rows[0]["redop"] == c.redop);
    CHECK(rows[0]["root"] == c.root);
    for (const auto& row : rows) {
      CHECK(row["oop_wrong"] == 0);
      CHECK(row["ip_wrong"] == 0);
      const double factor = dl::bench::busbw_factor(dl::bench::parse_collective_op(c.op), 2);
      CHECK(row["oop_busbw"].get<double>() == doctest::Approx(row["oop_algbw"].get<double>() * factor));
    }
  }
}

TEST_CASE("train --repeat runs the timed steps that many times; --steps below 1 is refused") {
  dl::test::TempDir tmp("bench-train-repeat");
  const std::string config = dl::test::source_path("configs/addition.toml").string();
  auto r = run(kBench, {"train", config, "--repeat", "3", "--steps", "2", "--warmup", "1", "--set", "train.batch_size=4",
                        "--format", "json"},
               "", {"TMPDIR=" + tmp.path().string()});
  json rows = rows_of(r);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["repeat"] == 3);  // was written as 2, the steps: --repeat was ignored
  CHECK(rows[0]["steps"] == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') >= 3);
  CHECK(has(r.err, "run 3 of 3"));
  for (const char* steps : {"0", "-5"}) {
    auto bad = run(kBench, {"train", config, "--steps", steps}, "", {"TMPDIR=" + tmp.path().string()});
    CHECK(bad.exit_code == 2);
    CHECK(has(bad.err, "--steps"));
  }
}

TEST_CASE("train drives dl-train's loop: tokens/s, MFU by the stated formula, the step split; no run directory left") {
  dl::test::TempDir tmp("bench-train");
  auto r = run(kBench,
               {"train", dl::test::source_path("configs/addition.toml").string(), "--steps", "3", "--warmup", "1", "--set",
                "train.batch_size=8", "--format", "json"},
               "", {"TMPDIR=" + tmp.path().string()});
  json rows = rows_of(r);
  REQUIRE(rows.size() == 1);
  const json& row = rows[0];
  CHECK(row["benchmark"] == "train");
  CHECK(row["precision"] == "fp32");
  CHECK(row["world"] == 1);
  CHECK(row["repeat"] == 1);  // one run of
  CHECK(row["steps"] == 3);   // three timed steps
  CHECK(row["warmup"] == 1);
  CHECK(row["batch_tokens"] == 8 * 12);  // batch_size x block_size
  // configs/addition.toml: L = 2, D = 64, T = 12; PaLM: 6N + 12 L D T.
  const double n = row["model_params"].get<double>();
  CHECK(n > 100000);
  CHECK(row["flops_per_token"].get<double>() == doctest::Approx(6 * n + 12.0 * 2 * 64 * 12));
  CHECK(row["flop_formula"] == "6N+12LHQT (PaLM)");
  const double tps = row["tokens_per_sec"].get<double>();
  CHECK(tps == doctest::Approx(96.0 / row["step_s"].get<double>()));
  CHECK(row["samples_per_sec"].get<double>() == doctest::Approx(tps / 12));
  CHECK(row["mfu"].get<double>() ==
        doctest::Approx(tps * row["flops_per_token"].get<double>() / row["peak_flops"].get<double>()));
  CHECK(row["mfu"].get<double>() > 0);
  CHECK(row["compute_s"].get<double>() > 0);
  CHECK(row["compute_s"].get<double>() <= row["step_max_s"].get<double>());
  CHECK(row["comm_s"].get<double>() == 0.0);  // one process: no collective to time
  CHECK(row["optimizer_s"].get<double>() > 0);
  CHECK(row["data_s"].get<double>() > 0);
  CHECK(std::filesystem::is_empty(tmp.path()));  // the temporary run is gone

  auto llmc = run(kBench, {"train", dl::test::source_path("configs/addition.toml").string(), "--steps", "1", "--warmup",
                           "0", "--flop-formula", "llmc", "--format", "jsonl", "-q"});
  json l = json::parse(llmc.out);
  CHECK(l["flop_formula"] == "6N+6LDT (llm.c)");
  CHECK(l["flops_per_token"].get<double>() == doctest::Approx(6 * n + 6.0 * 2 * 64 * 12));
}

TEST_CASE("all: every benchmark in one file of one schema") {
  auto r = run(kBench, {"all", "--repeat", "2", "--warmup", "1", "--format", "csv", "-q"});
  INFO("stderr: ", r.err);
  REQUIRE(r.exit_code == 0);
  auto rows = dl::bench::parse_rows(r.out, dl::OutputFormat::csv);
  std::set<std::string> kinds;
  for (const auto& row : rows) {
    kinds.insert(row["benchmark"].get<std::string>());
    CHECK(row["schema"] == "dlkit-bench/1");
    CHECK(row.contains("device"));
    CHECK(row.contains("dlkit_version"));
    if (row["benchmark"] == "collective") {
      CHECK(row["nproc"] == 2);
      CHECK(row["oop_wrong"] == 0);
      CHECK(row["ip_wrong"] == 0);
    }
  }
  CHECK(kinds == std::set<std::string>{"gemm", "memory", "collective", "train"});
}

TEST_CASE("formats from the binary parse back: json, jsonl and csv give the same rows") {
  auto j = run(kBench, {"gemm", "--sizes", "32,48x40x24", "--repeat", "2", "--format", "json", "-q"});
  REQUIRE(j.exit_code == 0);
  auto rows = dl::bench::parse_rows(j.out, dl::OutputFormat::json);
  REQUIRE(rows.size() == 2);
  dl::bench::Report rep;
  rep.rows = rows;
  for (auto f : {dl::OutputFormat::jsonl, dl::OutputFormat::csv}) {
    auto back = dl::bench::parse_rows(dl::bench::render_report(rep, f), f);
    REQUIRE(back.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(back[i]["flops"].get<double>() == rows[i]["flops"].get<double>());
      CHECK(back[i]["device"] == rows[i]["device"]);
      CHECK(back[i]["m"] == rows[i]["m"]);
    }
  }
  CHECK(rows[1]["m"] == 48);
  CHECK(rows[1]["n"] == 40);
  CHECK(rows[1]["k"] == 24);
}

TEST_CASE("bad input: a clear message and exit 2") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string missing = "/nonexistent/dlkit-bench-config.toml";
  for (const Case& c : std::vector<Case>{
           {{"frobnicate"}, "unknown benchmark 'frobnicate'"},
           {{"gemm", "--sizes", "12x"}, "--sizes"},
           {{"gemm", "--sizes", "1024,,2048"}, "--sizes"},
           {{"gemm", "--dtype", "bf16"}, "fp32"},
           {{"gemm", "--format", "yaml"}, "unknown output format"},
           {{"gemm", "--device", "tpu"}, "unknown device"},
           {{"collective", "allreduce", "--device", "tpu"}, "--device tpu"},
           {{"collective", "allreduce", "--backend", "mpi"}, "--backend mpi: unknown"},
           {{"gemm", "--repeat", "0"}, "--repeat"},
           {{"memory", "--bytes", "12 parsecs"}, "--bytes"},
           {{"collective", "alltoall"}, "use allreduce"},
           {{"collective", "allreduce", "-b", "8Q"}, "-b"},
           {{"collective", "allreduce", "-b", "1M", "-e", "1K"}, "larger than -e"},
           {{"collective", "allreduce", "--nproc-per-node", "100000"}, "--nproc-per-node 100000"},
           {{"collective", "broadcast", "--nproc-per-node", "2", "-r", "5"}, "root"},
           {{"train", missing}, missing},
           {{"train", dl::test::source_path("configs/addition.toml").string(), "--set", "model.n_layer=banana"}, "n_layer"},
       }) {
    CAPTURE(c.args[0]);
    CAPTURE(c.args.back());
    auto r = run(kBench, c.args);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, c.says));
    CHECK(r.out.empty());
  }
  std::string why;
  if (!dl::bench::gpu_usable(&why)) {
    auto gpu = run(kBench, {"gemm", "--device", "cuda"});
    CHECK(gpu.exit_code == 2);
    CHECK(has(gpu.err, "--device cuda: " + why));
    auto coll = run(kBench, {"collective", "allreduce", "--device", "cuda"});
    CHECK(coll.exit_code == 2);
    CHECK(has(coll.err, "--device cuda: "));
  }
  // More NCCL ranks than any machine here has GPUs (or no GPU, or no CUDA build): exit 2 either way.
  auto nccl = run(kBench, {"collective", "allreduce", "--backend", "nccl", "--nproc-per-node", "64"});
  CHECK(nccl.exit_code == 2);
  CHECK(has(nccl.err, "--backend nccl"));
  auto max_rs = run(kBench, {"collective", "reducescatter", "-o", "max"});
  CHECK(max_rs.exit_code == 2);
  CHECK(has(max_rs.err, "-o max: dlkit's reduce-scatter sums"));
  auto bare = run(kBench, {});
  CHECK(bare.exit_code == 2);
  CHECK(has(bare.err, "no benchmark given (use gemm, memory, collective, train or all"));
  auto none = run(kBench, {"train"});
  CHECK(none.exit_code == 2);
  CHECK(has(none.err, "config"));
  auto help = run(kBench, {"collective", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(has(help.out, "dl-bench collective allreduce --nproc-per-node 2 -b 8 -e 128M -f 2"));
}

TEST_CASE("a real pipe: dl-bench ... --format json | dl-cost estimate CONFIG --bench -") {
  // Through /bin/sh, as a user types it: dl-cost reads dl-bench's rows from stdin, says that this
  // machine's CPU rows match no GPU offer, and still prices every offer.
  const std::string cmd = kBench + " gemm --sizes 128 --repeat 2 --warmup 1 --format json -q | " +
                          tool("dl-cost") + " estimate " + dl::test::source_path("configs/addition.toml").string() +
                          " --bench - --top 3";
  auto r = run("/bin/sh", {"-c", cmd});
  INFO("stderr: ", r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "# bench: 1 CPU (no gpu_model) rows of stdin ignored: a dl-bench row calibrates only a GPU of the model it measured"));
  CHECK(has(r.out, "$/h"));
  // A broken producer is not hidden: dl-cost names the empty stdin and exits 2.
  auto broken = run("/bin/sh", {"-c", kBench + " nosuch 2>/dev/null | " + tool("dl-cost") +
                                          " estimate --flops 1e18 --bench -"});
  CHECK(broken.exit_code == 2);
  CHECK(has(broken.err, "stdin"));
}

TEST_CASE("collective sizes beyond this machine's memory exit 2 naming -e, before any rank or buffer exists") {
  // 64 GiB floats: send, receive, staging and the check's copies are about 5 x 64 GiB per rank,
  // beyond this machine with or without the ulimit (under ASan, which runs without it, 4 GiB
  // sizes needed 21.5 GB: about what a 24 GiB machine has free, so the check could pass and the
  // buffers be allocated). The old dl-bench allocated them until ulimit -v stopped it with exit 1.
  for (const std::string nproc : {"1", "2"}) {
    CAPTURE(nproc);
    const auto r = dl::test::run_limited(kBench, {"collective", "allreduce", "--nproc-per-node", nproc, "-b", "64G", "-e", "64G"},
                                         {}, 60);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, "-e 68719476736 (" + nproc + (nproc == "1" ? " rank" : " ranks") + " on this node"));
    CHECK(has(r.err, "but this process can use at most"));
    CHECK(has(r.err, "lower -e"));
    CHECK(r.out.empty());
  }
  // --threads past the cap is refused by the same rule as train.threads.
  const auto t = run(kBench, {"gemm", "--threads", "100000"});
  CHECK(t.exit_code == 2);
  CHECK(has(t.err, "the thread cap"));
}

TEST_CASE("collective rows reach a pipe as each size finishes, in nccl-tests' table") {
  // It printed the whole table at the end: a reader of the pipe saw nothing until the last size.
  dl::test::Process p(kBench, {"collective", "allreduce", "--nproc-per-node", "1", "-b", "8", "-e", "64M", "-f", "8",
                               "-n", "20", "-w", "2", "-q"});
  const double start = dl::monotonic_seconds();
  // The first size's line: "           8             2     float ..."
  REQUIRE(p.wait_for_line([](const std::string& l) { return l.find("           8             2     float") == 0; }, 60));
  const double first = dl::monotonic_seconds();
  const std::vector<std::string> early = p.out_lines();
  REQUIRE(p.wait(120) == 0);
  const double end = dl::monotonic_seconds();
  INFO("first row after ", first - start, " s, the run ended after ", end - start, " s");
  // The header came before the row; the 64 MiB size (20 timed all-reduces) was still to run.
  CHECK(std::any_of(early.begin(), early.end(), [](const std::string& l) { return l.find("#wrong") != std::string::npos; }));
  CHECK(std::none_of(early.begin(), early.end(), [](const std::string& l) { return l.find("67108864") != std::string::npos; }));
  CHECK(end - first > 0.1);
  const auto all = p.out_lines();
  CHECK(std::any_of(all.begin(), all.end(), [](const std::string& l) { return l.find("# Avg bus bandwidth") == 0; }));
}
