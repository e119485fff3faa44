// Outputs that are not regular files, for the tests of where tools write (README "Outputs"):
// a character device made by mknod, and a FIFO read in the background.
#pragma once
#include <filesystem>
#include <memory>
#include <string>

namespace dl::test {

// mknod PATH c 1 3 (/dev/null's numbers): "" when made, else why not (no CAP_MKNOD, a filesystem
// mounted nodev still lets it be made, but then it cannot be opened: that is checked too).
std::string make_null_device(const std::filesystem::path& path);

// A FIFO at `path` (made here) whose bytes are collected in the background from before any
// writer comes: a writer's open never blocks, and a tool that replaces the FIFO instead of
// writing it leaves the reader empty rather than hung. finish() drains what is left and returns
// every byte read.
class FifoReader {
 public:
  explicit FifoReader(const std::filesystem::path& path);
  ~FifoReader();
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dl::test
