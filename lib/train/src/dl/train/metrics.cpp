// What a run reports: metrics records (metrics.jsonl, TensorBoard, stdout), evaluation lines,
// RUN/memory.json and RUN/summary.json.
#include <algorithm>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "dl/cli/table.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/train/run.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/cuda_backend.hpp"
#endif

namespace dl {

namespace fs = std::filesystem;

namespace {

// The device arena's high-water mark on a GPU backend, and what of it the backend holds for
// itself (cuBLASLt workspace, reduction scratch); 0 on the CPU.
std::pair<double, double> device_peak_bytes(Backend& be) {
#ifdef DL_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&be)) {
    const CudaArenaStats s = cuda->arena_stats();
    return {static_cast<double>(s.peak), static_cast<double>(s.backend_own)};
  }
#endif
  (void)be;
  return {0, 0};
}

// Every rank's numbers gathered to every rank (small vectors: timings, memory).
std::vector<std::vector<double>> gather_rows(dist::Comm& world, const std::vector<double>& mine) {
  const int64_t k = static_cast<int64_t>(mine.size());
  Tensor in = Tensor::empty({k}, DType::f64), out = Tensor::empty({k * world.size()}, DType::f64);
  std::copy(mine.begin(), mine.end(), in.data<double>());
  world.allgather(in, out);
  std::vector<std::vector<double>> rows;
  for (int r = 0; r < world.size(); ++r)
    rows.emplace_back(out.data<double>() + r * k, out.data<double>() + (r + 1) * k);
  return rows;
}

ojson column(const std::vector<std::vector<double>>& rows, size_t i) {
  ojson a = ojson::array();
  for (const auto& r : rows) a.push_back(r[i]);
  return a;
}

}  // namespace

Metrics::Metrics(const fs::path& run_dir, bool tensorboard, bool to_stdout) : to_stdout_(to_stdout) {
  jsonl_.open(run_dir / "metrics.jsonl");
  if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir);
}

