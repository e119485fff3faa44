// dl-bench collective over NCCL: GPU buffers, every collective's output verified (#wrong 0) on a
// group of one, and across ranks when the machine has a GPU per rank; two ranks on one GPU are a
// usage error naming the rule (NCCL refuses duplicate devices). Skips without a GPU.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/backend/cuda/cuda_backend.hpp"
#include "dl/bench/collective.hpp"
#include "dl/core/error.hpp"
#include "dl/dist/comm.hpp"
#include "support/support.hpp"

using namespace dl::bench;
using nlohmann::json;

namespace {

constexpr CollectiveOp kOps[] = {CollectiveOp::allreduce, CollectiveOp::allgather, CollectiveOp::reducescatter,
                                 CollectiveOp::broadcast, CollectiveOp::sendrecv};

bool gpu_or_skip(dl::CudaDeviceInfo* out = nullptr) {
  const dl::CudaDeviceInfo info = dl::cuda_probe();
  if (out) *out = info;
  if (!info.usable) MESSAGE("skipped: no CUDA device (" << info.reason << ")");
  return info.usable;
}

}  // namespace

TEST_CASE("NCCL on a group of one: every collective verified, rows name NCCL and the GPU") {
  if (!gpu_or_skip()) return;
  auto self = dl::dist::make_self_comm();
  CommonOptions common;
  common.repeat = 5;
  common.warmup = 2;
  for (CollectiveOp op : kOps) {
    CAPTURE(collective_op_name(op));
    CollectiveOptions o;
    o.op = op;
    o.backend = "nccl";
    o.min_bytes = 8;
    o.max_bytes = 16 << 20;
    o.factor = 16;
    Report r = run_collective(o, common, *self);
    CHECK(r.failures.empty());
    REQUIRE(r.rows.size() == 7);  // 8 B .. 16 MiB by 16
    for (const Row& row : r.rows) {
      CHECK(row["backend"] == "nccl");
      CHECK(row["device_type"] == "cuda");
      CHECK(row["library"].get<std::string>().rfind("NCCL ", 0) == 0);
      CHECK(row["oop_wrong"] == 0);
      CHECK(row["ip_wrong"] == 0);
      CHECK(row["oop_time_us"].get<double>() >= 0);
    }
  }
}

TEST_CASE("dl-bench collective --backend nccl: a GPU per rank, or exit 2 naming the rule") {
  dl::CudaDeviceInfo info;
  if (!gpu_or_skip(&info)) return;
  const std::string bench = dl::test::tool("dl-bench");
  const int too_many = info.device_count + 1;
  auto refused = dl::test::run(bench, {"collective", "allreduce", "--backend", "nccl", "--nproc", std::to_string(too_many)});
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("NCCL needs one GPU per rank") != std::string::npos);
  if (info.device_count < 2) {
    MESSAGE("skipped the multi-rank NCCL run: this machine has " << info.device_count << " GPU");
    return;
  }
  for (const char* op : {"allreduce", "allgather", "reducescatter", "broadcast", "sendrecv"}) {
    CAPTURE(op);
    auto r = dl::test::run(bench, {"collective", op, "--device", "cuda", "--nproc", "2", "-b", "8", "-e", "64M", "-f",
                                   "8", "--format", "json", "-q"});
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
