#include "dl/bench/collective.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>

#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/core/error.hpp"
#include "dl/core/limits.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/tensor.hpp"
#include "dl/dist/comm.hpp"
#include "dl/dist/gloo_comm.hpp"
#include "dl/dist/launch_env.hpp"
#include "dl/device/select.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/cuda/nccl.hpp"
#include "dl/bench/cuda_bench.hpp"
#include "dl/dist/device_comm.hpp"
#endif

namespace dl::bench {

using dist::Comm;
using dist::ReduceOp;

double algbw_gbps(const CollectiveSize& s, double seconds) {
  return seconds > 0 ? static_cast<double>(s.size) / 1e9 / seconds : 0.0;
}

std::vector<int64_t> collective_sweep(int64_t min_bytes, int64_t max_bytes, int64_t factor, int64_t step_bytes) {
  if (min_bytes < 0) throw_option_error("{min_bytes} ", min_bytes, ": the smallest size must not be negative");
  if (max_bytes < min_bytes) throw_option_error("{min_bytes} ", min_bytes, " is larger than {max_bytes} ", max_bytes,
                                                 " (give {min_bytes} MIN {max_bytes} MAX)");
  if (factor < 1) throw_option_error("{factor} ", factor, ": the size factor must be at least 1 (2 doubles each step)");
  if (factor == 1 && step_bytes <= 0)
    throw_option_error("{step_bytes}: without {factor} > 1 the sizes grow by {step_bytes} bytes, which must be positive");
  std::vector<int64_t> out;
  for (int64_t s = min_bytes; s <= max_bytes;) {
    out.push_back(s);
    if (out.size() > 10000)
      throw_option_error("the sweep from {min_bytes} ", min_bytes, " to {max_bytes} ", max_bytes,
                         " has over 10000 sizes; raise {factor} or {step_bytes}");
    int64_t next = factor > 1 ? s * factor : s + step_bytes;
    if (next <= s) break;  // -b 0 with a factor stays at 0 in nccl-tests too; one line is enough
    s = next;
  }
  return out;
}

namespace {

// -d's types: nccl-tests' names first (the ones printed), then the aliases dlkit also reads.
enum class CollectiveType { f32, f64, i32, i64 };
inline constexpr std::string_view kCollectiveTypeNames[] = {"float", "double", "int32", "int64"};
constexpr std::span<const std::string_view> choice_names(CollectiveType) { return kCollectiveTypeNames; }
inline constexpr ChoiceAlias<CollectiveType> kCollectiveTypeAliases[] = {
    {"float32", CollectiveType::f32}, {"f32", CollectiveType::f32}, {"float64", CollectiveType::f64},
    {"f64", CollectiveType::f64},     {"int", CollectiveType::i32}, {"i32", CollectiveType::i32},
    {"i64", CollectiveType::i64}};
constexpr std::span<const ChoiceAlias<CollectiveType>> choice_aliases(CollectiveType) { return kCollectiveTypeAliases; }
constexpr DType kCollectiveDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64};

}  // namespace

DType parse_collective_type(const std::string& t) {
  if (auto type = parse_choice<CollectiveType>(t)) return kCollectiveDTypes[static_cast<size_t>(*type)];
  throw_option_error("{type} ", t, ": unknown type (use float, double, int32 or int64; Gloo reduces these)");
}

std::string collective_type_name(DType t) {
  for (size_t i = 0; i < std::size(kCollectiveDTypes); ++i)
    if (kCollectiveDTypes[i] == t) return std::string(kCollectiveTypeNames[i]);
  return std::string(dtype_name(t));
}

namespace {

ReduceOp parse_redop(const std::string& s) {
  if (auto r = parse_choice<ReduceOp>(s)) return *r;
  throw_option_error("{redop} ", s, ": unknown reduction (use sum, max or min)");
}

// Test data: small integers, so every sum over ranks is exact in every type; they depend on
// the rank (a misplaced block shows), the element and the check round.
double value(int rank, int64_t i, int round) {
  uint64_t h = static_cast<uint64_t>(i) * 131u + static_cast<uint64_t>(rank) * 977u + static_cast<uint64_t>(round) * 31u;
  return static_cast<double>(h % 61) - 30.0;
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::sum: return a + b;
    case ReduceOp::max: return std::max(a, b);
    case ReduceOp::min: return std::min(a, b);
  }
  return a;
}

