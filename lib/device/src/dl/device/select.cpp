#include "dl/device/select.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dl/cli/app.hpp"
#include "dl/cli/table.hpp"
#include "dl/cli/units.hpp"
#include "dl/core/option_error.hpp"
#include "dl/dist/launch_env.hpp"

#ifdef DL_HAVE_CUDA
#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/cuda/emulation.hpp"
#endif

namespace dl {

bool cuda_device_is_emulated() {
#ifdef DL_HAVE_CUDA
  return cuda::device_is_emulated();
#else
  return false;
#endif
}

DeviceKind choose_device(DeviceChoice want, const std::function<GpuCheck()>& check, const DeviceWords& words,
                         bool log) {
  if (want == DeviceChoice::cpu) return DeviceKind::cpu;
  const GpuCheck gpu = check();
  if (gpu.block != GpuBlock::none && want == DeviceChoice::cuda) throw_option_error(words.refuse(gpu));
  if (log && want == DeviceChoice::automatic) log_info(words.notice(gpu));
  return gpu.block == GpuBlock::none ? DeviceKind::cuda : DeviceKind::cpu;
}

namespace {

Backend& cpu_only(const TrainConfig& t, bool log) {
  if (t.precision != Precision::fp32 && log)
    log_info(str("train.precision = \"", t.precision,
                 "\" on the CPU is emulated (16-bit storage, f32 arithmetic): the GPU's numerics, at below fp32 speed"));
  return cpu_backend();
}

#ifdef DL_HAVE_CUDA
// What the trainer cannot yet run on the GPU; empty when the run is supported.
// Several ranks are supported: NCCL, or Gloo through host memory when they share a GPU.
// Every precision is: the kernels take f32, bf16 and f16 (fp16 with dynamic loss scaling, whose
// overflow check is the gradients' sum of squares, an op the kernels do in every dtype).
std::string cuda_unsupported(const Config& c) {
  if (!is_token_model(c.model.type))
    return str("model.type = \"", c.model.type, "\" (only the GPT and Llama models run on CUDA)");
  if (c.parallel.offload != Offload::none) return "parallel.offload (the optimizer step on the host reads device gradients)";
  if (c.parallel.tp > 1) return "parallel.tp > 1 (the vocabulary-parallel loss combines its rows on the host)";
  if (c.parallel.pp > 1) return "parallel.pp > 1 (not yet run on a GPU)";
  return {};
}
#endif

GpuCheck training_gpu_check([[maybe_unused]] const Config& c) {
#ifdef DL_HAVE_CUDA
  prepare_cuda_process();
  const CudaDeviceInfo gpu = cuda_probe();
  if (!gpu.usable) return {GpuBlock::no_gpu, gpu.reason};
  if (std::string unsupported = cuda_unsupported(c); !unsupported.empty()) return {GpuBlock::unsupported, unsupported};
  return {GpuBlock::none, str("cuda:", gpu.device, " (", gpu.name, ")")};
#else
  return {GpuBlock::no_backend, {}};
#endif
}

const DeviceWords kTrainWords{
    [](const GpuCheck& g) -> std::string {
      switch (g.block) {
        case GpuBlock::no_backend:
          return "train.device = \"cuda\": this build of dlkit has no CUDA backend; use \"cpu\" (or \"auto\")";
        case GpuBlock::no_gpu:
          return "train.device = \"cuda\": no usable CUDA GPU was found (" + g.detail +
                 "); use \"cpu\", or \"auto\" to fall back to the CPU";
        case GpuBlock::unsupported: return "train.device = \"cuda\" does not support " + g.detail + " yet; use \"cpu\"";
        case GpuBlock::none: break;
      }
      return {};
    },
    [](const GpuCheck& g) -> std::string {
      switch (g.block) {
        case GpuBlock::no_backend: return "device auto: no CUDA backend in this build, training on the CPU";
        case GpuBlock::no_gpu: return "device auto: no usable CUDA GPU (" + g.detail + "), training on the CPU";
        case GpuBlock::unsupported:
          return "device auto: a GPU is present, but " + g.detail + " needs the CPU: training on the CPU";
        case GpuBlock::none: break;
      }
      return "device auto: training on " + g.detail;
    }};

}  // namespace

Backend& select_backend(const Config& c, bool log) {
  const DeviceKind kind = choose_device(c.train.device, [&] { return training_gpu_check(c); }, kTrainWords, log);
#ifdef DL_HAVE_CUDA
  if (kind == DeviceKind::cuda) return open_cuda_backend();
#endif
  DL_CHECK(kind == DeviceKind::cpu, "the GPU was chosen in a build without a CUDA backend");
  return cpu_only(c.train, log);
}

void prepare_cuda_process() {
#ifdef DL_HAVE_CUDA
  static std::once_flag once;
  std::call_once(once, [] {
    const dist::LaunchEnv launch = dist::detect_launch_env(dist::process_environment());
    CudaProcessOptions o;
    o.local_rank = launch.local_rank;
    o.local_world = launch.local_world;
    const char* sync = std::getenv("DL_CUDA_SYNC");
    o.sync_each_op = sync && *sync && std::strcmp(sync, "0") != 0;
    // DL_CUDA_ARENA_FENCED=1: a cudaMalloc per tensor, so compute-sanitizer sees each tensor's
    // ends. The emulated device (a build for finding bugs) fences unless told 0.
    const char* fenced = std::getenv("DL_CUDA_ARENA_FENCED");
    o.fenced_arena = cuda::device_is_emulated() ? !(fenced && std::strcmp(fenced, "0") == 0)
                                                : fenced && *fenced && std::strcmp(fenced, "0") != 0;
    o.on_open = [](const CudaBackend& be) {
      const CudaDeviceInfo& i = be.info();
      log_info(str("CUDA: cuda:", i.device, " ", i.name, " (sm_", i.cc_major, i.cc_minor, ", ", i.multiprocessors,
                   " SMs, ", format_bytes(double(i.total_bytes), true), "), device arena ",
                   format_bytes(double(be.arena_stats().capacity), true),
                   be.arena_stats().fenced ? " (fenced: a cudaMalloc per tensor, DL_CUDA_ARENA_FENCED)" : " reserved",
                   be.syncs_each_op() ? "; DL_CUDA_SYNC=1: synchronizing after every op" : ""));
    };
    set_cuda_process_options(std::move(o));
  });
#endif
}

#ifdef DL_HAVE_CUDA
CudaBackend& open_cuda_backend() {
  prepare_cuda_process();
  if (const char* env = std::getenv("DL_CUDA_ARENA"); env && *env && !cuda_process_options().arena_bytes) {
    CudaProcessOptions o = cuda_process_options();
    o.arena_bytes = static_cast<size_t>(parse_size(env, "DL_CUDA_ARENA", true));
    set_cuda_process_options(std::move(o));
  }
  return cuda_backend();
}
#endif

}  // namespace dl
