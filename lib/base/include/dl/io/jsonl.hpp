// JSON Lines files (one JSON value per line): metrics.jsonl and other append-only logs.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dl {

// Appends records to a file, one line each, written with a single write() and no user-space
// buffering, so a crash loses at most the line being written. Opening a file whose last line
// was cut short by a crash first removes that torn fragment (or terminates it, if it is
// complete JSON), so new lines never glue onto it.
class JsonlWriter {
 public:
  JsonlWriter() = default;
  explicit JsonlWriter(const std::filesystem::path& path) { open(path); }
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void open(const std::filesystem::path& path);  // creates the file if missing, appends otherwise
  void close() noexcept;
  bool is_open() const { return fd_ >= 0; }
  const std::filesystem::path& path() const { return path_; }

  void write(const nlohmann::json& record);
  // Keeps the keys in insertion order ("step" first reads better than sorted keys).
  void write_ordered(const nlohmann::ordered_json& record);

 private:
  void write_line(std::string line);

  std::filesystem::path path_;
  int fd_ = -1;
};

// All records of a JSONL file. Blank lines are skipped; a malformed line is a dl::Error(usage)
// naming the file and the line number. A last line without its newline that does not parse is
// the fragment a crash leaves mid-write and is skipped.
// One JSON document from a file; a missing file or invalid JSON is a usage error naming it.
nlohmann::json read_json_file(const std::filesystem::path& path);

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);

// Atomically rewrites the file keeping only the lines whose record satisfies keep(); kept lines
// are copied byte for byte. Used on resume to drop metrics logged after the checkpoint's step.
void rewrite_jsonl_keep(const std::filesystem::path& path,
                        const std::function<bool(const nlohmann::json&)>& keep);

}  // namespace dl