template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::i32: f(int32_t{}); break;
    case DType::i64: f(int64_t{}); break;
    default: throw_runtime("collective benchmark: unsupported type ", dtype_name(t));
  }
}

void fill(Tensor& t, int rank, int64_t first, int round) {
  with_type(t.dtype(), [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(value(rank, first + i, round));
  });
}

int64_t count_wrong(const Tensor& t, const std::function<double(int64_t)>& expected) {
  int64_t wrong = 0;
  with_type(t.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* p = static_cast<const T*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i) wrong += static_cast<double>(p[i]) != expected(i);
  });
  return wrong;
}

// Where the benchmark's buffers live and what moves them: host memory over the group's Comm
// (Gloo), or this rank's GPU over NCCL on the CUDA backend's stream.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string library() const = 0;
  virtual Tensor alloc(int64_t n, DType t) = 0;
  virtual void upload(Tensor& dst, const Tensor& host) = 0;
  virtual Tensor download(const Tensor& src) = 0;      // a host copy, complete on return
  virtual void copy(Tensor& dst, const Tensor& src) = 0;  // within the transport's memory
  virtual void allreduce(Tensor& t, ReduceOp op) = 0;
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;
  virtual void allgather(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual std::unique_ptr<dist::Request> isend(const Tensor& t, int peer) = 0;
  virtual std::unique_ptr<dist::Request> irecv(Tensor& t, int peer) = 0;
  // Seconds of each of `repeat` calls of run(i), after `warmup` untimed calls.
  virtual std::vector<double> time(int warmup, int repeat, const std::function<void(int)>& run) = 0;
};

// Host buffers over the Comm itself; wall-clock time around each blocking call.
class HostTransport final : public Transport {
 public:
  explicit HostTransport(Comm& c) : c_(c) {}
  std::string library() const override { return "Gloo"; }
  Tensor alloc(int64_t n, DType t) override { return Tensor::empty({n}, t); }
  void upload(Tensor& dst, const Tensor& host) override { dst.copy_from(host); }
  Tensor download(const Tensor& src) override { return src; }
  void copy(Tensor& dst, const Tensor& src) override { dst.copy_from(src); }
  void allreduce(Tensor& t, ReduceOp op) override { c_.allreduce(t, op); }
  void reduce_scatter(const Tensor& in, Tensor& out) override { c_.reduce_scatter(in, out); }
  void allgather(const Tensor& in, Tensor& out) override { c_.allgather(in, out); }
  void broadcast(Tensor& t, int root) override { c_.broadcast(t, root); }
  std::unique_ptr<dist::Request> isend(const Tensor& t, int peer) override { return c_.isend(t, peer); }
  std::unique_ptr<dist::Request> irecv(Tensor& t, int peer) override { return c_.irecv(t, peer); }
  std::vector<double> time(int warmup, int repeat, const std::function<void(int)>& run) override {
    for (int i = 0; i < warmup; ++i) run(i);
    std::vector<double> seconds;
    for (int i = 0; i < repeat; ++i) {
      const double t0 = monotonic_seconds();
      run(warmup + i);
      seconds.push_back(monotonic_seconds() - t0);
    }
    return seconds;
  }

 private:
  Comm& c_;
};

