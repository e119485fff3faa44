// The arithmetic of dl-bench collective: nccl-tests' busbw factors, sizes and counts per
// operation, algbw, the size sweep, and a sweep on a group of one (every value checked).
#include <doctest/doctest.h>

#include <functional>
#include <sstream>

#include "dl/bench/collective.hpp"
#include "dl/bench/common.hpp"
#include "dl/bench/output.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/dist/comm.hpp"
#include "support/support.hpp"

using dl::test::has;

using namespace dl::bench;

namespace {

// dl-bench's flags for the options these errors name.
const dl::OptionNames kFlags = {{"backend", "--backend"}, {"nproc", "--nproc-per-node"}, {"oversubscribe", "--oversubscribe"}};

std::string named_error(const std::function<void()>& call) { return dl::test::named_option_error(call, kFlags); }


}  // namespace

TEST_CASE("busbw factors: allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast and sendrecv 1") {
  for (int n : {1, 2, 4, 8, 16}) {
    const double nd = n;
    CHECK(busbw_factor(CollectiveOp::allreduce, n) == doctest::Approx(2 * (nd - 1) / nd));
    CHECK(busbw_factor(CollectiveOp::allgather, n) == doctest::Approx((nd - 1) / nd));
    CHECK(busbw_factor(CollectiveOp::reducescatter, n) == doctest::Approx((nd - 1) / nd));
    CHECK(busbw_factor(CollectiveOp::broadcast, n) == 1.0);
    CHECK(busbw_factor(CollectiveOp::sendrecv, n) == 1.0);
  }
  CHECK(busbw_factor(CollectiveOp::allreduce, 8) == doctest::Approx(1.75));
  CHECK(busbw_factor(CollectiveOp::allgather, 8) == doctest::Approx(0.875));
  CHECK(busbw_factor(CollectiveOp::allreduce, 2) == doctest::Approx(1.0));
}

TEST_CASE("sizes and counts as nccl-tests prints them, and algbw = size / time in GB/s") {
  // 128 MiB of floats on 8 ranks.
  const int64_t bytes = int64_t{128} << 20;
  CollectiveSize ar = collective_size(CollectiveOp::allreduce, bytes, 4, 8);
  CHECK(ar.size == bytes);
  CHECK(ar.count == bytes / 4);
  CHECK(ar.send_count == bytes / 4);
  CHECK(ar.recv_count == bytes / 4);
  // all-gather: the size is the total received; the count is what each rank sends.
  CollectiveSize ag = collective_size(CollectiveOp::allgather, bytes, 4, 8);
  CHECK(ag.size == bytes);
  CHECK(ag.count == bytes / 4 / 8);
  CHECK(ag.send_count == bytes / 4 / 8);
  CHECK(ag.recv_count == bytes / 4);
  // reduce-scatter: the size is the total sent; the count is what each rank receives.
  CollectiveSize rs = collective_size(CollectiveOp::reducescatter, bytes, 4, 8);
  CHECK(rs.size == bytes);
  CHECK(rs.count == bytes / 4 / 8);
  CHECK(rs.send_count == bytes / 4);
  CHECK(rs.recv_count == bytes / 4 / 8);
  // Counts round down to a multiple of the ranks: 100 bytes of floats on 8 ranks = 3 per rank.
  CollectiveSize odd = collective_size(CollectiveOp::allgather, 100, 4, 8);
  CHECK(odd.count == 3);
  CHECK(odd.size == 96);
  CHECK(collective_size(CollectiveOp::reducescatter, 8, 4, 8).size == 0);
  CHECK(collective_size(CollectiveOp::broadcast, 1000, 8, 4).count == 125);
  CHECK(collective_size(CollectiveOp::sendrecv, 1000, 8, 4).size == 1000);

  // 128 MiB in 1 ms: 134.217728 GB/s algbw; busbw on 8 ranks x 1.75 for all-reduce.
  CHECK(algbw_gbps(ar, 1e-3) == doctest::Approx(134.217728));
  CHECK(algbw_gbps(ar, 1e-3) * busbw_factor(CollectiveOp::allreduce, 8) == doctest::Approx(234.881024));
  CHECK(algbw_gbps(ag, 2e-3) * busbw_factor(CollectiveOp::allgather, 8) == doctest::Approx(134.217728 / 2 * 0.875));
  CHECK(algbw_gbps(ar, 0.0) == 0.0);
}

