// Data parallelism and ZeRO (Rajbhandari et al. 2019, arXiv 1910.02054) over one model stage's
// parameters. The engine owns where parameters, gradients and optimizer state live:
//
//   zero 0: everything whole on every rank; gradients all-reduced in buckets.
//   zero 1: optimizer state sharded: each rank updates its shard, then parameters all-gathered.
//   zero 2: + gradients sharded: each group's gradients reduce-scattered as soon as backward
//           finishes the group (every micro-batch); only the shard persists.
//   zero 3: + parameters sharded: a group is all-gathered right before forward uses it and again
//           before backward, and released after (FSDP FULL_SHARD); gradients as in zero 2.
//
// Sharding is per parameter group (embeddings, each block, the head), each group padded to a
// multiple of the dp size, so a ZeRO-3 gather is one all-gather of one group. Offload keeps the
// optimizer state (and its update) in host memory.
//
// Mixed precision (parameters in bf16/f16): the model computes with 16-bit parameters and
// gradients; f32 master weights live beside the optimizer state and are cut like it (whole for
// zero 0, this rank's shard otherwise), the optimizer updates them, and the 16-bit copy is
// rounded from them after every step. This is the ZeRO paper's accounting: 2 + 2 bytes of
// parameters and gradients, 12 bytes (master, m, v) of optimizer state per parameter for Adam.
// Checkpoints hold the f32 master weights as the parameters.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dl/config/config.hpp"
#include "dl/dist/comm.hpp"
#include "dl/nn/gpt.hpp"
#include "dl/nn/params.hpp"
#include "dl/optim/optimizer.hpp"

namespace dl::parallel {

// Bytes this rank holds, counted from the storage behind the tensors it keeps (each storage
// once, a view counts its whole storage): persistent model state, and working buffers.
struct MemoryUse {
  int64_t params = 0, grads = 0, optimizer = 0;  // on the training device
  int64_t optimizer_host = 0;                    // offloaded optimizer state
  // Working buffers: the model's full-size gradient buffer (zero 2), the reduce-scatter and
  // all-gather staging (zero >= 1), and the most bytes of gathered groups alive at once (zero 3).
  int64_t transient = 0;
};

// Elements [lo, hi) of parameter `param`'s local (this rank's) tensor, in flat order.
struct Piece {
  size_t param = 0;
  int64_t lo = 0, hi = 0;
};

// How ZeRO cuts one stage's parameters over the data-parallel ranks: per parameter group (in
// the stage's flat layout), `piece` elements per rank, the group padded to a multiple of the dp
// size; rank r owns [begin + r * piece, begin + (r + 1) * piece), clipped to the group.
struct ZeroGroup {
  size_t p0 = 0, p1 = 0;       // parameter indices [p0, p1)
  int64_t begin = 0, end = 0;  // element range in the stage's flat layout
  int64_t piece = 0;           // elements per rank (padded)
  int64_t own_begin(int rank) const;
  int64_t own_end(int rank) const;
};
// Empty groups are dropped.
std::vector<ZeroGroup> zero_groups(const ParamSet& params, const std::vector<std::pair<size_t, size_t>>& groups,
                                   int dp_size);

// One rank's place in a ZeRO layout.
struct ZeroRank {
  int zero = 0, dp_size = 1, dp_rank = 0;
  bool count_replicated = true;  // tensor-parallel rank 0: saves the replicated (unsliced) parameters
  bool master_weights = false;   // mixed precision: parameters are saved and loaded where the master copy lives
};

// The pieces a rank writes to a checkpoint and reads back, a pure function of its parameters'
// declarations (no storage, no Comm): ZeroEngine's checkpoint methods return these, and
// dl-shard split computes them for every rank of a layout it does not run.
struct ZeroPieces {
  std::vector<Piece> params_to_save, state_to_save, params_to_load, state_to_load;
};
ZeroPieces zero_pieces(const ParamSet& params, const std::vector<std::pair<size_t, size_t>>& groups, const ZeroRank& rank);

class ZeroEngine final : public ParamGroupHooks {
 public:
  // `groups`: [first, last) parameter indices per group, in order of use. `count_replicated`:
  // whether this rank counts tensor-parallel replicated parameters in the gradient norm (tp rank 0).
  ZeroEngine(ParamSet& params, std::vector<std::pair<size_t, size_t>> groups, dist::Comm& dp,
             const ParallelConfig& parallel, const OptimConfig& optim, double bucket_mb, bool count_replicated);
  ~ZeroEngine() override;

