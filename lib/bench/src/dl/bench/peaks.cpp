#include "dl/bench/peaks.hpp"

#include "dl/bench/gemm.hpp"
#include "dl/plan/gpus.hpp"

namespace dl::bench {

namespace {

std::optional<plan::GpuSpec> spec_of(const DeviceInfo& d) {
  if (!d.gpu_model.empty())
    if (auto s = plan::gpu_spec(d.gpu_model)) return s;
  return plan::gpu_spec(d.device);
}

}  // namespace

Peak compute_peak(const DeviceInfo& device, MathPrecision precision) {
  const std::string dtype(choice_name(precision));
  if (is_emulated(device)) return {std::nullopt, kEmulatedPeak};
  if (device.device_type == DeviceKind::cuda) {
    auto spec = spec_of(device);
    if (!spec) return {std::nullopt, "unknown: " + device.device + " is not in dlkit's GPU table"};
    auto v = spec->peak_flops(precision);
    if (!v || *v <= 0) return {std::nullopt, "unknown: " + spec->model + " has no dense " + dtype + " peak"};
    return {*v, "datasheet " + spec->model + " " + dtype + " dense"};
  }
  // A CPU has no entry in the table: its fp32 peak is what OpenBLAS sgemm reaches on it.
  if (precision != MathPrecision::fp32) return {std::nullopt, "unknown: the CPU peak is estimated for fp32 only"};
  MeasuredPeak p = cpu_sgemm_peak();
  return {p.flops, p.source};
}

Peak memory_peak(const DeviceInfo& device) {
  if (is_emulated(device)) return {std::nullopt, kEmulatedPeak};
  if (device.device_type == DeviceKind::cuda) {
    auto spec = spec_of(device);
    if (!spec || spec->memory_bw <= 0) return {std::nullopt, "unknown: " + device.device + " is not in dlkit's GPU table"};
    return {spec->memory_bw, "datasheet " + spec->model + " memory bandwidth"};
  }
  return {std::nullopt, "unknown: dlkit has no table of CPU memory bandwidths"};
}

Peak host_link_peak(const DeviceInfo& device) {
  if (is_emulated(device)) return {std::nullopt, kEmulatedPeak};
  auto spec = device.device_type == DeviceKind::cuda ? spec_of(device) : std::nullopt;
  if (!spec || spec->host_bw <= 0) return {std::nullopt, "unknown: " + device.device + " has no host-link bandwidth in dlkit's GPU table"};
  return {spec->host_bw, "dlkit's GPU table: " + spec->model + " host link, one direction (practical)"};
}

std::optional<double> percent_of(double achieved, const Peak& peak) {
  if (!peak.value || *peak.value <= 0) return std::nullopt;
  return 100.0 * achieved / *peak.value;
}

}  // namespace dl::bench
