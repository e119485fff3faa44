// dl-bench memory: copy bandwidth, counted as bytes read plus bytes written per second (the
// convention of STREAM's copy and of nvbandwidth's device-local copy). The CPU measures host
// memory (direction "host"); a CUDA build adds device-to-device, host-to-device and
// device-to-host rows. Method: docs/BENCH.md.
#pragma once
#include <cstdint>
#include <functional>

#include "dl/bench/common.hpp"

namespace dl::bench {

struct MemoryOptions {
  double bytes = 0;  // bytes per copy; 0: the device's default (CPU 256 MiB)
  // The CPU copy of one thread's part (count floats); empty: memcpy. Tests put a faulty copy
  // here to see the check report it.
  std::function<void(float* dst, const float* src, int64_t count)> copy;
};

// One row per direction (schema dlkit-bench/1, benchmark "memory"). A copy whose destination
// differs from its source at one of 64 sampled positions per destination buffer is a failure in
// the report.
Report run_memory(const MemoryOptions& options, const CommonOptions& common);

// Bytes moved by one copy of `bytes`: read once and written once.
inline double copy_traffic_bytes(double bytes) { return 2.0 * bytes; }

}  // namespace dl::bench
