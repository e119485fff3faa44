// The process mesh: world = pp x dp x tp, tensor-parallel ranks innermost (consecutive world
// ranks, so a tp group stays within a node), then data parallel, then pipeline stages
// (Megatron-LM's order). Each rank belongs to one dp, one tp and one pp group.
#pragma once
#include <memory>
#include <string>

#include "dl/config/config.hpp"
#include "dl/dist/comm.hpp"

namespace dl::parallel {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  int world() const { return dp * tp * pp; }
  std::string describe() const;  // "dp=2 tp=2 pp=2"
};

// Resolves [parallel] against the world size (dp "auto" = world / (tp * pp)) and checks the
// model allows it; errors name the keys and say what would work.
MeshShape resolve_mesh(const ParallelConfig& p, const ModelConfig& model, int world);

class Mesh {
 public:
  // Builds the groups over `world` (every rank calls this, in the same order).
  Mesh(MeshShape shape, std::unique_ptr<dist::Comm> world);
  const MeshShape& shape() const { return shape_; }
  int rank() const { return world_->rank(); }
  int dp_rank() const { return dp_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  dist::Comm& world() { return *world_; }
  dist::Comm& dp() { return *dp_; }
  dist::Comm& tp() { return *tp_; }
  dist::Comm& pp() { return *pp_; }
  // First and last pipeline stage at this (dp, tp) position, for the tied embedding's
  // gradients; null unless pp > 1 and this rank is on one of the two.
  dist::Comm* embedding() { return embed_.get(); }
  // World rank of (dp, tp, pp) coordinates.
  int world_rank(int dp, int tp, int pp) const { return (pp * shape_.dp + dp) * shape_.tp + tp; }
  double comm_seconds() const;  // all groups together

 private:
  MeshShape shape_;
  std::unique_ptr<dist::Comm> world_, dp_, tp_, pp_, embed_;
  int dp_rank_ = 0, tp_rank_ = 0, pp_rank_ = 0;
};

}  // namespace dl::parallel