#ifdef DL_HAVE_CUDA
// GPU buffers from the CUDA backend's arena, NCCL on its stream. Timed calls are only queued
// and timed with CUDA events, as nccl-tests does, so a small message's time is NCCL's and not
// the host's polling; the checked calls wait for completion.
class NcclTransport final : public Transport {
 public:
  NcclTransport(Comm& host, double timeout_s) : be_(open_cuda_backend()) {
    std::string why;
    dev_ = make_nccl_collectives(host, timeout_s, &why);
    if (!dev_)
      throw_option_error("{backend} nccl: ", why, "; NCCL needs a GPU per rank (run at most one rank per GPU, or use {backend} gloo)");
  }
  std::string library() const override { return dev_->name(); }
  Tensor alloc(int64_t n, DType t) override { return be_.empty({n}, t); }
  void upload(Tensor& dst, const Tensor& host) override { be_.copy(dst, host); }
  Tensor download(const Tensor& src) override {
    Tensor h = Tensor::empty(src.shape(), src.dtype());
    be_.copy(h, src);
    return h;
  }
  void copy(Tensor& dst, const Tensor& src) override { be_.copy(dst, src); }
  void allreduce(Tensor& t, ReduceOp op) override { dev_->allreduce(t, op); }
  void reduce_scatter(const Tensor& in, Tensor& out) override { dev_->reduce_scatter(in, out); }
  void allgather(const Tensor& in, Tensor& out) override { dev_->allgather(in, out); }
  void broadcast(Tensor& t, int root) override { dev_->broadcast(t, root); }
  std::unique_ptr<dist::Request> isend(const Tensor& t, int peer) override { return dev_->isend(t, peer); }
  std::unique_ptr<dist::Request> irecv(Tensor& t, int peer) override { return dev_->irecv(t, peer); }
  std::vector<double> time(int warmup, int repeat, const std::function<void(int)>& run) override {
    dev_->set_wait_for_completion(false);
    try {
      std::vector<double> s = time_on_backend_stream(warmup, repeat, run, [this] { dev_->synchronize(); });
      dev_->set_wait_for_completion(true);
      return s;
    } catch (...) {
      dev_->set_wait_for_completion(true);
      throw;
    }
  }

 private:
  CudaBackend& be_;
  std::unique_ptr<dist::DeviceCollectives> dev_;
};
#endif

// ---- the collectives, one description each (as nccl-tests' one file per collective) ----------

// One call of a collective on one rank: its input and output buffers at the iteration's shift
// (the same tensor in place, except where the description says which block), and the rest it needs.
struct Call {
  Tensor in, out;
  bool in_place = false;
  int rank = 0, n = 1, root = 0;
  ReduceOp redop = ReduceOp::sum;
  Tensor staging;  // recv_count elements, for descriptions that stage in place
};

// Where an in-place call's input or output lies in the receive buffer: all of it from the start
// (send_count elements in, recv_count out), or this rank's block of `count` elements.
enum class InPlace { whole, rank_block };

struct Collective {
  CollectiveOp op;
  const char* name;
  // The size rule: send, receive and reported counts for `count` elements over n ranks.
  void (*counts)(int64_t count, int64_t n, CollectiveSize& s);
  double (*bus_factor)(double n);  // busbw / algbw
  bool shows_redop;                // the redop column names the reduction (else "none")
  bool has_root;                   // the root column shows -r (else -1), which must be a rank
  bool sums_only;                  // dlkit's implementation only sums
  bool stages_in_place;            // in place needs a staging buffer of recv_count elements
  InPlace in_place_input, in_place_output;
  // The check: the value element i of this rank's output must hold after the call, when every
  // rank q's input element j was value(q, j, round).
  double (*expected)(const Call& c, const CollectiveSize& s, int64_t i, int round);
  void (*run)(Transport& tr, Call& c);
};

void counts_same(int64_t count, int64_t, CollectiveSize& s) { s.send_count = s.recv_count = s.count = count; }

double reduced(const Call& c, int64_t j, int round) {
  double v = value(0, j, round);
  for (int q = 1; q < c.n; ++q) v = combine(c.redop, v, value(q, j, round));
  return v;
}

