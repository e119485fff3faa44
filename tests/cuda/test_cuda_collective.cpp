// dl-bench collective over NCCL: GPU buffers, every collective's output verified (#wrong 0) on a
// group of one, and across two ranks on two GPUs (test suite "multi-gpu": ctest `cuda-multi`, which
// is reported as skipped on a machine with fewer); more ranks than GPUs are a usage error naming
// the rule (NCCL refuses duplicate devices). test_cuda's main skips the whole binary without a GPU.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/bench/collective.hpp"
#include "dl/core/error.hpp"
#include "dl/dist/comm.hpp"
#include "support/support.hpp"

using namespace dl::bench;
using nlohmann::json;

namespace {

constexpr CollectiveOp kOps[] = {CollectiveOp::allreduce, CollectiveOp::allgather, CollectiveOp::reducescatter,
                                 CollectiveOp::broadcast, CollectiveOp::sendrecv};

}  // namespace

TEST_CASE("NCCL on a group of one: every collective verified, rows name NCCL and the GPU") {
  auto self = dl::dist::make_self_comm();
  CommonOptions common;
  common.repeat = 5;
  common.warmup = 2;
  for (CollectiveOp op : kOps) {
    CAPTURE(collective_op_name(op));
    CollectiveOptions o;
    o.op = op;
    o.backend = CollectiveBackend::nccl;
    o.min_bytes = 8;
    o.max_bytes = 16 << 20;
    o.factor = 16;
    Report r = run_collective(o, common, *self);
    CHECK(r.failures.empty());
    REQUIRE(r.rows.size() == 6);  // 8 B .. 8 MiB by 16 (8 * 16^6 is past 16 MiB)
    for (const Row& row : r.rows) {
      CHECK(row["backend"] == "nccl");
      CHECK(row["device_type"] == "cuda");
      CHECK(row["library"].get<std::string>().rfind("NCCL ", 0) == 0);
      CHECK(row["oop_wrong"] == 0);
      CHECK(row["ip_wrong"] == 0);
      // A timed call takes time on the GPU (CUDA events resolve about 0.5 us), the median lies
      // within the iterations' range, and algbw is the row's bytes over that median (GB = 1e9).
      for (const std::string p : {"oop_", "ip_"}) {
        CAPTURE(p);
        const double t = row[p + "time_us"].get<double>();
        CHECK(t > 0);
        CHECK(row[p + "time_min_us"].get<double>() <= t);
        CHECK(t <= row[p + "time_max_us"].get<double>());
        CHECK(row[p + "algbw"].get<double>() ==
              doctest::Approx(row["size"].get<double>() / (t * 1e-6) / 1e9).epsilon(1e-9));
      }
    }
  }
}

TEST_CASE("dl-bench collective --backend nccl: more ranks than GPUs is exit 2 naming the rule") {
  const int too_many = dl::cuda_probe().device_count + 1;
  auto refused = dl::test::run(dl::test::tool("dl-bench"),
                               {"collective", "allreduce", "--backend", "nccl", "--nproc-per-node", std::to_string(too_many)});
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("NCCL needs one GPU per rank") != std::string::npos);
}

// Two GPUs: not run by default (doctest's skip), run by ctest `cuda-multi` with --no-skip and
// --min-gpus=2, so that a machine with one GPU reports it as skipped, not passed.
TEST_CASE("dl-bench collective over NCCL on two GPUs: every collective verified across ranks" *
          doctest::test_suite("multi-gpu") * doctest::skip()) {
  for (const char* op : {"allreduce", "allgather", "reducescatter", "broadcast", "sendrecv"}) {
    CAPTURE(op);
    auto r = dl::test::run(dl::test::tool("dl-bench"), {"collective", op, "--device", "cuda", "--nproc-per-node", "2", "-b",
                                                        "8", "-e", "64M", "-f", "8", "--format", "json", "-q"});
    INFO("stderr: ", r.err);
    REQUIRE(r.exit_code == 0);
    for (const json& row : json::parse(r.out)) {
      CHECK(row["backend"] == "nccl");
      CHECK(row["nproc"] == 2);
      CHECK(row["oop_wrong"] == 0);
      CHECK(row["ip_wrong"] == 0);
    }
  }
}
