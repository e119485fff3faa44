// The CUDA backend: the Backend ops on one GPU, f32, bf16 and f16 (16-bit storage, f32
// arithmetic), GEMMs through cuBLASLt, the rest in kernels/*.cu. Compiled only when the build
// found nvcc (DL_HAVE_CUDA); this header names no CUDA type, so any file of the library may
// include it.
//
// Memory: every tensor this backend creates lives in one device arena per process, reserved up
// front (CudaProcessOptions::arena_bytes, from DL_CUDA_ARENA=<size>, e.g. 40GiB; default 90% of
// the GPU's free memory shared among the ranks on the node that use it) and reported when it is
// created. Fenced (CudaProcessOptions::fenced_arena, DL_CUDA_ARENA_FENCED=1; the emulated
// device's default) each tensor is a cudaMalloc of its own, for compute-sanitizer to check.
//
// The backend reads no environment and knows no launcher: the program tells it where the
// process sits on its node and what it asks of the GPU (CudaProcessOptions) before it probes or
// opens the GPU (dl/device/select.hpp reads them from the launcher and the environment).
//
// Index tensors (i32 tokens, targets, correct, argmax output) may live on the host or on the
// device: host ones are checked there (token ids against the vocabulary, as on the CPU) and
// staged through the arena. Every other tensor must be on this backend's device.
//
// Errors: every CUDA and cuBLASLt call is checked; a failure is a dl::Error(runtime) naming the
// op and the tensors. Kernels run asynchronously, so a fault inside one is reported by a later
// call; DL_CUDA_SYNC=1 synchronizes after every op so the op that faulted is the one named.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dl/backend/backend.hpp"