const Collective kCollectives[] = {
    {CollectiveOp::allreduce, "allreduce", counts_same, [](double n) { return 2.0 * (n - 1) / n; },
     true, false, false, false, InPlace::whole, InPlace::whole,
     [](const Call& c, const CollectiveSize&, int64_t i, int round) { return reduced(c, i, round); },
     [](Transport& tr, Call& c) {
       // Comm's all-reduce works in place; out of place first copies the input to the output
       // (which Gloo's own out-of-place all-reduce also does).
       if (!c.in_place) tr.copy(c.out, c.in);
       tr.allreduce(c.out, c.redop);
     }},
    {CollectiveOp::allgather, "allgather",
     [](int64_t count, int64_t n, CollectiveSize& s) {  // nccl-tests: sendcount = count/n, recvcount = (count/n) n, param = sendcount
       s.send_count = count / n;
       s.recv_count = (count / n) * n;
       s.count = s.send_count;
     },
     [](double n) { return (n - 1) / n; }, false, false, false, false, InPlace::rank_block, InPlace::whole,
     [](const Call&, const CollectiveSize& s, int64_t i, int round) {
       return value(static_cast<int>(i / std::max<int64_t>(s.count, 1)), i % std::max<int64_t>(s.count, 1), round);
     },
     [](Transport& tr, Call& c) { tr.allgather(c.in, c.out); }},
    {CollectiveOp::reducescatter, "reducescatter",
     [](int64_t count, int64_t n, CollectiveSize& s) {  // sendcount = (count/n) n, recvcount = count/n, param = recvcount
       s.send_count = (count / n) * n;
       s.recv_count = count / n;
       s.count = s.recv_count;
     },
     [](double n) { return (n - 1) / n; }, true, false, true, false, InPlace::whole, InPlace::rank_block,
     [](const Call& c, const CollectiveSize& s, int64_t i, int round) { return reduced(c, c.rank * s.count + i, round); },
     [](Transport& tr, Call& c) { tr.reduce_scatter(c.in, c.out); }},
    {CollectiveOp::broadcast, "broadcast", counts_same, [](double) { return 1.0; }, false, true, false, false,
     InPlace::whole, InPlace::whole,
     [](const Call& c, const CollectiveSize&, int64_t i, int round) { return value(c.root, i, round); },
     [](Transport& tr, Call& c) {
       if (!c.in_place && c.rank == c.root) tr.copy(c.out, c.in);
       tr.broadcast(c.out, c.root);
     }},
    // nccl-tests prints send/recv's reduction too.
    {CollectiveOp::sendrecv, "sendrecv", counts_same, [](double) { return 1.0; }, true, false, false, true,
     InPlace::whole, InPlace::whole,
     [](const Call& c, const CollectiveSize&, int64_t i, int round) { return value((c.rank - 1 + c.n) % c.n, i, round); },
     [](Transport& tr, Call& c) {
       if (c.n == 1) {  // a rank sending to itself
         if (!c.in_place) tr.copy(c.out, c.in);
         return;
       }
       // No in-place point-to-point: in place receives into a staging buffer and copies it over
       // the sent data once both transfers are done (the copy is timed).
       Tensor into = c.in_place ? c.staging : c.out;
       auto rq = tr.irecv(into, (c.rank - 1 + c.n) % c.n);
       auto sq = tr.isend(c.in, (c.rank + 1) % c.n);
       sq->wait();
       rq->wait();
       if (c.in_place) tr.copy(c.out, into);
     }},
};

const Collective& describe(CollectiveOp op) {
  for (const Collective& c : kCollectives)
    if (c.op == op) return c;
  throw_runtime("collective benchmark: no description of collective ", static_cast<int>(op));
}

// The harness for one collective on one rank: buffers for the largest size, shifted per
// iteration like nccl-tests (so successive iterations touch different memory); the description
// says what goes where and what comes back.
class Bench {
 public:
  Bench(const CollectiveOptions& o, int rank, int nranks, Transport& tr, DType type, int64_t capacity)
      : o_(o), d_(describe(o.op)), rank_(rank), n_(nranks), tr_(tr), type_(type), redop_(parse_redop(o.redop)) {
    send_ = tr.alloc(std::max<int64_t>(capacity, 1), type);
    recv_ = tr.alloc(std::max<int64_t>(capacity, 1), type);
    put(send_, rank, 1000);
    put(recv_, rank, 2000);
  }

  void set_size(const CollectiveSize& s) {
    s_ = s;
    slot_ = std::max<int64_t>(std::max(s.send_count, s.recv_count), 1);
    steps_ = std::max<int64_t>(1, send_.numel() / slot_);
    if (d_.stages_in_place) staging_ = tr_.alloc(std::max<int64_t>(s.recv_count, 1), type_);
  }

