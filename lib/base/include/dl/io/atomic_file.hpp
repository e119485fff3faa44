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
#include <span>
#include <string>
#include <string_view>

namespace dl {

// ---- Outputs a user names (-o FILE, --output FILE) -----------------------------------------
//
// Every tool's output path goes through output_target() before a byte is written, and is then
// written by AtomicFileWriter or write_output(). The policy (README "Outputs"):
//   - a regular file or a new name: published atomically (temp file beside it, fsync, rename);
//   - "-": standard output; a character device (/dev/null, a terminal) or a FIFO: opened and
//     written through, never replaced (nothing to rename, and a failure cannot take back bytes
//     already written);
//   - a symlink: followed (relative links from their own folder, chains too); its final target
//     is written by the two rules above, so the link stays and a link to a file gets that file
//     replaced atomically beside it;
//   - a folder, a block device, a socket, a missing folder, a symlink loop: a usage error
//     (dl::Error(usage), exit 2);
//   - the same file (device and inode, after symlinks) as one of the command's inputs: a usage
//     error before anything is written.
enum class OutputKind {
  file,             // published atomically at OutputTarget::path
  stream,           // a character device or FIFO, opened and written in place
  standard_output,  // "-"
};

struct OutputTarget {
  std::filesystem::path given;  // as the user named it (messages)
  std::filesystem::path path;   // what is written: the final target of any symlinks; "-" for stdout
  OutputKind kind = OutputKind::file;

  // An internal file dlkit publishes atomically at `path`, with no classification (run files,
  // checkpoint pieces): what AtomicFileWriter::open(path) writes.
  static OutputTarget file(const std::filesystem::path& path) { return {path, path, OutputKind::file}; }
  bool is_file() const { return kind == OutputKind::file; }
};

// Classifies a user-named output and refuses what the policy above refuses. `inputs` are the
// files the command reads (missing ones are skipped); an input folder counts as itself only.
OutputTarget output_target(const std::filesystem::path& given, std::span<const std::filesystem::path> inputs = {});

// The same for an output folder a command creates (dl-shard split -o DIR, dl-train tokenize -o
// DIR): symlinks are followed and the folder they lead to returned; an existing entry that is not
// a folder (a device, a FIFO, a file) and a folder that is one of `inputs` or lies inside an
// input folder are usage errors. Whether an existing folder may be used is the caller's rule.
std::filesystem::path output_folder(const std::filesystem::path& given,
                                    std::span<const std::filesystem::path> inputs = {});

// Writes `data` to an output: atomically for a file, straight through for a stream.
void write_output(const OutputTarget& target, std::string_view data);

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
// record a checksum without reading the file back. Opened on an OutputTarget that is a stream,
// it writes the device, FIFO or stdout directly: commit() flushes (and closes what it opened).
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  explicit AtomicFileWriter(const std::filesystem::path& path) { open(path); }
  explicit AtomicFileWriter(const OutputTarget& target) { open(target); }
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;

  void open(const std::filesystem::path& path) { open(OutputTarget::file(path)); }
  void open(const OutputTarget& target);
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, fsyncs, renames over the target and fsyncs the folder (a stream: flushes). The
  // writer is closed after.
  void commit();
  // Drops the temp file; the target is untouched. Safe to call on a closed writer.
  void abandon() noexcept;

  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return tmp_; }  // empty for a stream
  uint64_t bytes_written() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }  // of all bytes written so far

 private:
  void flush_buffer();
  void write_fd(const void* data, size_t n);

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  OutputKind kind_ = OutputKind::file;
  std::string buf_;  // small writes are gathered here so a header of many fields is one syscall
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace dl
