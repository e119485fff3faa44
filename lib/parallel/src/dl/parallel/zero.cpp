#include "dl/parallel/zero.hpp"

#include <algorithm>
#include <set>

#include "dl/core/half.hpp"

namespace dl::parallel {

int64_t ZeroGroup::own_begin(int rank) const { return std::min(end, begin + rank * piece); }
int64_t ZeroGroup::own_end(int rank) const { return std::min(end, begin + (rank + 1) * piece); }

std::vector<ZeroGroup> zero_groups(const ParamSet& params, const std::vector<std::pair<size_t, size_t>>& groups,
                                   int dp_size) {
  std::vector<ZeroGroup> out;
  for (auto [p0, p1] : groups) {
    if (p0 == p1) continue;
    ZeroGroup g;
    g.p0 = p0;
    g.p1 = p1;
    g.begin = params.info(p0).offset;
    g.end = params.info(p1 - 1).offset + params.info(p1 - 1).numel();
    g.piece = (g.end - g.begin + dp_size - 1) / dp_size;
    out.push_back(g);
  }
  return out;
}

namespace {

// Calls fn(param index, overlap lo, overlap hi) in flat element space for params overlapping [a, b).
template <class F>
void for_each_overlap(const ParamSet& params, int64_t a, int64_t b, size_t p0, size_t p1, F&& fn) {
  for (size_t i = p0; i < p1; ++i) {
    const ParamInfo& info = params.info(i);
    int64_t lo = std::max(a, info.offset), hi = std::min(b, info.offset + info.numel());
    if (lo < hi) fn(i, lo, hi);
  }
}

// Bytes of the storages behind tensors, each storage once (a view counts its whole storage).
class StorageBytes {
 public:
  int64_t add(const Tensor& t) {
    if (!t.defined() || !seen_.insert(t.storage().get()).second) return 0;
    return static_cast<int64_t>(t.storage()->bytes());
  }

