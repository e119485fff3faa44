#include "dl/io/atomic_file.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

#include "dl/core/error.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/file_ops.hpp"

namespace dl {

namespace fs = std::filesystem;

namespace {

constexpr size_t kBufferBytes = 1 << 20;  // gather writes smaller than this

std::string errno_text(int err) { return std::strerror(err); }

// ".name.tmp-<pid>-<n>" next to the target: hidden, unique per process and per call, and in the
// same folder so the final rename stays on one filesystem.
fs::path temp_name_for(const fs::path& path) {
  static std::atomic<uint64_t> counter{0};
  // Built with str() rather than "." + string: g++ 12 reports a false -Wrestrict on the latter.
  std::string name = str(".", path.filename().string(), ".tmp-", ::getpid(), "-", counter.fetch_add(1));
  return path.parent_path() / name;
}

fs::path parent_or_dot(const fs::path& p) {
  fs::path parent = p.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// `published`, when given, is the entry whose rename this folder sync makes durable: the fault
// hook counts the sync as that file's, and the error names it.
void fsync_path(const fs::path& p, int flags, const fs::path& published = {}) {
  int fd = ::open(p.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw_runtime("cannot open ", p.string(), " to sync it: ", errno_text(errno));
  int rc = fileio::fsync(fd, published.empty() ? p : published);
  int err = errno;
  ::close(fd);
  // Some filesystems cannot fsync a folder (EINVAL); nothing more can be done there, and the
  // data of the files themselves is already synced.
  if (rc != 0 && err != EINVAL)
    throw_runtime("cannot sync ", p.string(), published.empty() ? "" : " after renaming " + published.string(), ": ",
                  errno_text(err));
}

// fsync of the folder holding `entry`, after `entry` was renamed into it.
void fsync_parent_of(const fs::path& entry) {
  fs::path parent = entry.parent_path();
  fsync_path(parent.empty() ? fs::path(".") : parent, O_RDONLY | O_DIRECTORY, entry);
}

// rename() without replacing an existing target. renameat2(RENAME_NOREPLACE) closes the window
// between "check it does not exist" and "rename"; filesystems without it get the check instead.
void rename_no_replace(const fs::path& from, const fs::path& to) {
  if (fileio::rename(from, to, /*no_replace=*/true) == 0) return;
  int err = errno;
  if (err == EINVAL || err == ENOSYS) {
    if (fs::exists(to)) err = EEXIST;
    else if (fileio::rename(from, to) == 0) return;
    else err = errno;
  }
  if (err == EEXIST || err == ENOTEMPTY)
    throw_runtime("cannot publish ", from.string(), " as ", to.string(),
                  ": the target already exists; remove it or choose another name");
  throw_runtime("cannot rename ", from.string(), " to ", to.string(), ": ", errno_text(err));
}

// ---- output targets

// The end of a chain of symlinks that leads nowhere yet (each relative link read from its own
// folder): the new file or folder an output through a dangling link creates.
fs::path follow_dangling_links(const fs::path& given) {
  fs::path p = given;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) throw_usage("cannot read the symlink ", p.string(), ": ", ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  throw_usage(given.string(), ": too many levels of symbolic links; name a file");
}

// What `path` is when followed through its symlinks; false when nothing is there (yet).
bool stat_followed(const fs::path& given, const fs::path& path, struct stat& st) {
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ELOOP) throw_usage(given.string(), ": too many levels of symbolic links; name a file");
  if (errno != ENOENT && errno != ENOTDIR) throw_usage("cannot look at ", given.string(), ": ", errno_text(errno));
  return false;
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Refuses an output `relation` ("is", "lies inside") one of the inputs (device and inode);
// `shown` is what the output resolved to.
void refuse_input(const fs::path& given, const fs::path& shown, const struct stat& out, std::span<const fs::path> inputs,
                  const char* relation, const char* what) {
  for (const auto& in : inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) != 0 || !same_file(st, out)) continue;
    throw_usage(given.string(), shown == given ? std::string() : " (" + shown.string() + ")", " ", relation,
                " the input ", in.string(), ": the command reads it, so writing there would destroy it; ", what);
  }
}

bool lstat_is_link(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace

OutputTarget output_target(const fs::path& given, std::span<const fs::path> inputs) {
  if (given.empty()) throw_usage("an empty output path; name a file, or - for standard output");
  if (given == "-") return {given, given, OutputKind::standard_output};
  OutputTarget t{given, given, OutputKind::file};
  struct stat st {};
  if (!stat_followed(given, given, st)) {
    // A new file (through a dangling symlink: where it leads). Its folder must exist.
    t.path = follow_dangling_links(given);
    const fs::path folder = parent_or_dot(t.path);
    std::error_code ec;
    if (!fs::is_directory(folder, ec))
      throw_usage(given.string(), ": the folder ", folder.string(), " does not exist; create it first");
    if (t.path.filename().empty()) throw_usage(given.string(), ": names a folder; name a file");
    return t;
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    t.kind = OutputKind::stream;  // opened through its links (also /dev/stdout's /proc magic link)
  } else if (S_ISREG(st.st_mode)) {
    if (lstat_is_link(given)) t.path = fs::canonical(given);  // replace the target, keep the link
  } else {
    throw_usage(given.string(), " is ", fileio::file_type_name(st.st_mode),
                S_ISDIR(st.st_mode) ? "; name a file inside it"
                                    : "; name a file, a character device, a FIFO, or - for standard output");
  }
  refuse_input(given, t.path, st, inputs, "is", "write the output to another file");
  return t;
}

fs::path output_folder(const fs::path& given, std::span<const fs::path> inputs) {
  if (given.empty()) throw_usage("an empty output folder; name one");
  fs::path folder = given;
  struct stat st {};
  if (stat_followed(given, given, st)) {
    if (!S_ISDIR(st.st_mode)) throw_usage(given.string(), " is ", fileio::file_type_name(st.st_mode), ", not a directory; name a folder");
    if (lstat_is_link(given)) folder = fs::canonical(given);  // write into the folder it leads to
  } else {
    folder = follow_dangling_links(given);
  }
  // The folder (or, for a new one, where it would be) must not be an input or inside one.
  std::error_code ec;
  const char* relation = "is";
  for (fs::path p = fs::weakly_canonical(fs::absolute(folder), ec); !ec; relation = "lies inside") {
    struct stat at {};
    if (::stat(p.c_str(), &at) == 0) refuse_input(given, folder, at, inputs, relation, "write the output to another folder");
    if (!p.has_relative_path()) break;
    p = p.parent_path();
  }
  return folder;
}

void write_output(const OutputTarget& target, std::string_view data) {
  AtomicFileWriter w(target);
  w.write(data);
  w.commit();
}

void fsync_dir(const fs::path& dir) { fsync_path(dir.empty() ? fs::path(".") : dir, O_RDONLY | O_DIRECTORY); }

void write_file_atomic(const fs::path& path, std::string_view data) {
  AtomicFileWriter w(path);
  w.write(data);
  w.commit();
}

void publish_dir_atomic(const fs::path& tmp_dir, const fs::path& final_dir) {
  std::error_code ec;
  if (!fs::is_directory(tmp_dir, ec))
    throw_runtime("cannot publish ", tmp_dir.string(), ": it is not a folder");
  // Every file's data and every entry must be durable before the folder gets its final name;
  // otherwise a crash could leave a complete-looking checkpoint with empty files in it.
  for (auto it = fs::recursive_directory_iterator(tmp_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory()) fsync_dir(it->path());
    else if (it->is_regular_file()) fsync_path(it->path(), O_RDONLY);
  }
  if (ec) throw_runtime("cannot list ", tmp_dir.string(), " to sync it: ", ec.message());
  fsync_dir(tmp_dir);
  rename_no_replace(tmp_dir, final_dir);
  fsync_parent_of(final_dir);
  // A move between folders changes two folders; both must reach the disk.
  std::error_code ec_a, ec_b;
  fs::path from_parent = fs::weakly_canonical(parent_or_dot(tmp_dir), ec_a);
  fs::path to_parent = fs::weakly_canonical(parent_or_dot(final_dir), ec_b);
  if (ec_a || ec_b || from_parent != to_parent) fsync_dir(parent_or_dot(tmp_dir));
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept { *this = std::move(other); }

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    tmp_ = std::move(other.tmp_);
    fd_ = std::exchange(other.fd_, -1);
    kind_ = other.kind_;
    buf_ = std::move(other.buf_);
    bytes_ = other.bytes_;
    crc_ = other.crc_;
  }
  return *this;
}

void AtomicFileWriter::open(const OutputTarget& target) {
  abandon();
  const fs::path& path = target.path;
  if (path.filename().empty()) throw_runtime("cannot write '", path.string(), "': the path names a folder");
  path_ = path;
  kind_ = target.kind;
  bytes_ = 0;
  crc_ = 0;
  buf_.clear();
  if (kind_ != OutputKind::file) {
    // Written through: no temp file, nothing to rename, never O_TRUNC or O_CREAT.
    if (kind_ == OutputKind::standard_output) {
      std::fflush(stdout);  // what the program printed before comes first
      fd_ = STDOUT_FILENO;
    } else {
      fd_ = fileio::open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC, 0, path);
      if (fd_ < 0) throw_runtime("cannot open ", path.string(), " to write it: ", errno_text(errno));
    }
    buf_.reserve(kBufferBytes);
    return;
  }
  tmp_ = temp_name_for(path);
  // Keep the permissions of a file being replaced (a user may have made metrics world-readable).
  mode_t mode = 0644;
  struct stat st {};
  const bool replacing = ::stat(path.c_str(), &st) == 0;
  if (replacing) mode = st.st_mode & 07777;
  fd_ = fileio::open(tmp_, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode, path);
  if (fd_ < 0) {
    int err = errno;
    tmp_.clear();
    throw_runtime("cannot create a temp file to write ", path.string(), ": ", errno_text(err),
                  err == ENOENT ? " (does the folder exist?)" : "");
  }
  // The open() mode is filtered by the umask; set it explicitly when replacing a file.
  if (replacing) (void)::fchmod(fd_, mode);
  buf_.reserve(kBufferBytes);
}

void AtomicFileWriter::write_fd(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = fileio::write(fd_, p, n, path_);
    if (k < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      std::string msg = str("cannot write ", path_.string(), ": ", errno_text(err),
                            err == ENOSPC ? " (free some disk space and retry)" : "");
      abandon();
      throw_runtime(msg);
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void AtomicFileWriter::flush_buffer() {
  if (buf_.empty()) return;
  write_fd(buf_.data(), buf_.size());
  buf_.clear();
}

void AtomicFileWriter::write(const void* data, size_t n) {
  if (fd_ < 0) throw_runtime("AtomicFileWriter::write on a writer that is not open (", path_.string(), ")");
  if (n == 0) return;
  crc_ = dl::crc32c(data, n, crc_);
  bytes_ += n;
  if (buf_.size() + n <= kBufferBytes) {
    buf_.append(static_cast<const char*>(data), n);
    return;
  }
  flush_buffer();
  if (n < kBufferBytes) buf_.append(static_cast<const char*>(data), n);
  else write_fd(data, n);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw_runtime("AtomicFileWriter::commit on a writer that is not open (", path_.string(), ")");
  flush_buffer();
  if (kind_ != OutputKind::file) {
    const int rc = kind_ == OutputKind::stream ? ::close(fd_) : 0;
    const int err = errno;
    fd_ = -1;
    if (rc != 0) throw_runtime("cannot close ", path_.string(), ": ", errno_text(err));
    return;
  }
  if (fileio::fsync(fd_, path_) != 0) {
    std::string msg = str("cannot sync ", path_.string(), ": ", errno_text(errno));
    abandon();
    throw_runtime(msg);
  }
  int rc = ::close(fd_);
  int err = errno;
  fd_ = -1;
  if (rc != 0) {
    abandon();
    throw_runtime("cannot close ", path_.string(), ": ", errno_text(err));
  }
  if (fileio::rename(tmp_, path_) != 0) {
    err = errno;
    abandon();
    throw_runtime("cannot rename the temp file over ", path_.string(), ": ", errno_text(err));
  }
  tmp_.clear();  // published: nothing left to clean up
  fsync_parent_of(path_);
}

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) {
    if (kind_ != OutputKind::standard_output) ::close(fd_);
    fd_ = -1;
  }
  if (!tmp_.empty()) {
    ::unlink(tmp_.c_str());
    tmp_.clear();
  }
  buf_.clear();
  buf_.shrink_to_fit();
}

}  // namespace dl