TEST_CASE("the size sweep: -b 8 -e 128M -f 2 is 25 sizes; -i adds bytes; bad sweeps are usage errors") {
  auto s = collective_sweep(8, int64_t{128} << 20, 2, 0);
  REQUIRE(s.size() == 25);
  CHECK(s.front() == 8);
  CHECK(s.back() == int64_t{128} << 20);
  CHECK(collective_sweep(1000, 4000, 1, 1000) == std::vector<int64_t>{1000, 2000, 3000, 4000});
  CHECK(collective_sweep(64, 64, 2, 0) == std::vector<int64_t>{64});
  CHECK_THROWS_AS(collective_sweep(1024, 8, 2, 0), dl::Error);
  CHECK_THROWS_AS(collective_sweep(8, 1024, 0, 0), dl::Error);
  CHECK_THROWS_AS(collective_sweep(8, 1024, 1, 0), dl::Error);
}

TEST_CASE("operation, type and backend names") {
  CHECK(parse_collective_op("allreduce") == CollectiveOp::allreduce);
  CHECK(parse_collective_op("all_reduce") == CollectiveOp::allreduce);
  CHECK(parse_collective_op("reduce_scatter") == CollectiveOp::reducescatter);
  CHECK(parse_collective_op("AllGather") == CollectiveOp::allgather);
  CHECK(parse_collective_op("sendrecv") == CollectiveOp::sendrecv);
  CHECK_THROWS_WITH_AS(parse_collective_op("alltoall"), doctest::Contains("use allreduce"), dl::Error);
  CHECK(parse_collective_type("float") == dl::DType::f32);
  CHECK(parse_collective_type("int64") == dl::DType::i64);
  CHECK_THROWS_AS(parse_collective_type("half"), dl::Error);
  CollectiveOptions o;
  o.backend = CollectiveBackend::nccl;
  CHECK(has(named_error([&] { validate_collective(o, 2); }), "--backend nccl: "));
  o.backend = CollectiveBackend::gloo;
  o.op = CollectiveOp::broadcast;
  o.root = 2;
  CHECK_THROWS_WITH_AS(validate_collective(o, 2), doctest::Contains("root"), dl::Error);
  o.op = CollectiveOp::reducescatter;
  o.root = 0;
  o.redop = "max";  // Comm's reduce-scatter sums; a max request would only count wrong elements
  CHECK_THROWS_WITH_AS(validate_collective(o, 2), doctest::Contains("-o max: dlkit's reduce-scatter sums"), dl::Error);
  CHECK_THROWS_WITH_AS(parse_collective_backend("mpi"), doctest::Contains("backend mpi: unknown"), dl::Error);
}

TEST_CASE("local ranks: one per core, more with --oversubscribe and a warning that times include scheduling") {
  CHECK(check_local_ranks(1, 2, false).empty());
  CHECK(check_local_ranks(2, 2, false).empty());
  CHECK(check_local_ranks(2, 2, true).empty());
  CHECK(has(named_error([] { check_local_ranks(4, 2, false); }), "--oversubscribe allows more"));
  CHECK(has(named_error([] { check_local_ranks(0, 2, true); }), "--nproc-per-node 0"));
  CHECK(dl::name_options(check_local_ranks(4, 2, true), kFlags) ==
        "--oversubscribe: 4 ranks on 2 CPU cores: the times include the scheduler switching between ranks, not "
        "only the transport");
  CHECK_FALSE(check_local_ranks(16, 2, true).empty());
  CHECK_THROWS_WITH_AS(check_local_ranks(17, 2, true), doctest::Contains("8 per CPU core"), dl::Error);
}