 private:
  std::set<const Storage*> seen_;
};

}  // namespace

ZeroPieces zero_pieces(const ParamSet& params, const std::vector<std::pair<size_t, size_t>>& group_ranges,
                       const ZeroRank& r) {
  // One copy of everything is saved: tied copies are the first stage's, replicated (not
  // tensor-sliced) parameters are tensor-parallel rank 0's.
  auto saves = [&](size_t i) {
    const ParamInfo& info = params.info(i);
    return !info.tied_copy && (!info.slice.whole() || r.count_replicated);
  };
  // This rank's shards: its owned range of every group, cut at parameter boundaries.
  std::vector<Piece> owned;
  for (const auto& g : zero_groups(params, group_ranges, r.dp_size))
    for_each_overlap(params, g.own_begin(r.dp_rank), g.own_end(r.dp_rank), g.p0, g.p1,
                     [&](size_t i, int64_t lo, int64_t hi) {
                       owned.push_back({i, lo - params.info(i).offset, hi - params.info(i).offset});
                     });
  std::vector<Piece> whole;
  for (size_t i = 0; i < params.size(); ++i) whole.push_back({i, 0, params.info(i).numel()});
  auto saved = [&](const std::vector<Piece>& ps) {
    std::vector<Piece> out;
    for (const Piece& p : ps)
      if (saves(p.param)) out.push_back(p);
    return out;
  };
  ZeroPieces out;
  // Parameters: whole local tensors for zero < 3 (tied copies included when loading, written by
  // dp rank 0 only), shards for zero 3. Optimizer state: whole for zero 0, shards otherwise.
  // Mixed precision: the parameters saved and loaded are the master weights, cut like the state.
  out.state_to_load = r.zero == 0 ? whole : owned;
  out.params_to_load = r.master_weights ? out.state_to_load : r.zero < 3 ? whole : owned;
  if (r.zero > 0 || r.dp_rank == 0) out.state_to_save = saved(out.state_to_load);
  if (r.master_weights)
    out.params_to_save = out.state_to_save;
  else if (r.zero == 3 || r.dp_rank == 0)
    out.params_to_save = saved(out.params_to_load);
  return out;
}

ZeroEngine::ZeroEngine(ParamSet& params, std::vector<std::pair<size_t, size_t>> groups, dist::Comm& dp,
                       const ParallelConfig& parallel, const OptimConfig& optim, double bucket_mb,
                       bool count_replicated)
    : params_(params),
      dp_(dp),
      zero_(static_cast<int>(parallel.zero)),
      offload_(parallel.offload == Offload::cpu),
      opt_(optim),
      count_replicated_(count_replicated),
      be_(params.backend()) {
  const DType pdt = params.dtype();
  const bool mixed = is_16bit_float(pdt);
  const DType state_dt = mixed ? DType::f32 : pdt;
  const int64_t es = static_cast<int64_t>(dtype_size(pdt));
  bucket_elems_ = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1e6) / es);
  const int n = dp_.size();
  group_ranges_ = groups;
  int64_t shard = 0, widest = 0;
  for (const ZeroGroup& cut : zero_groups(params, groups, n)) {
    Group g;
    static_cast<ZeroGroup&>(g) = cut;
    g.shard_offset = shard;
    g.rank = dp_.rank();
    shard += g.piece;
    widest = std::max(widest, g.piece);
    groups_.push_back(g);
  }
  shard_size_ = shard;
  const int64_t whole = params.numel();
  const int64_t state_elems = zero_ == 0 ? whole : shard_size_;
  Backend& state_be = offload_ ? cpu_backend() : be_;
  for (size_t k = 0; k < opt_.state_names().size(); ++k) {
    state_.push_back(state_be.empty({state_elems}, state_dt));
    state_be.zero(state_.back());
  }
  if (mixed) {
    master_ = state_be.empty({state_elems}, DType::f32);
    state_be.zero(master_);
  }
  if (zero_ >= 2) {
    shard_grads_ = be_.empty({shard_size_}, params.dtype());
    be_.zero(shard_grads_);
  }
  if (zero_ >= 1) {
    staging_ = be_.empty({widest * n}, params.dtype());
    staging_piece_ = be_.empty({widest}, params.dtype());
  }
  if (zero_ == 3) {
    shard_params_ = be_.empty({shard_size_}, params.dtype());
    be_.zero(shard_params_);
    work_.resize(groups_.size());
    params_.drop_storage();  // the whole model now exists only as gathered groups
  }
}

ZeroEngine::~ZeroEngine() = default;

const ZeroEngine::Group& ZeroEngine::group_of(int64_t flat) const {
  for (const auto& g : groups_)
    if (flat >= g.begin && flat < g.end) return g;
  throw_runtime("element ", flat, " is in no parameter group");
}

int64_t ZeroEngine::shard_index(int64_t flat) const {
  const Group& g = group_of(flat);
  DL_CHECK(flat >= g.own_begin() && flat < g.own_end(), "element ", flat, " is not owned by dp rank ", g.rank);
  return g.shard_offset + (flat - (g.begin + g.rank * g.piece));
}

Tensor ZeroEngine::param_storage(int64_t flat, int64_t n) {
  if (zero_ < 3) return params_.flat_values().flat_slice(flat, {n});
  return shard_params_.flat_slice(shard_index(flat), {n});
}

Tensor ZeroEngine::grad_storage(int64_t flat, int64_t n) {
  if (zero_ < 2) return params_.flat_grads().flat_slice(flat, {n});
  return shard_grads_.flat_slice(shard_index(flat), {n});
}

Tensor ZeroEngine::state_storage(size_t k, int64_t flat, int64_t n) {
  if (zero_ == 0) return state_[k].flat_slice(flat, {n});
  return state_[k].flat_slice(shard_index(flat), {n});
}

std::pair<int64_t, int64_t> ZeroEngine::updated_range(const Group& g) const {
  if (zero_ == 0) return {g.begin, g.end};
  return {g.own_begin(), g.own_end()};
}

Tensor ZeroEngine::master_storage(int64_t flat, int64_t n) {
  if (zero_ == 0) return master_.flat_slice(flat, {n});
  return master_.flat_slice(shard_index(flat), {n});
}

