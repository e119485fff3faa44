#include "dl/io/jsonl.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/io/input_file.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/file_ops.hpp"

namespace dl {

namespace fs = std::filesystem;

namespace {

struct JsonlLine {
  std::string text;  // without the newline
  nlohmann::json value;
};

std::string read_whole(const fs::path& path) { return read_input_file(path, "cannot open"); }

bool is_blank(const std::string& s) { return s.find_first_not_of(" \t\r") == std::string::npos; }

std::string excerpt(const std::string& s) { return s.size() <= 80 ? s : s.substr(0, 77) + "..."; }

std::vector<JsonlLine> parse_lines(const fs::path& path) {
  const std::string text = read_whole(path);
  std::vector<JsonlLine> out;
  size_t pos = 0;
  for (size_t line_no = 1; pos < text.size(); ++line_no) {
    size_t nl = text.find('\n', pos);
    const bool terminated = nl != std::string::npos;
    std::string line = text.substr(pos, terminated ? nl - pos : std::string::npos);
    pos = terminated ? nl + 1 : text.size();
    if (is_blank(line)) continue;
    try {
      out.push_back({line, nlohmann::json::parse(line)});
    } catch (const nlohmann::json::parse_error& e) {
      if (!terminated) break;  // a torn last line from a crash mid-write
      throw_usage(path.string(), ":", line_no, ": not a valid JSON line (error at column ", e.byte,
                  "): ", excerpt(line), " — fix or delete that line");
    }
  }
  return out;
}

}  // namespace

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> out;
  for (auto& l : parse_lines(path)) out.push_back(std::move(l.value));
  return out;
}

void rewrite_jsonl_keep(const fs::path& path, const std::function<bool(const nlohmann::json&)>& keep) {
  std::string kept;
  for (const auto& l : parse_lines(path)) {
    if (keep(l.value)) {
      kept += l.text;
      kept += '\n';
    }
  }
  write_file_atomic(path, kept);
}

JsonlWriter::~JsonlWriter() { close(); }

void JsonlWriter::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void JsonlWriter::open(const fs::path& path) {
  close();
  path_ = path;
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_runtime("cannot open ", path.string(), " for appending: ", std::strerror(errno),
                  errno == ENOENT ? " (does the folder exist?)" : "");
  fd_ = fd;

  // Repair a torn last line (see the header) before appending after it.
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || st.st_size == 0) return;
  char last = '\n';
  if (::pread(fd_, &last, 1, st.st_size - 1) != 1 || last == '\n') return;
  const std::string text = read_whole(path);
  const size_t start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  const std::string tail = text.substr(start);
  if (nlohmann::json::accept(tail)) {
    write_line("");  // complete record, only the newline is missing
  } else if (::ftruncate(fd_, static_cast<off_t>(start)) != 0) {
    int err = errno;
    close();
    throw_runtime("cannot remove the torn last line of ", path.string(), ": ", std::strerror(err));
  }
}

void JsonlWriter::write_line(std::string line) {
  if (fd_ < 0) throw_runtime("JsonlWriter: writing to ", path_.string(), " which is not open");
  line += '\n';
  // One write() per line: with O_APPEND the line lands whole at the end of the file.
  const char* p = line.data();
  size_t n = line.size();
  while (n > 0) {
    ssize_t k = fileio::write(fd_, p, n, path_);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw_runtime("cannot append to ", path_.string(), ": ", std::strerror(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// error_handler replace: a stray invalid UTF-8 byte in a tag must not abort a training run.
void JsonlWriter::write(const nlohmann::json& record) {
  write_line(record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void JsonlWriter::write_ordered(const nlohmann::ordered_json& record) {
  write_line(record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string text = read_input_file(path, "cannot read");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_usage(path.string(), ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace dl
