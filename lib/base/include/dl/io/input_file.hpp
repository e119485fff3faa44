// Reading a file a user named (a config, a lock, a catalog, a manifest, dl-bench rows): only
// regular files, and only up to a size limit, so a path that names a FIFO, /dev/zero or a
// terminal is refused at once instead of blocking in open() or reading forever.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dl {

// Text inputs are small; 256 MiB is far above any config, lock, catalog or manifest.
inline constexpr uint64_t kMaxInputFileBytes = uint64_t{256} << 20;

// The whole file. Throws dl::Error(usage) naming `what` and the path when it is missing,
// unreadable, not a regular file, or larger than max_bytes; dl::Error(runtime) on a read error.
// The open never blocks (O_NONBLOCK), so a FIFO is reported, not waited on.
std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            uint64_t max_bytes = kMaxInputFileBytes);

// Opens `path` read-only for a reader that checks it further (safetensors, token shards): the
// descriptor of a regular file, never blocking on a FIFO or device. Throws as read_input_file;
// the caller closes the descriptor. *size receives the file's size.
int open_input_file(const std::filesystem::path& path, std::string_view what, uint64_t* size);

}  // namespace dl