void ZeroEngine::publish_master() {
  for (const auto& g : groups_) {
    const auto [a, b] = updated_range(g);
    if (b <= a) continue;
    Tensor dst = param_storage(a, b - a);
    copy_converted(be_, dst, master_storage(a, b - a));  // offloaded master weights round on the host
  }
  gather_params();
}

void ZeroEngine::gather_params() {
  if (zero_ != 1 && zero_ != 2) return;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    Tensor whole = staging_.flat_slice(0, {g.piece * dp_.size()});
    gather_group(static_cast<int>(gi), whole);
    Tensor dst = params_.flat_values().flat_slice(g.begin, {g.end - g.begin});
    be_.copy(dst, whole.flat_slice(0, {g.end - g.begin}));
  }
}

bool ZeroEngine::counts_in_norm(size_t i) const {
  const ParamInfo& info = params_.info(i);
  if (info.tied_copy) return false;  // the first stage counts the tied embedding
  return info.slice.whole() ? count_replicated_ : true;
}

void ZeroEngine::initialize(uint64_t seed) {
  if (master_weights()) {
    // f32 values into the master copy (whole or this rank's shard), the 16-bit copy from them.
    for (const auto& g : groups_) {
      const auto [a, b] = updated_range(g);
      for_each_overlap(params_, a, b, g.p0, g.p1, [&](size_t i, int64_t lo, int64_t hi) {
        const ParamInfo& info = params_.info(i);
        Tensor host = Tensor::empty(info.shape, DType::f32);
        init_param_values(info, seed, host);
        Tensor dst = master_storage(lo, hi - lo);
        be_.copy(dst, host.view({info.numel()}).flat_slice(lo - info.offset, {hi - lo}));
      });
    }
    publish_master();
    return;
  }
  if (zero_ < 3) {
    params_.initialize(seed);
    return;
  }
  for (const auto& g : groups_) {
    for_each_overlap(params_, g.own_begin(), g.own_end(), g.p0, g.p1, [&](size_t i, int64_t lo, int64_t hi) {
      const ParamInfo& info = params_.info(i);
      Tensor host = Tensor::empty(info.shape, params_.dtype());
      init_param_values(info, seed, host);
      Tensor dst = param_storage(lo, hi - lo);
      be_.copy(dst, host.view({info.numel()}).flat_slice(lo - info.offset, {hi - lo}));
    });
  }
}

void ZeroEngine::zero_grad() {
  if (zero_ < 3) params_.zero_grad();
  if (zero_ >= 2) be_.zero(shard_grads_);
}

void ZeroEngine::reduce_gradients() {
  if (zero_ >= 2 || dp_.size() == 1) return;
  Tensor& g = params_.flat_grads();
  for (int64_t off = 0; off < g.numel(); off += bucket_elems_) {
    Tensor bucket = g.flat_slice(off, {std::min(bucket_elems_, g.numel() - off)});
    dp_.allreduce(bucket);
  }
}

double ZeroEngine::grad_norm_squared() const {
  auto* self = const_cast<ZeroEngine*>(this);
  double s = 0;
  if (zero_ < 2) {
    // Whole, identical gradients on every dp rank: dp rank 0 counts them.
    if (dp_.rank() != 0) return 0;
    for (size_t i = 0; i < params_.size(); ++i)
      if (counts_in_norm(i)) s += be_.sum_squares(self->params_.grad(i));
    return s;
  }
  for (const auto& g : groups_)
    for_each_overlap(params_, g.own_begin(), g.own_end(), g.p0, g.p1, [&](size_t i, int64_t lo, int64_t hi) {
      if (counts_in_norm(i)) s += be_.sum_squares(self->grad_storage(lo, hi - lo));
    });
  return s;
}

double ZeroEngine::param_norm_squared() const {
  if (master_weights()) return (offload_ ? cpu_backend() : be_).sum_squares(master_);
  if (zero_ == 3) return be_.sum_squares(shard_params_);
  return be_.sum_squares(params_.flat_values());
}