void Metrics::record(const ojson& rec) {
  if (on_record) on_record(rec);
  jsonl_.write_ordered(rec);
  if (to_stdout_) {
    // As metrics.jsonl writes it: an invalid UTF-8 byte in a sample becomes U+FFFD.
    std::fputs((rec.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n").c_str(), stdout);
    std::fflush(stdout);
  }
  if (tb_) {
    int64_t step = rec.value("step", int64_t{0});
    std::string prefix = rec.contains("val_loss") ? "" : "train/";
    for (const auto& [k, v] : rec.items())
      if (k != "step" && v.is_number()) tb_->add_scalar(prefix + k, static_cast<float>(v.get<double>()), step);
    tb_->flush();
  }
}

ojson eval_record(int64_t step, const EvalResult& e) {
  ojson r{{"step", step}, {"val_loss", e.loss}, {"val_accuracy", e.accuracy}};
  if (e.task) r["val_" + e.task->name] = e.task->total ? double(e.task->hits) / double(e.task->total) : 0.0;
  return r;
}

std::string eval_line(int64_t step, const EvalResult& e) {
  std::string s = "eval step " + std::to_string(step) + ": val_loss " + format_fixed(e.loss, 4) + ", accuracy " +
                  format_fixed(100 * e.accuracy, 1) + "%";
  if (e.task && e.task->total)
    s += ", " + e.task->name + " " + format_fixed(100.0 * e.task->hits / e.task->total, 1) + "% (" +
         std::to_string(e.task->hits) + "/" + std::to_string(e.task->total) + ")";
  return s;
}

ojson step_record(const StepRecord& s, double rate, double elapsed, const LossScaler& scaler, dist::Comm& world) {
  const StepTimes& t = s.times;
  std::vector<double> mine = {t.data, t.compute, t.comm, t.pipeline_wait, t.optimizer};
  auto rows = world.size() > 1 ? gather_rows(world, mine) : std::vector<std::vector<double>>{mine};
  if (world.rank() != 0) return {};
  ojson rec{{"step", s.step},
            {"loss", s.loss},
            {"lr", s.lr},
            {"grad_norm", s.grad_norm},
            {"tokens_per_sec", rate},
            {"elapsed_s", elapsed},
            {"step_s", s.seconds},
            {"time_data_s", t.data},
            {"time_compute_s", t.compute},
            {"time_comm_s", t.comm},
            {"time_pipeline_wait_s", t.pipeline_wait},
            {"time_optimizer_s", t.optimizer}};
  if (scaler.enabled()) {
    rec["loss_scale"] = s.loss_scale;
    rec["skipped"] = !s.applied;
    rec["skipped_steps"] = scaler.skipped_steps();
  }
  if (world.size() > 1) {
    rec["rank_time_compute_s"] = column(rows, 1);
    rec["rank_time_comm_s"] = column(rows, 2);
    rec["rank_time_pipeline_wait_s"] = column(rows, 3);
    rec["rank_time_optimizer_s"] = column(rows, 4);
  }
  return rec;
}

void write_memory_report(const TrainOptions& opt, parallel::Mesh& mesh, parallel::ZeroEngine& engine, Model& model,
                         Backend& be, int64_t params_total) {
  const Config& cfg = opt.config;
  parallel::MemoryUse m = engine.memory();
  const auto [device_peak, device_own] = device_peak_bytes(be);
  auto rows = gather_rows(mesh.world(), {double(mesh.dp_rank()), double(mesh.tp_rank()), double(mesh.pp_rank()),
                                         double(m.params), double(m.grads), double(m.optimizer),
                                         double(m.optimizer_host), double(m.transient),
                                         double(model.activation_bytes()), device_peak, device_own});
  if (mesh.rank() != 0) return;
  ojson ranks = ojson::array();
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& v = rows[r];
    ranks.push_back({{"rank", r}, {"dp_rank", int(v[0])}, {"tp_rank", int(v[1])}, {"pp_rank", int(v[2])},
                     {"params_bytes", int64_t(v[3])}, {"grads_bytes", int64_t(v[4])},
                     {"optimizer_bytes", int64_t(v[5])}, {"optimizer_host_bytes", int64_t(v[6])},
                     {"transient_bytes", int64_t(v[7])}, {"activation_bytes", int64_t(v[8])}});
    // On a GPU: the most bytes the device arena handed out at once (through the first step),
    // i.e. everything the run allocated on the device; CUDA's own context is not included. Of
    // it, the backend's own buffers (cuBLASLt workspace, reduction scratch), which dl-shard
    // plan counts in its overhead allowance rather than in the model's memory.
    if (!be.device().is_cpu()) {
      ranks.back()["device_peak_bytes"] = int64_t(v[9]);
      ranks.back()["device_backend_bytes"] = int64_t(v[10]);
    }
  }
  const parallel::MeshShape& shape = mesh.shape();
  ojson report{{"layout", {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp}, {"zero", cfg.parallel.zero},
                           {"offload", cfg.parallel.offload}}},
               {"params", params_total},
               {"dtype", std::string(dtype_name(model.params().dtype()))},
               {"ranks", ranks}};
  write_file_atomic(opt.run_dir / "memory.json", report.dump(2) + "\n");
}

void write_summary(const TrainOptions& opt, const parallel::MeshShape& shape, const TrainSummary& summary) {
  ojson s{{"status", summary.interrupted ? "interrupted" : "completed"},
          {"steps", summary.steps},
          {"params", summary.params},
          {"layout", {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp}, {"zero", opt.config.parallel.zero}}},
          {"final_train_loss", summary.train_loss},
          {"median_tokens_per_sec", summary.tokens_per_sec},
          {"train_seconds", summary.train_seconds},
          {"checkpoint", summary.checkpoint.string()}};
  if (summary.eval) s["final_eval"] = eval_record(summary.steps, *summary.eval);
  write_file_atomic(opt.run_dir / "summary.json", s.dump(2) + "\n");
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace dl
