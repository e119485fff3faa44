// Atomic file and folder publication: a reader (or a restart after a crash) sees either the
// previous complete file or the new complete file, never a partial one.
//
// The recipe (POSIX): write a temp file in the same folder (rename is atomic only within one
// filesystem), fsync it (data on disk before the name points at it), rename it over the target,
// fsync the folder (the rename itself on disk).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dl {

// Replaces `path` with `data` atomically. Throws dl::Error(runtime) naming the path and the
// system's reason; the temp file is removed on failure and an existing target is left intact.
void write_file_atomic(const std::filesystem::path& path, std::string_view data);

// fsync of a folder, so renames and new entries inside it survive a power loss.
void fsync_dir(const std::filesystem::path& dir);

// Publishes a fully written folder (a checkpoint) under its final name: fsyncs every file and
// folder inside tmp_dir, renames tmp_dir to final_dir, and fsyncs the parent. final_dir must not
// exist (dl::Error(runtime) if it does); tmp_dir and final_dir must be on one filesystem.
void publish_dir_atomic(const std::filesystem::path& tmp_dir, const std::filesystem::path& final_dir);

// Streams a large file to a temp name next to `path`; commit() publishes it. Destroying the
// writer without commit() (an exception, an early return) removes the temp file, so the target
// is either untouched or complete. Keeps a running CRC-32C of everything written, so callers can
// record a checksum without reading the file back.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  explicit AtomicFileWriter(const std::filesystem::path& path) { open(path); }
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;

  void open(const std::filesystem::path& path);
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, fsyncs, renames over the target and fsyncs the folder. The writer is closed after.
  void commit();
  // Drops the temp file; the target is untouched. Safe to call on a closed writer.
  void abandon() noexcept;

  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return tmp_; }
  uint64_t bytes_written() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }  // of all bytes written so far

 private:
  void flush_buffer();
  void write_fd(const void* data, size_t n);

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  std::string buf_;  // small writes are gathered here so a header of many fields is one syscall
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace dl
