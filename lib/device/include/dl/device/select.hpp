// Which device a run uses: train.device (dl-train) or --device (dl-bench) = cpu | cuda | auto,
// checked against what this build has, what the machine has, and what the CUDA path supports so
// far (docs/CUDA.md). choose_device() is the one decision; callers word its outcome.
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "dl/backend/backend.hpp"
#include "dl/config/config.hpp"

namespace dl {

// Where a run goes once train.device (or --device) is decided; printed "cpu" | "cuda".
enum class DeviceKind { cpu, cuda };
inline constexpr std::string_view kDeviceKindNames[] = {"cpu", "cuda"};
constexpr std::span<const std::string_view> choice_names(DeviceKind) { return kDeviceKindNames; }

// What keeps this process off the GPU.
enum class GpuBlock {
  none,         // the GPU is usable
  no_backend,   // this build has no CUDA backend
  no_gpu,       // no usable GPU (no driver, no device, ...)
  unsupported,  // a GPU is usable, but the run asks for something the CUDA path does not do yet
};
struct GpuCheck {
  GpuBlock block = GpuBlock::none;
  std::string detail;  // the GPU (block none) or why it is blocked, in the caller's words
};

// How a caller words the outcome, in its own terms (train.device = "cuda", --device cuda).
struct DeviceWords {
  std::function<std::string(const GpuCheck&)> refuse;  // cuda asked for, the GPU blocked: the usage error
  std::function<std::string(const GpuCheck&)> notice;  // auto: what was chosen and why (logged)
};

// Whether this program's CUDA backend is the emulated device (docs/CUDA.md): decided by the device
// library it links (dl_device or dl_device_emulated), not at compile time. False without CUDA.
bool cuda_device_is_emulated();

// cpu: the CPU, without looking for a GPU. cuda: the GPU, or OptionError (usage) with words.refuse
// when check() reports a block. auto: the GPU when check() reports none, else the CPU; words.notice is
// logged (when `log`) either way.
DeviceKind choose_device(DeviceChoice want, const std::function<GpuCheck()>& check, const DeviceWords& words,
                         bool log);

// The backend a training run uses, by choose_device(). cuda: the GPU when one is usable, else
// Error(usage) saying why there is none (exit 2). auto: the GPU when one is usable and the run's
// settings are supported there, else the CPU with a notice on stderr (when `log`).
Backend& select_backend(const Config& config, bool log);

// Tells the CUDA backend about this process before it probes the GPU (nothing in a build
// without CUDA): the GPU its launcher's local rank takes and how many ranks share it (LOCAL_RANK
// and its kin, dl/dist/launch_env.hpp), DL_CUDA_SYNC, and the notice logged when the GPU opens.
// Reads the environment once; every path of the library to cuda_probe() calls it first.
void prepare_cuda_process();
// The process's CUDA backend, opened on first use after prepare_cuda_process() with the arena
// size DL_CUDA_ARENA asks for (read only here, so a bad value stops only a run that opens the
// GPU). Every path of the library to cuda_backend() goes through it.
class CudaBackend;
CudaBackend& open_cuda_backend();

}  // namespace dl