void ZeroEngine::step(double lr, double grad_scale) {
  opt_.begin_step();
  Backend& step_be = offload_ ? cpu_backend() : be_;
  for (const auto& g : groups_) {
    const auto [a, b] = updated_range(g);
    for_each_overlap(params_, a, b, g.p0, g.p1, [&](size_t i, int64_t lo, int64_t hi) {
      Tensor p = master_weights() ? master_storage(lo, hi - lo) : param_storage(lo, hi - lo);
      Tensor gr = grad_storage(lo, hi - lo);
      std::vector<Tensor> st;
      for (size_t k = 0; k < state_.size(); ++k) st.push_back(state_storage(k, lo, hi - lo));
      opt_.update(step_be, p, gr, st, params_.info(i).decay, lr, grad_scale);
    });
  }
  // Every rank updated its piece: round the 16-bit copy from the master weights, and (zero 1/2)
  // gather the whole parameters back.
  if (master_weights())
    publish_master();
  else
    gather_params();
}

// All-gathers group g's pieces into `dst` (dp * piece elements; the group's elements first).
void ZeroEngine::gather_group(int gi, Tensor& dst) {
  const Group& g = groups_[static_cast<size_t>(gi)];
  Tensor mine = staging_piece_.flat_slice(0, {g.piece});
  be_.zero(mine);
  int64_t n = g.own_end() - g.own_begin();
  if (n > 0) {
    Tensor part = mine.flat_slice(0, {n});
    be_.copy(part, zero_ == 3 ? shard_params_.flat_slice(g.shard_offset, {n})
                              : params_.flat_values().flat_slice(g.own_begin(), {n}));
  }
  dp_.allgather(mine, dst);
}

// Sums group g's whole-group gradients over dp and adds this rank's piece to its shard.
void ZeroEngine::reduce_scatter_group(int gi, const Tensor& grads_whole) {
  const Group& g = groups_[static_cast<size_t>(gi)];
  const int64_t padded = g.piece * dp_.size(), len = g.end - g.begin;
  Tensor in = grads_whole;
  if (grads_whole.numel() != padded) {
    in = staging_.flat_slice(0, {padded});
    be_.zero(in);
    Tensor head = in.flat_slice(0, {len});
    be_.copy(head, grads_whole.flat_slice(0, {len}));
  }
  Tensor piece = staging_piece_.flat_slice(0, {g.piece});
  dp_.reduce_scatter(in, piece);
  Tensor acc = shard_grads_.flat_slice(g.shard_offset, {g.piece});
  be_.add(acc, acc, piece);
}

void ZeroEngine::bind_group(int gi, Work& w, bool grads) {
  const Group& g = groups_[static_cast<size_t>(gi)];
  for (size_t i = g.p0; i < g.p1; ++i) {
    const ParamInfo& info = params_.info(i);
    int64_t at = info.offset - g.begin;
    params_.bind(i, w.params.flat_slice(at, info.shape), grads ? w.grads.flat_slice(at, info.shape) : Tensor());
  }
}

void ZeroEngine::unbind_group(int gi) {
  const Group& g = groups_[static_cast<size_t>(gi)];
  for (size_t i = g.p0; i < g.p1; ++i) params_.bind(i, Tensor(), Tensor());
}

void ZeroEngine::before_forward(int gi) {
  if (zero_ != 3) return;
  Work& w = work_[static_cast<size_t>(gi)];
  const Group& g = groups_[static_cast<size_t>(gi)];
  w.params = be_.empty({g.piece * dp_.size()}, params_.dtype());
  gather_group(gi, w.params);
  w.active = true;
  bind_group(gi, w, false);
  note_gathered();
}

void ZeroEngine::after_forward(int gi) {
  if (zero_ != 3) return;
  Work& w = work_[static_cast<size_t>(gi)];
  unbind_group(gi);
  w.params = Tensor();  // freed: the group exists only as shards again
  w.active = false;
}

