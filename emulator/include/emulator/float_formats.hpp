// The number formats the emulated cuBLASLt reads and writes, decoded exactly and encoded from a
// double with one round-to-nearest-even step (no double rounding through f32).
#pragma once
#include <cstdint>

namespace dl::cuda_emu {

double decode_bf16(uint16_t bits);
double decode_f16(uint16_t bits);
uint16_t encode_bf16(double v);
uint16_t encode_f16(double v);
float encode_f32(double v);
// An f32 value cut to TF32's 10 mantissa bits (nearest, ties to even): what
// CUBLAS_COMPUTE_32F_FAST_TF32 lets the tensor cores read.
float round_tf32(float v);

}  // namespace dl::cuda_emu
