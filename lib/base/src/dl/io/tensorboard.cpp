#include "dl/io/tensorboard.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "dl/core/error.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/file_ops.hpp"

namespace dl {

namespace fs = std::filesystem;

namespace detail {

// Wire types (protobuf encoding spec): 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void pb_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void pb_tag(std::string& out, int field, int wire_type) {
  pb_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

void pb_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  pb_tag(out, field, kFixed64);
  put_le(out, bits, 8);
}

void pb_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  pb_tag(out, field, kFixed32);
  put_le(out, bits, 4);
}

void pb_bytes(std::string& out, int field, std::string_view bytes) {
  pb_tag(out, field, kLengthDelimited);
  pb_varint(out, bytes.size());
  out.append(bytes);
}

// tensorflow.Event field numbers (tensorflow/core/util/event.proto).
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
// tensorflow.Summary / Summary.Value (tensorflow/core/framework/summary.proto).
constexpr int kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2;

}  // namespace

std::string tb_file_version_event(double wall_time) {
  std::string ev;
  pb_double(ev, kEventWallTime, wall_time);
  pb_bytes(ev, kEventFileVersion, "brain.Event:2");
  return ev;
}

std::string tb_scalar_event(std::string_view tag, float value, int64_t step, double wall_time) {
  std::string val;
  pb_bytes(val, kValueTag, tag);
  pb_float(val, kValueSimpleValue, value);
  std::string summary;
  pb_bytes(summary, kSummaryValue, val);
  std::string ev;
  pb_double(ev, kEventWallTime, wall_time);
  // int64 is encoded as the varint of its two's-complement bits (negative steps take 10 bytes).
  pb_tag(ev, kEventStep, kVarint);
  pb_varint(ev, static_cast<uint64_t>(step));
  pb_bytes(ev, kEventSummary, summary);
  return ev;
}

std::string tb_record(const std::string& data) {
  std::string rec;
  put_le(rec, data.size(), 8);
  put_le(rec, masked_crc32c(rec.data(), 8), 4);
  rec += data;
  put_le(rec, masked_crc32c(data.data(), data.size()), 4);
  return rec;
}

}  // namespace detail

double TensorBoardWriter::now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

TensorBoardWriter::TensorBoardWriter(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_runtime("cannot create the TensorBoard folder ", dir.string(), ": ", ec.message());

  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const double t = now();
  const std::string base = str("events.out.tfevents.", static_cast<int64_t>(std::floor(t)), ".", host);

  // O_EXCL: a second writer started within the same second (a restarted run) gets its own file
  // instead of interleaving records with the first.
  for (int n = 0; fd_ < 0; ++n) {
    path_ = dir / (n == 0 ? base : base + "." + std::to_string(n));
    fd_ = fileio::open(path_, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644, path_);
    if (fd_ < 0) {
      if (errno == EEXIST && n < 1000) continue;
      throw_runtime("cannot create the TensorBoard event file ", path_.string(), ": ", std::strerror(errno));
    }
  }
  write_record(detail::tb_file_version_event(t));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ < 0) return;
  try {
    flush();
  } catch (const std::exception&) {
    // Already reported by the flush that failed first; a destructor cannot report again.
  }
  ::close(fd_);
}

void TensorBoardWriter::write_record(const std::string& data) { pending_ += detail::tb_record(data); }

void TensorBoardWriter::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  write_record(detail::tb_scalar_event(tag, value, step, wall_time));
}

void TensorBoardWriter::flush() {
  // A failed write drops the buffered records and the error ends the run; TensorBoard's reader
  // skips a torn last record.
  const char* p = pending_.data();
  size_t n = pending_.size();
  while (n > 0) {
    ssize_t k = fileio::write(fd_, p, n, path_);
    if (k < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      pending_.clear();
      throw_runtime("cannot write to the TensorBoard event file ", path_.string(), ": ", std::strerror(err));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  pending_.clear();
}

}  // namespace dl