  // Runs once with fresh data at shift 0 and returns this rank's wrong elements.
  int64_t check(bool in_place, int round) {
    {
      Tensor zeros = Tensor::zeros({s_.recv_count}, type_);
      Tensor recv = recv_.flat_slice(0, {s_.recv_count});
      tr_.upload(recv, zeros);
    }
    Call c = call(in_place, 0);
    put(c.in, rank_, round);
    if (s_.count != 0) d_.run(tr_, c);
    return count_wrong(tr_.download(c.out), [&](int64_t i) { return d_.expected(c, s_, i, round); });
  }

  // The operation at iteration `iter`'s buffer shift.
  void run(bool in_place, int64_t iter) {
    if (s_.count == 0) return;  // nothing to move (a size smaller than one element per rank)
    Call c = call(in_place, slot_ * (iter % steps_));
    d_.run(tr_, c);
  }

 private:
  Call call(bool in_place, int64_t off) {
    Call c;
    c.in_place = in_place;
    c.rank = rank_;
    c.n = n_;
    c.root = o_.root;
    c.redop = redop_;
    const int64_t block = off + rank_ * s_.count;
    if (!in_place) c.in = send_.flat_slice(off, {s_.send_count});
    else if (d_.in_place_input == InPlace::whole) c.in = recv_.flat_slice(off, {s_.send_count});
    else c.in = recv_.flat_slice(block, {s_.count});
    if (in_place && d_.in_place_output == InPlace::rank_block) c.out = recv_.flat_slice(block, {s_.count});
    else c.out = recv_.flat_slice(off, {s_.recv_count});
    if (in_place && d_.stages_in_place) c.staging = staging_.flat_slice(0, {s_.recv_count});
    return c;
  }

  // dst = this rank's test data for `round`, written through host memory.
  void put(Tensor& dst, int rank, int round) {
    Tensor host = Tensor::empty(dst.shape(), type_);
    fill(host, rank, 0, round);
    tr_.upload(dst, host);
  }

  const CollectiveOptions& o_;
  const Collective& d_;
  int rank_, n_;
  Transport& tr_;
  DType type_;
  ReduceOp redop_;
  Tensor send_, recv_, staging_;
  CollectiveSize s_;
  int64_t slot_ = 1, steps_ = 1;
};

}  // namespace

CollectiveOp parse_collective_op(const std::string& text) {
  std::string k, names;
  for (char c : text)
    if (c != '_' && c != '-') k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t count = std::size(kCollectives);
  for (size_t i = 0; i < count; ++i) {
    if (k == kCollectives[i].name) return kCollectives[i].op;
    names += std::string(i == 0 ? "" : i + 1 == count ? " or " : ", ") + kCollectives[i].name;
  }
  throw_usage("collective '", text, "': unknown (use ", names, ")");
}

std::string collective_op_name(CollectiveOp op) { return describe(op).name; }

double busbw_factor(CollectiveOp op, int n) { return describe(op).bus_factor(static_cast<double>(n)); }

CollectiveSize collective_size(CollectiveOp op, int64_t bytes, int64_t type_size, int nranks) {
  CollectiveSize s;
  describe(op).counts(bytes / type_size, nranks, s);
  s.size = std::max(s.send_count, s.recv_count) * type_size;
  return s;
}

CollectiveBackend parse_collective_backend(const std::string& text) {
  if (auto b = parse_choice<CollectiveBackend>(text)) return *b;
  throw_option_error("{backend} ", text, ": unknown (use gloo, or nccl in a CUDA build)");
}

