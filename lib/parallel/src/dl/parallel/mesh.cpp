#include "dl/parallel/mesh.hpp"

#include "dl/core/error.hpp"

namespace dl::parallel {

std::string MeshShape::describe() const {
  return "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp);
}

MeshShape resolve_mesh(const ParallelConfig& p, const ModelConfig& model, int world) {
  MeshShape m;
  m.tp = static_cast<int>(p.tp);
  m.pp = static_cast<int>(p.pp);
  if (p.dp < 0) {
    if (world % (m.tp * m.pp) != 0)
      throw_usage("parallel.dp = \"auto\" (the default): the world of ", world,
                  " ranks is not divisible by parallel.tp x parallel.pp = ", m.tp, " x ", m.pp, " = ", m.tp * m.pp,
                  ": start a multiple of ", m.tp * m.pp, " processes, or change parallel.tp or parallel.pp");
    m.dp = world / (m.tp * m.pp);
  } else {
    m.dp = static_cast<int>(p.dp);
  }
  if (m.world() != world)
    throw_usage("parallel.dp x parallel.tp x parallel.pp = ", m.dp, " x ", m.tp, " x ", m.pp, " = ", m.world(),
                " ranks, but ", world,
                world == 1 ? " process runs (start ranks with --nproc-per-node N or a launcher such as torchrun/srun)"
                           : " processes were started: make them equal, or leave parallel.dp out (its default "
                             "\"auto\" takes world / (tp x pp))");
  if (!is_token_model(model.type) && (m.tp > 1 || m.pp > 1))
    throw_usage("parallel.tp and parallel.pp need model.type = \"gpt\" or \"llama\"; an mlp runs data parallel (dp, zero) only");
  if (is_token_model(model.type)) {
    if (model.n_head % m.tp != 0)
      throw_usage("parallel.tp = ", m.tp, " must divide model.n_head = ", model.n_head, " (heads are split across ranks)");
    const int64_t kv_heads = model.n_kv_head > 0 ? model.n_kv_head : model.n_head;
    if (model.type == ModelType::llama && kv_heads % m.tp != 0)
      throw_usage("parallel.tp = ", m.tp, " must divide model.n_kv_head = ", kv_heads,
                  " (each rank holds whole groups of query heads with their K/V head)");
    const int64_t ffn = model.ffn_hidden > 0 ? model.ffn_hidden : 4 * model.n_embd;
    if (model.type == ModelType::llama && ffn % m.tp != 0)
      throw_usage("parallel.tp = ", m.tp, " must divide model.ffn_hidden = ", ffn, " (the MLP is split across ranks)");
    if (model.vocab_size < m.tp)
      throw_usage("parallel.tp = ", m.tp, " exceeds model.vocab_size = ", model.vocab_size,
                  " (the embedding and the loss split the vocabulary's rows across ranks)");
    if (model.n_layer % m.pp != 0)
      throw_usage("parallel.pp = ", m.pp, " must divide model.n_layer = ", model.n_layer,
                  " (stages hold equal numbers of blocks)");
  }
  if (m.pp > 1 && p.zero >= 2)
    throw_usage("parallel.zero = ", p.zero, " with pipeline parallel (pp = ", m.pp,
                ") is not supported: gradients and parameters are needed by every micro-batch of a stage (DeepSpeed "
                "has the same rule); use zero = 0 or 1 with pp > 1");
  if (p.offload == Offload::cpu && p.zero < 1)
    throw_usage("parallel.offload = \"cpu\" moves the sharded optimizer state to the host: it needs parallel.zero >= 1");
  return m;
}

Mesh::Mesh(MeshShape shape, std::unique_ptr<dist::Comm> world) : shape_(shape), world_(std::move(world)) {
  DL_CHECK(world_->size() == shape_.world(), "mesh ", shape_.describe(), " over ", world_->size(), " ranks");
  const int r = world_->rank();
  tp_rank_ = r % shape_.tp;
  dp_rank_ = (r / shape_.tp) % shape_.dp;
  pp_rank_ = r / (shape_.tp * shape_.dp);
  // Every rank creates every group it belongs to, in one fixed order (tp, dp, pp, embedding), so
  // the rendezvous of each group sees all its members.
  std::vector<int> tp_members, dp_members, pp_members;
  for (int t = 0; t < shape_.tp; ++t) tp_members.push_back(world_rank(dp_rank_, t, pp_rank_));
  for (int d = 0; d < shape_.dp; ++d) dp_members.push_back(world_rank(d, tp_rank_, pp_rank_));
  for (int p = 0; p < shape_.pp; ++p) pp_members.push_back(world_rank(dp_rank_, tp_rank_, p));
  tp_ = world_->subgroup(tp_members, "tp");
  dp_ = world_->subgroup(dp_members, "dp");
  pp_ = world_->subgroup(pp_members, "pp");
  if (shape_.pp > 1 && (pp_rank_ == 0 || pp_rank_ == shape_.pp - 1))
    embed_ = world_->subgroup({world_rank(dp_rank_, tp_rank_, 0), world_rank(dp_rank_, tp_rank_, shape_.pp - 1)},
                              "embedding");
}

double Mesh::comm_seconds() const {
  double s = world_->seconds_in_comm() + dp_->seconds_in_comm() + tp_->seconds_in_comm() + pp_->seconds_in_comm();
  if (embed_) s += embed_->seconds_in_comm();
  return s;
}

}  // namespace dl::parallel