  int zero() const { return zero_; }
  // Mixed precision: 16-bit parameters with f32 master weights.
  bool master_weights() const { return master_.defined(); }
  // The dtype of the parameters and optimizer state in checkpoints (f32 under mixed precision).
  DType checkpoint_dtype() const { return master_weights() ? DType::f32 : params_.dtype(); }
  Optimizer& optimizer() { return opt_; }

  // Initial weights from the counter-based generator into this rank's storage.
  void initialize(uint64_t seed);
  void zero_grad();
  // After every micro-batch's backward: zero 0/1 sum gradients over dp (bucketed); zero 2/3 did it
  // per group already.
  void reduce_gradients();
  // This rank's share of the global squared gradient norm (sum it over the world).
  double grad_norm_squared() const;
  // Sum of squares of the parameters this rank holds (finiteness check before a checkpoint).
  double param_norm_squared() const;
  // One optimizer step on this rank's elements, then (zero 1/2) the parameters all-gathered.
  void step(double lr, double grad_scale);

  MemoryUse memory() const;

  // Checkpoint access. Pieces this rank writes: parameters whole for zero < 3 (on dp rank 0),
  // shards for zero 3; optimizer state whole for zero 0 (dp rank 0), shards otherwise.
  ZeroPieces pieces() const;  // all four lists below
  std::vector<Piece> param_pieces_to_save() const;
  std::vector<Piece> state_pieces_to_save() const;
  // Pieces this rank must receive when loading: whole local tensors for zero < 3 (tied copies
  // included), its shards otherwise.
  std::vector<Piece> param_pieces_to_load() const;
  std::vector<Piece> state_pieces_to_load() const;
  // Host views of a piece's storage (read for saving, written when loading).
  Tensor param_piece(const Piece& p);
  Tensor state_piece(size_t state, const Piece& p);
  // After loading: refreshes whatever derived storage there is.
  void after_load();

  // ParamGroupHooks: ZeRO-2 reduce-scatters a finished group; ZeRO-3 gathers and releases.
  void before_forward(int group) override;
  void after_forward(int group) override;
  void before_backward(int group) override;
  void after_backward(int group) override;

 private:
  struct Group : ZeroGroup {
    int64_t shard_offset = 0;  // where this rank's piece sits in the shard buffers
    int64_t own_begin() const { return ZeroGroup::own_begin(rank); }  // this rank's range (clipped)
    int64_t own_end() const { return ZeroGroup::own_end(rank); }
    int rank = 0;
  };
  struct Work {  // a gathered ZeRO-3 group
    Tensor params, grads;
    bool active = false, grads_active = false;
  };
  bool counts_in_norm(size_t param) const;
  Tensor param_storage(int64_t flat, int64_t n);  // where element `flat` of the stage's parameters lives
  Tensor grad_storage(int64_t flat, int64_t n);
  Tensor state_storage(size_t k, int64_t flat, int64_t n);
  Tensor master_storage(int64_t flat, int64_t n);
  // The flat elements of group g this rank's optimizer updates: all (zero 0) or its own piece.
  std::pair<int64_t, int64_t> updated_range(const Group& g) const;
  // Mixed precision: the 16-bit parameters this rank holds <- its master weights, then (zero 1/2)
  // the whole parameters all-gathered.
  void publish_master();
  void gather_params();  // zero 1/2: every rank's updated piece to every rank
  int64_t shard_index(int64_t flat) const;        // offset in the shard buffers of an owned element
  const Group& group_of(int64_t flat) const;
  void gather_group(int g, Tensor& dst);
  void reduce_scatter_group(int g, const Tensor& grads_whole);
  void bind_group(int g, Work& w, bool grads);
  void note_gathered();  // updates peak_gathered_bytes_
  void unbind_group(int g);

  ParamSet& params_;
  std::vector<std::pair<size_t, size_t>> group_ranges_;  // as the model declared them
  std::vector<Group> groups_;
  dist::Comm& dp_;
  int zero_ = 0;
  bool offload_ = false;
  Optimizer opt_;
  int64_t bucket_elems_ = 0;
  bool count_replicated_ = true;
  int64_t shard_size_ = 0;
  Backend& be_;
  Tensor shard_params_, shard_grads_;  // zero 3 / zero >= 2
  std::vector<Tensor> state_;          // optimizer state: whole (zero 0) or shard
  Tensor master_;                      // mixed precision: f32 master weights, cut like state_
  std::vector<Work> work_;             // zero 3, per group
  int64_t peak_gathered_bytes_ = 0;    // zero 3: the most bytes of work_ alive at once so far
  Tensor staging_, staging_piece_;     // padded group buffers for reduce-scatter/all-gather
};

}  // namespace dl::parallel