namespace {

// The largest send and receive counts over the sweep's sizes: what Bench allocates for.
CollectiveSize largest_counts(const CollectiveOptions& o, int64_t type_size, int nranks) {
  CollectiveSize most;
  for (int64_t b : collective_sweep(o.min_bytes, o.max_bytes, o.factor, o.step_bytes)) {
    const CollectiveSize s = collective_size(o.op, b, type_size, nranks);
    most.send_count = std::max(most.send_count, s.send_count);
    most.recv_count = std::max(most.recv_count, s.recv_count);
  }
  return most;
}

// Host memory the ranks of this node allocate for the largest size, checked before any buffer
// (and, in the launcher, any rank) exists. Per rank, Gloo: the send and receive buffers of the
// largest count, the in-place staging buffer, and the check's zeros and downloaded output; NCCL:
// the host copies of the test data, the zeros and the output (its buffers are on the GPU).
void check_collective_memory(const CollectiveOptions& o, int nranks) {
  const DType type = parse_collective_type(o.type);
  const double ts = static_cast<double>(dtype_size(type));
  const CollectiveSize most = largest_counts(o, static_cast<int64_t>(ts), nranks);
  const double capacity = static_cast<double>(std::max<int64_t>({most.send_count, most.recv_count, 1}));
  const double recv = static_cast<double>(most.recv_count);
  const double per_rank = ts * (o.backend == CollectiveBackend::gloo ? 2 * capacity + 3 * recv : capacity + 2 * recv);
  const dist::LaunchEnv env = dist::detect_launch_env(dist::process_environment());
  const int local = env.distributed() ? env.local_world : nranks;  // ranks of this node
  check_memory_fits(per_rank * local,
                    str("{max_bytes} ", o.max_bytes, " (", local, local == 1 ? " rank" : " ranks",
                        " on this node, each with its buffers for the largest size)"),
                    "lower {max_bytes} (and {min_bytes}), or run fewer ranks with {nproc}");
}

}  // namespace

void validate_collective(const CollectiveOptions& o, int nranks) {
  parse_collective_type(o.type);
  const ReduceOp redop = parse_redop(o.redop);
  const Collective& d = describe(o.op);
  if (d.sums_only && redop != ReduceOp::sum)
    throw_usage("-o ", o.redop, ": dlkit's reduce-scatter sums (the reduction its training code needs); use -o sum");
  if (d.has_root && (o.root < 0 || o.root >= nranks))
    throw_option_error("{root} ", o.root, ": the broadcast root must be a rank in [0, ", nranks, ")");
  if (o.timeout_s <= 0) throw_option_error("{timeout_s} must be positive");
  collective_sweep(o.min_bytes, o.max_bytes, o.factor, o.step_bytes);
  check_collective_memory(o, nranks);
  if (o.backend == CollectiveBackend::nccl) {
#ifdef DL_HAVE_CUDA
    const CudaBenchDevice gpu = cuda_bench_device();
    if (!gpu.usable) throw_option_error("{backend} nccl: no usable CUDA GPU: ", gpu.why, "; use {backend} gloo, which runs on the CPU");
    const dist::LaunchEnv env = dist::detect_launch_env(dist::process_environment());
    const int local = env.distributed() ? env.local_world : nranks;  // ranks of this node
    if (local > gpu.device_count)
      throw_option_error("{backend} nccl with ", local, " ranks on this node: it has ", gpu.device_count,
                         gpu.device_count == 1 ? " GPU" : " GPUs", " and NCCL needs one GPU per rank; use {nproc} ",
                         gpu.device_count, ", or {backend} gloo for more ranks");
#else
    throw_option_error("{backend} nccl: this build has no CUDA backend (CPU only); use {backend} gloo, which runs on the CPU");
#endif
  }
}

std::string check_local_ranks(int nranks, int cores, bool oversubscribe) {
  const int limit = oversubscribe ? kOversubscribePerCore * cores : cores;
  if (nranks < 1 || nranks > limit)
    throw_option_error("{nproc} ", nranks, ": this machine runs 1 to ", limit, " ranks",
                       oversubscribe ? str(" (", kOversubscribePerCore, " per CPU core with {oversubscribe})")
                                     : std::string(" (one per CPU core; more would time the scheduler, not the transport; "
                                                   "{oversubscribe} allows more)"));
  if (nranks <= cores) return "";
  return str("{oversubscribe}: ", nranks, " ranks on ", cores, " CPU cores: the times include the scheduler switching "
             "between ranks, not only the transport");
}

