// dl-bench collective: nccl-tests' measurements and output over dlkit's collectives (Gloo on
// the CPU, host buffers; NCCL in a CUDA build, GPU buffers and CUDA events). Conventions (../shared/REFERENCE.md, nccl-tests'
// doc/PERFORMANCE.md): algbw = size / time with GB = 1e9; busbw = algbw x factor (all-reduce
// 2(n-1)/n; reduce-scatter and all-gather (n-1)/n, their size being the total over ranks;
// broadcast and send/recv 1); out-of-place and in-place columns with #wrong; the average bus
// bandwidth footer. Method: docs/BENCH.md. Each collective is one description in collective.cpp
// (kCollectives: its size rule, bus factor, in-place layout, expected values and call), as
// nccl-tests has one small file per collective; the harness there does the rest.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dl/bench/common.hpp"
#include "dl/core/dtype.hpp"

namespace dl::dist {
class Comm;
}

namespace dl::bench {

enum class CollectiveOp { allreduce, allgather, reducescatter, broadcast, sendrecv };

// allreduce | allgather | reducescatter | broadcast | sendrecv (nccl-tests' all_reduce spellings
// too); usage error listing them otherwise.
CollectiveOp parse_collective_op(const std::string& text);
std::string collective_op_name(CollectiveOp op);

// busbw / algbw for n ranks.
double busbw_factor(CollectiveOp op, int nranks);

// One line of the size sweep, as nccl-tests computes it from a requested byte size: count =
// bytes / type size elements; all-gather and reduce-scatter round the count down to a multiple
// of the ranks and report the per-rank count.
struct CollectiveSize {
  int64_t size = 0;        // the "size" column: bytes of the larger buffer (total over ranks for all-gather/reduce-scatter)
  int64_t count = 0;       // the "count" column: elements of the operation's count parameter
  int64_t send_count = 0;  // elements each rank sends from
  int64_t recv_count = 0;  // elements each rank receives into
};
CollectiveSize collective_size(CollectiveOp op, int64_t bytes, int64_t type_size, int nranks);

// GB/s (1e9 bytes) from the size column and the time in seconds; 0 when the time is 0.
double algbw_gbps(const CollectiveSize& s, double seconds);

// The sizes nccl-tests visits: from min to max multiplying by factor (factor > 1), else adding
// step bytes. Usage errors for min > max, factor < 1, or a step of 0 without a factor.
std::vector<int64_t> collective_sweep(int64_t min_bytes, int64_t max_bytes, int64_t factor, int64_t step_bytes);

// float | double | int32 | int64 (nccl-tests' names), and sum | max | min.
DType parse_collective_type(const std::string& text);
std::string collective_type_name(DType t);

// Where the buffers live and who moves them: Gloo over host memory, or NCCL with one GPU per rank.
enum class CollectiveBackend { gloo, nccl };
inline constexpr std::string_view kCollectiveBackendNames[] = {"gloo", "nccl"};
constexpr std::span<const std::string_view> choice_names(CollectiveBackend) { return kCollectiveBackendNames; }
// gloo | nccl; anything else is a usage error ({backend}).
CollectiveBackend parse_collective_backend(const std::string& text);

struct CollectiveOptions {
  CollectiveOp op = CollectiveOp::allreduce;
  Choice<CollectiveBackend> backend = CollectiveBackend::gloo;
  int64_t min_bytes = 8, max_bytes = 32 << 20, factor = 2, step_bytes = 0;
  std::string type = "float";
  std::string redop = "sum";
  int root = 0;
  double timeout_s = 300;
};

// Checks the options (usage errors) before any rank starts: backend, sizes, type, op, root
// against nranks; the host memory the ranks of this node would allocate for the largest size
// against available_memory() (core/limits.hpp); for nccl, a usable GPU per rank of this node.
void validate_collective(const CollectiveOptions& options, int nranks);

// How many local Gloo ranks (processes of this machine) may start: 1 to `cores`, one per core,
// since more would time the scheduler switching ranks as much as the transport. With
// `oversubscribe` (mpirun's spelling) up to kOversubscribePerCore x cores may start, and the
// returned warning says the times then include scheduling ("" when nranks <= cores); it names
// the options as {oversubscribe} (dl/core/option_error: the tool puts its flag there). Outside
// the limits: a usage error naming {nproc} and what to do.
inline constexpr int kOversubscribePerCore = 8;
std::string check_local_ranks(int nranks, int cores, bool oversubscribe);

// The backend when none is given: gloo for device cpu, nccl for cuda (a usage error without a
// GPU), and for auto nccl when this node has a GPU per rank, else gloo (logged).
CollectiveBackend default_collective_backend(DeviceChoice device, int nranks);

// Runs the sweep on this rank of `world`; every rank gets the same rows (times averaged over
// ranks, #wrong summed). A nonzero #wrong is a failure in the report. Rank 0 logs each size as
// it finishes and hands its row to `on_row` then (nccl-tests prints a line per size).
using RowSink = std::function<void(const Row&)>;
Report run_collective(const CollectiveOptions& options, const CommonOptions& common, dist::Comm& world,
                      const RowSink& on_row = {});

// The same as a process of a launched job: joins the world from the launch environment (Gloo),
// or runs alone as a group of one when there is no launch environment.
Report run_collective_rank(const CollectiveOptions& options, const CommonOptions& common, int* rank = nullptr,
                           const RowSink& on_row = {});

// nccl-tests' text table for collective rows (header, one line per size, the out-of-bounds and
// average bus bandwidth footer). Its columns have fixed widths, so the header and each line
// print as soon as they are known (RowStream, output.hpp).
std::string format_nccl_table(const std::vector<Row>& rows);
std::string nccl_table_header();
std::string nccl_table_line(const Row& row);
std::string nccl_table_footer(const std::vector<Row>& rows);

}  // namespace dl::bench