namespace dl {

// What the machine offers, found without throwing: usable is false with a reason when there is
// no driver, no device, or the runtime cannot start.
struct CudaDeviceInfo {
  bool usable = false;
  std::string reason;  // why not usable ("cudaGetDeviceCount: CUDA driver version is insufficient ...")
  int device_count = 0;
  int device = 0;  // the device this process would use
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  size_t total_bytes = 0, free_bytes = 0;
};
CudaDeviceInfo cuda_probe();

class CudaBackend;

// What the program tells the backend about this process.
struct CudaProcessOptions {
  int local_rank = 0;   // this process among its node's ranks: it takes GPU local_rank % device count
  int local_world = 1;  // the node's ranks: those that land on one GPU share its memory
  // The device arena's bytes; unset: 90% of the GPU's free memory less 1.5 GiB (the CUDA
  // context, cuBLAS, cuDNN and NCCL grow beside it), split evenly among the ranks sharing the GPU.
  std::optional<size_t> arena_bytes;
  bool sync_each_op = false;  // synchronize after every op, so a faulting kernel's op is named
  // Each tensor its own cudaMalloc (cuda::DeviceArena's fenced backing), so compute-sanitizer or
  // the emulated device catches a kernel that runs past a tensor; for debugging, never for speed.
  bool fenced_arena = false;
  // Called once when cuda_backend() has opened the GPU (the program logs what it got).
  std::function<void(const CudaBackend&)> on_open;
};
// Sets the options cuda_probe() and cuda_backend() use; until then, one process alone on the
// node with the default arena. Set them before the first cuda_backend(): the backend is opened
// once per process.
void set_cuda_process_options(CudaProcessOptions options);
const CudaProcessOptions& cuda_process_options();

// The device this process uses: its local rank (CudaProcessOptions) modulo the device count, so
// several ranks on one GPU share it.
int cuda_device_for_this_process(int device_count);

// Compiled-in and run-time versions of the CUDA runtime, driver, cuBLAS, cuDNN and NCCL, one
// per line (for --version). Never throws; says "no driver" where the driver cannot be asked.
std::string cuda_build_info();

struct CudaArenaStats {
  size_t capacity = 0;  // bytes reserved
  size_t in_use = 0;    // bytes handed out now
  size_t peak = 0;      // most bytes handed out at once
  int64_t live_blocks = 0;
  bool fenced = false;  // a cudaMalloc per block (CudaProcessOptions::fenced_arena)
  // What the backend holds for itself from opening to closing (the cuBLASLt workspace, the
  // reductions' scratch): in `in_use` and `peak`, but no tensor of the model's.
  size_t backend_own = 0;
};

class CudaBackend final : public Backend {
 public:
  // Binds `device`, creates the stream, the cuBLASLt handle and the arena (sized by `options`).
  // Throws Error(usage) when no usable GPU is there.
  CudaBackend(int device, const CudaProcessOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override;
  std::string name() const override;
  Tensor empty(Shape shape, DType dtype) override;
  void zero(Tensor& t) override;
  // The state is the log-sum-exp of each query row's scores, f32, stored in the bytes of a
  // [B, H, 2T] tensor of the model's dtype (2T elements hold T f32 values even in bf16 or f16).
  Shape attention_state_shape(int64_t B, int64_t T, int64_t C, int n_head) const override;

  // Beyond the Backend interface.
  // Waits for every op queued so far; throws naming `what` if one of them failed.
  void synchronize(const char* what = "synchronize");
  CudaArenaStats arena_stats() const;
  // The cudaStream_t every op of this backend runs on (NCCL joins it, so no extra sync is needed).
  void* native_stream() const;
  const CudaDeviceInfo& info() const;
  bool syncs_each_op() const;

  struct Impl;  // CUDA handles, the arena, scratch (cuda_backend.cpp)

 private:
  // The ops (Backend's front has checked their arguments; cuda_backend.cpp stages host index
  // tensors and checks their values).
  void copy_impl(Tensor& dst, const Tensor& src) override;
  // Between f32, bf16 and f16 (the same dtype: a copy).
  void convert_impl(Tensor& dst, const Tensor& src) override;
  void encoder_forward_impl(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                            int64_t vocab_start, int64_t vocab_size) override;
  void encoder_backward_impl(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                             int64_t vocab_start) override;
  void layernorm_forward_impl(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                              const Tensor& bias) override;
  void layernorm_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                               bool accumulate) override;
  void matmul_forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                           WeightLayout layout) override;
  void matmul_backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                            const Tensor& weight, WeightLayout layout, bool accumulate) override;
  void attention_forward_impl(Tensor& out, Tensor& state, const Tensor& qkv, int n_head) override;
  void attention_backward_impl(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                               const Tensor& state, int n_head) override;
  void rmsnorm_forward_impl(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps) override;
  void rmsnorm_backward_impl(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                             const Tensor& rstd, bool accumulate) override;
  void rope_forward_impl(Tensor& out, const Tensor& inp, const Tensor& inv_freq, int n_head) override;
  void rope_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inv_freq, int n_head) override;
  void swiglu_forward_impl(Tensor& out, const Tensor& gate, const Tensor& up) override;
  void swiglu_backward_impl(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                            const Tensor& up) override;
  void qkv_pack_impl(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int n_head,
                     int n_kv_head) override;
  void qkv_unpack_impl(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, int n_head, int n_kv_head) override;
  void gelu_forward_impl(Tensor& out, const Tensor& inp) override;
  void gelu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override;
  void relu_forward_impl(Tensor& out, const Tensor& inp) override;
  void relu_backward_impl(Tensor& dinp, const Tensor& dout, const Tensor& inp, bool accumulate) override;
  void add_impl(Tensor& out, const Tensor& a, const Tensor& b) override;
  void bias_add_impl(Tensor& out, const Tensor& bias) override;
  void crossentropy_forward_impl(Tensor& losses, Tensor& correct, const Tensor& logits,
                                 const Tensor& targets) override;
  void crossentropy_backward_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                  double dloss) override;
  void argmax_impl(Tensor& out, const Tensor& logits) override;
  void logits_row_max_impl(Tensor& row_max, const Tensor& logits) override;
  void logits_sum_exp_impl(Tensor& sum_exp, const Tensor& logits, const Tensor& row_max) override;
  void logits_pick_impl(Tensor& picked, const Tensor& logits, const Tensor& targets, int64_t vocab_start) override;
  void crossentropy_backward_sharded_impl(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                          const Tensor& row_max, const Tensor& sum_exp, int64_t vocab_start,
                                          double dloss) override;
  void adamw_step_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) override;
  void sgd_step_impl(Tensor& param, const Tensor& grad, Tensor& momentum, const SgdParams& p) override;
  double sum_impl(const Tensor& x) override;
  double sum_squares_impl(const Tensor& x) override;
  void scale_impl(Tensor& x, double s) override;

  std::unique_ptr<Impl> impl_;
};

// The process's CUDA backend on cuda_device_for_this_process(), created on first use. Throws
// Error(usage) when no usable GPU is there.
CudaBackend& cuda_backend();

}  // namespace dl