void ZeroEngine::before_backward(int gi) {
  if (zero_ != 3) return;
  Work& w = work_[static_cast<size_t>(gi)];
  const Group& g = groups_[static_cast<size_t>(gi)];
  w.params = be_.empty({g.piece * dp_.size()}, params_.dtype());
  gather_group(gi, w.params);
  w.grads = be_.empty({g.piece * dp_.size()}, params_.dtype());
  be_.zero(w.grads);
  w.active = w.grads_active = true;
  bind_group(gi, w, true);
  note_gathered();
}

void ZeroEngine::after_backward(int gi) {
  if (zero_ == 2) {
    const Group& g = groups_[static_cast<size_t>(gi)];
    Tensor grads = params_.flat_grads().flat_slice(g.begin, {g.end - g.begin});
    reduce_scatter_group(gi, grads);
    be_.zero(grads);  // the whole-size buffer only carries one micro-batch
  } else if (zero_ == 3) {
    Work& w = work_[static_cast<size_t>(gi)];
    reduce_scatter_group(gi, w.grads);
    unbind_group(gi);
    w.params = Tensor();
    w.grads = Tensor();
    w.active = w.grads_active = false;
  }
}

MemoryUse ZeroEngine::memory() const {
  // What this rank holds now, counted from the storage behind each tensor, not from the
  // layout's formula: a whole buffer kept where ZeRO shards it shows up here.
  StorageBytes held;
  MemoryUse m;
  m.params += held.add(params_.flat_values()) + held.add(shard_params_);
  for (size_t i = 0; i < params_.size(); ++i) m.params += held.add(params_.value(i));
  // The model's gradient buffer is backward's working buffer under zero 2 (reduce-scattered into
  // the shard and zeroed after every group), the gradients themselves otherwise.
  int64_t model_grads = held.add(params_.flat_grads());
  for (size_t i = 0; i < params_.size(); ++i) model_grads += held.add(params_.grad(i));
  (zero_ == 2 ? m.transient : m.grads) += model_grads;
  m.grads += held.add(shard_grads_);
  int64_t state = held.add(master_);
  for (const Tensor& t : state_) state += held.add(t);
  (offload_ ? m.optimizer_host : m.optimizer) += state;
  m.transient += held.add(staging_) + held.add(staging_piece_);
  // Gathered groups live only inside forward and backward: the most held at once so far.
  int64_t gathered = 0;
  for (const Work& w : work_) gathered += held.add(w.params) + held.add(w.grads);
  m.transient += std::max(gathered, peak_gathered_bytes_);
  return m;
}

void ZeroEngine::note_gathered() {
  StorageBytes held;
  int64_t now = 0;
  for (const Work& w : work_) now += held.add(w.params) + held.add(w.grads);
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, now);
}

ZeroPieces ZeroEngine::pieces() const {
  return zero_pieces(params_, group_ranges_, {zero_, dp_.size(), dp_.rank(), count_replicated_, master_weights()});
}

std::vector<Piece> ZeroEngine::param_pieces_to_save() const { return pieces().params_to_save; }
std::vector<Piece> ZeroEngine::state_pieces_to_save() const { return pieces().state_to_save; }
std::vector<Piece> ZeroEngine::param_pieces_to_load() const { return pieces().params_to_load; }
std::vector<Piece> ZeroEngine::state_pieces_to_load() const { return pieces().state_to_load; }

Tensor ZeroEngine::param_piece(const Piece& p) {
  const ParamInfo& info = params_.info(p.param);
  if (master_weights()) return master_storage(info.offset + p.lo, p.hi - p.lo);
  if (zero_ < 3) return params_.value(p.param).view({info.numel()}).flat_slice(p.lo, {p.hi - p.lo});
  return param_storage(info.offset + p.lo, p.hi - p.lo);
}

Tensor ZeroEngine::state_piece(size_t k, const Piece& p) {
  const ParamInfo& info = params_.info(p.param);
  return state_storage(k, info.offset + p.lo, p.hi - p.lo);
}

void ZeroEngine::after_load() {
  if (master_weights()) publish_master();
}

}  // namespace dl::parallel