CollectiveBackend default_collective_backend(DeviceChoice device, int nranks) {
  if (select_device(device) == DeviceKind::cpu) return CollectiveBackend::gloo;  // cpu, or auto without a GPU (it says so)
#ifdef DL_HAVE_CUDA
  const int gpus = cuda_bench_device().device_count;
  const dist::LaunchEnv env = dist::detect_launch_env(dist::process_environment());
  const int local = env.distributed() ? env.local_world : nranks;  // ranks of this node
  if (device == DeviceChoice::automatic && local > gpus) {
    log_info(str("device auto: ", local, " ranks on this node but ", gpus, gpus == 1 ? " GPU" : " GPUs",
                 " (NCCL needs one per rank); measuring Gloo on the CPU"));
    return CollectiveBackend::gloo;
  }
#else
  (void)nranks;
#endif
  return CollectiveBackend::nccl;
}

Report run_collective(const CollectiveOptions& o, const CommonOptions& common, Comm& world, const RowSink& on_row) {
  const int n = world.size(), rank = world.rank();
  validate_collective(o, n);
  const DType type = parse_collective_type(o.type);
  const int64_t ts = static_cast<int64_t>(dtype_size(type));
  const std::vector<int64_t> sweep = collective_sweep(o.min_bytes, o.max_bytes, o.factor, o.step_bytes);
  const CollectiveSize most = largest_counts(o, ts, n);
  const int64_t capacity = std::max<int64_t>({most.send_count, most.recv_count, 1});
  const int repeat = repeat_or(common, 20), warmup = warmup_or(common, 5);  // nccl-tests: -n 20 -w 5
  std::unique_ptr<Transport> transport;
  DeviceInfo dev;
  if (o.backend == CollectiveBackend::nccl) {
#ifdef DL_HAVE_CUDA
    transport = std::make_unique<NcclTransport>(world, o.timeout_s);
    dev = cuda_bench_device().info;
#endif
  } else {
    transport = std::make_unique<HostTransport>(world);
    dev = cpu_device_info();
  }
  dev.num_devices = n;
  dev.library = transport->library();
  Bench bench(o, rank, n, *transport, type, capacity);
  const Collective& d = describe(o.op);
  const int root = d.has_root ? o.root : -1;

  Report report;
  int round = 0;
  for (int64_t bytes : sweep) {
    const CollectiveSize s = collective_size(o.op, bytes, ts, n);
    bench.set_size(s);
    Row r = common_row("collective", dev, repeat, warmup);
    r["op"] = collective_op_name(o.op);
    r["backend"] = std::string(o.backend.name());
    r["nproc"] = n;
    r["size"] = s.size;
    r["count"] = s.count;
    r["type"] = collective_type_name(type);
    r["redop"] = d.shows_redop ? o.redop : "none";
    r["root"] = root;
    for (bool in_place : {false, true}) {
      const std::string p = in_place ? "ip_" : "oop_";
      Tensor wrong = Tensor::empty({1}, DType::i64);
      wrong.data<int64_t>()[0] = bench.check(in_place, ++round);
      world.allreduce(wrong);
      world.barrier();
      const std::vector<double> mine = transport->time(warmup, repeat, [&](int i) { bench.run(in_place, i); });
      Tensor times = Tensor::empty({repeat}, DType::f64);
      double* tv = times.data<double>();
      std::copy(mine.begin(), mine.end(), tv);
      // Each iteration's time averaged over the ranks (nccl-tests' default -a 1), then the median.
      world.allreduce(times);
      std::vector<double> per_iter(tv, tv + repeat);
      for (double& t : per_iter) t /= n;
      Timing t = summarize(per_iter);
      const double algbw = algbw_gbps(s, t.median);
      const int64_t nwrong = wrong.data<int64_t>()[0];
      r[p + "time_us"] = t.median * 1e6;
      r[p + "algbw"] = algbw;
      r[p + "busbw"] = algbw * busbw_factor(o.op, n);
      r[p + "wrong"] = nwrong;
      r[p + "time_min_us"] = t.min * 1e6;
      r[p + "time_max_us"] = t.max * 1e6;
      if (nwrong)
        report.failures.push_back(str(collective_op_name(o.op), " ", in_place ? "in-place" : "out-of-place", " at ",
                                      s.size, " bytes: ", nwrong, " wrong elements over ", n, " ranks"));
    }
    if (rank == 0) {
      log_info(str("collective ", collective_op_name(o.op), " of ", format_bytes(static_cast<double>(s.size), true), " over ", n,
                   n == 1 ? " rank" : " ranks", ": busbw ", format_fixed(r.value("oop_busbw", 0.0), 2), " GB/s out-of-place, ",
                   format_fixed(r.value("ip_busbw", 0.0), 2), " GB/s in-place"));
      if (on_row) on_row(r);
    }
    report.rows.push_back(std::move(r));
  }
  if (rank == 0)
    report.notes.push_back(str("collective: ", collective_op_name(o.op), " over ", n, " ranks (",
                               o.backend == CollectiveBackend::nccl ? dev.library + " on the GPUs, CUDA events per call" : "Gloo on the CPU",
                               "); busbw = algbw x ", format_fixed(busbw_factor(o.op, n), 4),
                               ", GB = 1e9 bytes; time = median over ", repeat,
                               " iterations of the per-iteration time averaged over ranks"));
  if (rank == 0 && n == 1)
    report.notes.push_back("collective: one rank moves no data between GPUs, so busbw is 0 by definition and measures "
                           "no interconnect; this run checks NCCL's path and every output (#wrong), and algbw is a "
                           "local copy. Run one rank per GPU (--nproc-per-node) to measure a link");
  return report;
}

