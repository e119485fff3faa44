// SHA-256 (FIPS 180-4), for the content hash of a lock file and the hash of every shared library
// a snapshot finds loaded. Uses the x86 SHA extensions when the CPU has them (checked at run
// time), else portable code; both give the same digest (tests compare them).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dl {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();  // finishes; the object must not be updated afterwards
  std::string hex_digest();          // 64 lowercase hex characters

  // Test hook: false forces the portable block function even where SHA-NI exists.
  static void set_hardware_enabled(bool enabled);
  static bool hardware_available();  // the CPU has SHA-NI (and SSE4.1)

 private:
  void blocks(const uint8_t* p, size_t nblocks);
  uint32_t state_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
  bool done_ = false;
};

std::string sha256_hex(std::string_view data);
// Streams the file; throws dl::Error(runtime) naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace dl
