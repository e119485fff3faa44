#include "dl/train/device_select.hpp"

#include "dl/cli/app.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/backend/cuda/cuda_backend.hpp"
#endif

namespace dl {

namespace {

Backend& cpu_only(const TrainConfig& t, bool log) {
  if (t.precision != "fp32" && log)
    log_info("train.precision = \"" + t.precision +
             "\" on the CPU is emulated (16-bit storage, f32 arithmetic): the GPU's numerics, at below fp32 speed");
  return cpu_backend();
}

#ifdef DL_HAVE_CUDA
// What the trainer cannot yet run on the GPU; empty when the run is supported.
// Several ranks are supported: NCCL, or Gloo through host memory when they share a GPU.
// Every precision is: the kernels take f32, bf16 and f16 (fp16 with dynamic loss scaling, whose
// overflow check is the gradients' sum of squares, an op the kernels do in every dtype).
std::string cuda_unsupported(const Config& c) {
  if (c.model.type != "gpt") return "model.type = \"" + c.model.type + "\" (only the GPT model runs on CUDA)";
  if (c.parallel.offload != "none") return "parallel.offload (the optimizer step on the host reads device gradients)";
  if (c.parallel.tp > 1) return "parallel.tp > 1 (the vocabulary-parallel loss combines its rows on the host)";
  if (c.parallel.pp > 1) return "parallel.pp > 1 (not yet run on a GPU)";
  return {};
}
#endif

}  // namespace

Backend& select_backend(const Config& c, bool log) {
  const TrainConfig& t = c.train;
  if (t.device == "cpu") return cpu_only(t, log);
#ifdef DL_HAVE_CUDA
  const CudaDeviceInfo gpu = cuda_probe();
  if (!gpu.usable) {
    if (t.device == "cuda")
      throw_usage("train.device = \"cuda\": no usable CUDA GPU was found (", gpu.reason,
                  "); use \"cpu\", or \"auto\" to fall back to the CPU");
    if (log) log_info("device auto: no usable CUDA GPU (" + gpu.reason + "), training on the CPU");
    return cpu_only(t, log);
  }
  const std::string unsupported = cuda_unsupported(c);
  if (!unsupported.empty()) {
    if (t.device == "cuda")
      throw_usage("train.device = \"cuda\" does not support ", unsupported, " yet; use \"cpu\"");
    if (log) log_info("device auto: a GPU is present, but " + unsupported + " needs the CPU: training on the CPU");
    return cpu_only(t, log);
  }
  if (log && t.device == "auto")
    log_info(str("device auto: training on cuda:", gpu.device, " (", gpu.name, ")"));
  return cuda_backend();
#else
  if (t.device == "cuda")
    throw_usage("train.device = \"cuda\": this build of dlkit has no CUDA backend; use \"cpu\" (or \"auto\")");
  if (log) log_info("device auto: no CUDA backend in this build, training on the CPU");
  return cpu_only(t, log);
#endif
}

}  // namespace dl
