// What of the CUDA build runs without a GPU: the probe's answer and the device-selection rules
// (train.device = cuda | auto, per precision), on either kind of machine. ctest name `cuda-host`:
// it runs wherever the CUDA backend is compiled, CI included, while the GPU suites (test_cuda,
// ctest `cuda` and `cuda-multi`) report "Skipped" there.
#include <doctest/doctest.h>

#include <cublasLt.h>

#include <string>

#include "dl/backend/backend.hpp"
#include "dl/device/build_info.hpp"
#include "dl/device/cuda/cuda_backend.hpp"
#include "dl/device/cuda/cublas_loader.hpp"
#include "dl/config/config.hpp"
#include "dl/core/error.hpp"
#include "dl/device/select.hpp"

using namespace dl;

namespace {

const CudaDeviceInfo& gpu() {
  static const CudaDeviceInfo info = cuda_probe();
  return info;
}

// select_backend's usage error for `c`, or "(selected)" when it chooses a backend.
std::string refusal(const Config& c) {
  try {
    select_backend(c, false);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  return "(selected)";
}

}  // namespace


// First in this file (doctest runs a file's cases in order): the cases below load cuBLASLt.
TEST_CASE("cuBLAS and cuBLASLt are loaded at the first call, not at start-up, and every function dlkit calls resolves") {
  // Linked, cuBLASLt's initializers ran at every start of every program (0.1 s of system time).
  CHECK_FALSE(cuda::cublas_lt_is_loaded());
  CHECK_FALSE(cuda::cublas_is_loaded());
  const size_t version = cublasLtGetVersion();  // on a GPU build: the first call, which loads it
  CHECK(version / 10000 == CUBLAS_VER_MAJOR);
  if (device_build_info().find("emulated device") == std::string::npos) {
    CHECK(cuda::cublas_lt_is_loaded());
    CHECK_FALSE(cuda::cublas_is_loaded());  // cuBLAS proper waits for its own first call
  } else {
    CHECK_FALSE(cuda::cublas_lt_is_loaded());  // the emulator answered
  }
  // Each function of both libraries, by the name the forwarding definitions look up.
  const std::vector<std::string> missing = cuda::cublas_missing_functions();
  for (const std::string& m : missing) MESSAGE(m);
  CHECK(missing.empty());
  CHECK(cuda::cublas_lt_is_loaded());
  CHECK(cuda::cublas_is_loaded());
}

TEST_CASE("cuda_probe reports a reason whenever no GPU is usable") {
  const CudaDeviceInfo& info = gpu();
  if (info.usable) {
    CHECK(info.device_count > 0);
    CHECK(info.total_bytes > 0);
    CHECK(!info.name.empty());
  } else {
    CHECK(!info.reason.empty());
    MESSAGE("no CUDA device here: " << info.reason);
  }
  CHECK(cuda_build_info().find("CUDA backend: yes") != std::string::npos);
}

TEST_CASE("device selection: cuda needs a usable GPU, auto falls back to the CPU, fp16 and llama run on the GPU") {
  Config c;
  c.model.type = ModelType::gpt;
  c.train.device = DeviceChoice::automatic;
  Backend& a = select_backend(c, false);
  CHECK(a.name() == (gpu().usable ? "cuda" : "cpu"));
  c.train.device = DeviceChoice::cuda;
  if (gpu().usable) {
    CHECK(select_backend(c, false).name() == "cuda");
    // Every precision runs on the GPU (fp16 with dynamic loss scaling).
    for (const std::string precision : {"bf16", "fp16"}) {
      CAPTURE(precision);
      c.train.precision = choice_from_name<Precision>(precision);
      c.train.device = DeviceChoice::cuda;
      CHECK(select_backend(c, false).name() == "cuda");
      c.train.device = DeviceChoice::automatic;
      CHECK(select_backend(c, false).name() == "cuda");
    }
    // The Llama model runs there too; the MLP does not (a usage error naming model.type).
    c.train.device = DeviceChoice::cuda;
    c.model.type = ModelType::llama;
    CHECK(select_backend(c, false).name() == "cuda");
    c.model.type = ModelType::mlp;
    CHECK(refusal(c).find("model.type = \"mlp\"") != std::string::npos);
    c.model.type = ModelType::gpt;
    // What the trainer cannot run on the GPU yet is a usage error under "cuda", the CPU under "auto".
    c.train.precision = Precision::fp16;
    c.parallel.tp = 2;
    c.train.device = DeviceChoice::cuda;
    CHECK(refusal(c).find("parallel.tp") != std::string::npos);
    c.train.device = DeviceChoice::automatic;
    CHECK(select_backend(c, false).name() == "cpu");
  } else {
    // Without a GPU, fp16 is refused under "cuda" for that reason alone, and runs on the CPU under "auto".
    for (const std::string precision : {"fp32", "fp16"}) {
      CAPTURE(precision);
      c.train.precision = choice_from_name<Precision>(precision);
      c.train.device = DeviceChoice::cuda;
      const std::string why = refusal(c);
      CHECK(why.find("no usable CUDA GPU") != std::string::npos);
      CHECK(why.find("precision") == std::string::npos);
      c.train.device = DeviceChoice::automatic;
      CHECK(select_backend(c, false).name() == "cpu");
    }
  }
}
