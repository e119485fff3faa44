// The peak a measurement is compared with: datasheet numbers for known GPUs (dlkit's GPU table,
// dl/plan/gpus.*: H100 SXM and PCIe, H200, A100, ... at bf16, fp16, tf32 and fp32, dense),
// and for the CPU, whose datasheet peak dlkit does not know, the measured OpenBLAS sgemm rate.
#pragma once
#include <optional>
#include <string>

#include "dl/bench/common.hpp"

namespace dl::bench {

struct Peak {
  std::optional<double> value;  // FLOP/s or bytes/s; nullopt when unknown
  std::string source;           // "datasheet H100-SXM bf16 dense", "measured: ...", "unknown: ..."
};

// Dense FLOP/s at a GEMM dtype or training precision (fp32, tf32, bf16, fp16).
Peak compute_peak(const DeviceInfo& device, MathPrecision dtype);
// Memory bandwidth (bytes read plus written per second).
Peak memory_peak(const DeviceInfo& device);
// A GPU's link to host memory, bytes per second in one direction (PCIe or NVLink-C2C).
Peak host_link_peak(const DeviceInfo& device);

// Percentage of a peak (nullopt when the peak is unknown).
std::optional<double> percent_of(double achieved, const Peak& peak);

}  // namespace dl::bench
