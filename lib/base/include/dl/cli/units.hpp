// Numbers with units on the command line: sizes ("80GB", "80GiB", "512MiB", "128M", "8B"),
// counts ("7.5e9", "1.5B", "124M", "350k") and durations. Decimal prefixes are powers of 1000,
// binary ones (KiB, MiB, GiB, TiB) powers of 1024. A bare K/M/G/T on a size is decimal, or
// binary with `binary_bare` (nccl-tests reads -b/-e 128M as 128 MiB). A memory size needs a unit
// ("80" is refused: 80 GB was meant); with `binary_bare`, nccl-tests' message sizes, a bare number
// is bytes ("-b 8").
#pragma once
#include <cstdint>
#include <string>

namespace dl {

// Bytes from "80GB", "80 GiB", "512MiB", "1.5TB", "4096B", "128M" ("4096" with binary_bare). `what` names the flag or key
// in the error ("--gpu-mem").
double parse_size(const std::string& text, const std::string& what, bool binary_bare = false);

// A count from "7.5e9", "1.5B", "124M", "350k", "2T", "1,000,000".
double parse_count(const std::string& text, const std::string& what);

// A positive duration in hours from "36", "36h", "90m", "2d".
double parse_hours(const std::string& text, const std::string& what);

}  // namespace dl
