// Shared pieces of dl/data: memory-mapped files, split sizes, source strings, id checks.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dl/data/sources.hpp"
#include "dl/io/input_file.hpp"

namespace dl::data {

MappedFile::MappedFile(const std::string& path, std::string_view what) : path_(path) {
  // Refuses FIFOs and devices (/dev/zero) without blocking: only a regular file is mapped.
  uint64_t size = 0;
  int fd = open_input_file(path, str(what, ": cannot open"), &size);
  size_ = static_cast<size_t>(size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw_runtime(what, ": cannot map '", path, "' (", size_, " bytes): ", std::strerror(e));
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

void MappedFile::advise_random() const {
  if (data_) ::madvise(const_cast<unsigned char*>(data_), size_, MADV_RANDOM);
}

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& what) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_MARK, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      std::string p = g.gl_pathv[i];
      if (!p.empty() && p.back() != '/') files.push_back(p);  // GLOB_MARK marks folders
    }
  ::globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) throw_usage(what, ": cannot read the folders of '", pattern, "'");
  if (files.empty()) {
    bool wildcard = pattern.find_first_of("*?[") != std::string::npos;
    throw_usage(what, wildcard ? ": the pattern matches no files" : ": no such file");
  }
  return files;
}

int64_t val_count(int64_t n, double fraction) {
  if (fraction <= 0) return 0;
  int64_t k = std::llround(static_cast<double>(n) * fraction);
  return k < 1 ? 1 : k;
}

SourceSpec parse_source(const std::string& source, std::string_view key) {
  auto colon = source.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == source.size())
    throw_usage(key, " = \"", source, "\" is not a data source; use \"synthetic:addition\", \"text:PATH\", ",
                "\"tokens:GLOB\" or \"csv:PATH\"");
  const std::string kind = source.substr(0, colon);
  const std::optional<SourceKind> k = parse_choice<SourceKind>(kind);
  if (!k)
    throw_usage(key, " = \"", source, "\": unknown source kind '", kind,
                "'; use synthetic:addition, text:PATH, tokens:GLOB or csv:PATH");
  SourceSpec s{*k, source.substr(colon + 1), source};
  if (s.kind == SourceKind::synthetic && !parse_choice<SyntheticTask>(s.arg))
    throw_usage(key, " = \"", source, "\": unknown synthetic task '", s.arg, "'; the built-in task is addition");
  return s;
}

void check_example_ids(const std::vector<int64_t>& ids, int64_t n, std::string_view what) {
  for (int64_t id : ids)
    if (id < 0 || id >= n) throw_runtime(what, ": example id ", id, " is out of range [0, ", n, ")");
}

}  // namespace dl::data