Report run_collective_rank(const CollectiveOptions& o, const CommonOptions& common, int* rank_out, const RowSink& on_row) {
  const dist::LaunchEnv env = dist::detect_launch_env(dist::process_environment());
  validate_collective(o, env.world);
  std::unique_ptr<Comm> world = env.distributed() ? dist::make_gloo_world(env, o.timeout_s) : dist::make_self_comm();
  if (rank_out) *rank_out = world->rank();
  Report r = run_collective(o, common, *world, on_row);
  world->barrier();  // no rank leaves while another still needs it
  return r;
}

namespace {

std::string printf_text(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

std::string nccl_table_header() {
  return printf_text("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
                     "", "", "") +
         printf_text("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
                     "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong") +
         printf_text("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
                     "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

std::string nccl_table_line(const Row& r) {
  auto time_text = [](double us) {
    return printf_text(us >= 10000.0 ? "%7.0f" : (us >= 100.0 ? "%7.1f" : "%7.2f"), us);
  };
  std::string out = printf_text("%12li  %12li  %8s  %6s  %6i", static_cast<long>(r.value("size", int64_t{0})),
                                static_cast<long>(r.value("count", int64_t{0})), r.value("type", std::string()).c_str(),
                                r.value("redop", std::string()).c_str(), static_cast<int>(r.value("root", int64_t{-1})));
  for (const char* p : {"oop_", "ip_"}) {
    const std::string k(p);
    out += printf_text("  %7s  %6.2f  %6.2f  %5li", time_text(r.value(k + "time_us", 0.0)).c_str(), r.value(k + "algbw", 0.0),
                       r.value(k + "busbw", 0.0), static_cast<long>(r.value(k + "wrong", int64_t{0})));
  }
  return out + "\n";
}

std::string nccl_table_footer(const std::vector<Row>& rows) {
  double bw_sum = 0;
  int bw_count = 0, bad_sizes = 0;
  for (const Row& r : rows) {
    bool bad = false;
    for (const char* p : {"oop_", "ip_"}) {
      const std::string k(p);
      bw_sum += r.value(k + "busbw", 0.0);
      ++bw_count;
      bad = bad || r.value(k + "wrong", int64_t{0}) != 0;
    }
    bad_sizes += bad;
  }
  return printf_text("# Out of bounds values : %d %s\n", bad_sizes, bad_sizes ? "FAILED" : "OK") +
         printf_text("# Avg bus bandwidth    : %g \n", bw_count ? bw_sum / bw_count : 0.0);
}

std::string format_nccl_table(const std::vector<Row>& rows) {
  std::string out = nccl_table_header();
  for (const Row& r : rows) out += nccl_table_line(r);
  return out + nccl_table_footer(rows);
}

}  // namespace dl::bench