TEST_CASE("the help's --nproc-per-node 4 example runs here with --oversubscribe (a smaller sweep), and not without it") {
  const std::string bench = dl::test::tool("dl-bench");
  auto help = dl::test::run(bench, {"collective", "--help"});
  REQUIRE(help.exit_code == 0);
  // The example line, as the help prints it: "dl-bench collective broadcast --nproc-per-node 4 --oversubscribe ...".
  std::istringstream lines(help.out);
  std::string line;
  std::vector<std::string> args;
  while (std::getline(lines, line)) {
    if (line.find("--nproc-per-node 4") == std::string::npos) continue;
    std::istringstream words(line.substr(0, line.find('#')));
    for (std::string w; words >> w;) args.push_back(w);
  }
  REQUIRE(args.size() > 2);
  CHECK(args[0] == "dl-bench");
  CHECK(std::find(args.begin(), args.end(), "--oversubscribe") != args.end());
  args.erase(args.begin());
  // The example's sweep to 64M takes ~25 s on 2 cores: the same command up to 64K, 3 iterations.
  auto e = std::find(args.begin(), args.end(), "-e");
  REQUIRE(e != args.end());
  REQUIRE(e + 1 != args.end());
  e[1] = "64K";
  args.insert(args.end(), {"-n", "3", "-w", "1"});
  auto r = dl::test::run(bench, args);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(",broadcast,gloo,4,65536,") != std::string::npos);  // csv: op, backend, nproc, size
  const bool over = max_local_ranks() < 4;
  CHECK((r.err.find("the times include the scheduler") != std::string::npos) == over);
  if (over) {
    args.erase(std::find(args.begin(), args.end(), "--oversubscribe"));
    auto refused = dl::test::run(bench, args);
    CHECK(refused.exit_code == 2);
    CHECK(refused.err.find("--nproc-per-node 4: this machine runs 1 to") != std::string::npos);
    CHECK(refused.out.empty());
  }
}

TEST_CASE("the default backend follows --device: cpu is Gloo, cuda is NCCL or a usage error naming why") {
  using dl::DeviceChoice;
  CHECK(default_collective_backend(DeviceChoice::cpu, 2) == CollectiveBackend::gloo);
  std::string why;
  if (!dl::bench::gpu_usable(&why)) {
    CHECK(default_collective_backend(DeviceChoice::automatic, 2) == CollectiveBackend::gloo);
    CHECK_THROWS_WITH_AS(default_collective_backend(DeviceChoice::cuda, 2), doctest::Contains(why.c_str()), dl::Error);
  } else {
    CHECK(default_collective_backend(DeviceChoice::cuda, 1) == CollectiveBackend::nccl);
    CHECK(default_collective_backend(DeviceChoice::automatic, 1) == CollectiveBackend::nccl);
  }
}

TEST_CASE("every collective on a group of one: rows in schema, #wrong 0, algbw = size / time") {
  auto self = dl::dist::make_self_comm();
  CommonOptions common;
  common.repeat = 3;
  common.warmup = 1;
  for (CollectiveOp op : {CollectiveOp::allreduce, CollectiveOp::allgather, CollectiveOp::reducescatter,
                          CollectiveOp::broadcast, CollectiveOp::sendrecv}) {
    CAPTURE(collective_op_name(op));
    CollectiveOptions o;
    o.op = op;
    o.min_bytes = 8;
    o.max_bytes = 1 << 16;
    o.factor = 8;
    Report r = run_collective(o, common, *self);
    CHECK(r.failures.empty());
    REQUIRE(r.rows.size() == 5);  // 8, 64, 512, 4096, 32768
    for (const Row& row : r.rows) {
      CHECK(row["schema"] == "dlkit-bench/1");
      CHECK(row["benchmark"] == "collective");
      CHECK(row["op"] == collective_op_name(op));
      CHECK(row["nproc"] == 1);
      CHECK(row["oop_wrong"] == 0);
      CHECK(row["ip_wrong"] == 0);
      for (const char* p : {"oop_", "ip_"}) {
        const std::string k(p);
        const double t = row[k + "time_us"].get<double>() * 1e-6;
        if (t > 0) CHECK(row[k + "algbw"].get<double>() == doctest::Approx(row["size"].get<double>() / 1e9 / t));
        CHECK(row[k + "busbw"].get<double>() ==
              doctest::Approx(row[k + "algbw"].get<double>() * busbw_factor(op, 1)));
      }
    }
    // One rank moves nothing between devices: the notes say busbw measures no link.
    bool says_no_link = false;
    for (const std::string& n : r.notes) says_no_link = says_no_link || n.find("busbw is 0 by definition") != std::string::npos;
    CHECK(says_no_link);
    std::string text = format_nccl_table(r.rows);
    CHECK(text.find("# Out of bounds values : 0 OK") != std::string::npos);
    CHECK(text.find("# Avg bus bandwidth    : ") != std::string::npos);
  }
}
