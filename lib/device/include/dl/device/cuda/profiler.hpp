// The range a profiler started with --profile-from-start off records (Nsight Compute's
// `ncu --profile-from-start off`, Nsight Systems' `--capture-range=cudaProfilerApi`): dl-train
// opens it around one training step when DL_CUDA_PROFILE_STEP=N is set, so a per-kernel
// breakdown of a steady-state step needs no knowledge of how many kernels came before it.
#pragma once

namespace dl {

// Both wait for the device first, so the range holds exactly the work queued inside it.
void cuda_profiler_start();
void cuda_profiler_stop();

}  // namespace dl
