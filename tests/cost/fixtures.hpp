// A small catalog with prices chosen for hand-computed tests: the most expensive GPU per hour
// (an H100 at $2.50/h) is the cheapest per experiment against an RTX 4090 at $0.50/h.
#pragma once
#include <string>

#include "support/support.hpp"

namespace cost_test {

inline const char* kCatalog = R"(schema = "dlkit-catalog/1"

[[offer]]
provider = "Cheap"
instance = "4090"
gpu = "RTX-4090"
gpus = 1
on_demand = 0.5
spot = 0.2
source = "test"
as_of = "2026-11"

[[offer]]
provider = "Pricey"
instance = "h100"
gpu = "H100-SXM"
gpus = 1
on_demand = 2.5
source = "test"
as_of = "2026-11"

[[offer]]
provider = "Pricey"
instance = "h100x8"
gpu = "H100-SXM"
gpus = 8
on_demand = 20.0
spot = 8.0
source = "test"
as_of = "2026-11"
)";

// Hand-computed inputs: --tokens 1e9 --params 124M, no architecture: FLOPs per token = 6N.
constexpr double kTokens = 1e9;
constexpr double kParams = 124e6;
constexpr double kWork = kTokens * 6 * kParams;   // 7.44e17 FLOP
constexpr double kH100 = 989.4e12 * 0.4;          // bf16 peak x MFU 0.4
constexpr double k4090 = 165.2e12 * 0.4;

inline std::string write_catalog(const dl::test::TempDir& dir, const std::string& name = "test.toml") {
  auto p = dir / name;
  dl::test::write_file(p, kCatalog);
  return p.string();
}

}  // namespace cost_test
