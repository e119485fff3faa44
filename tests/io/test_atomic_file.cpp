#include <doctest/doctest.h>

#include <set>
#include <string>
#include <sys/stat.h>

#include "dl/core/error.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/crc32c.hpp"
#include "support/support.hpp"

using namespace dl;
using dl::test::TempDir;
namespace fs = std::filesystem;

namespace {
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}
}  // namespace

TEST_CASE("write_file_atomic creates and replaces a file and leaves no temp file") {
  TempDir dir("atomic");
  const fs::path p = dir / "config.json";
  write_file_atomic(p, "first");
  CHECK(dl::test::read_file(p) == "first");
  write_file_atomic(p, std::string("second\0binary", 13));
  CHECK(dl::test::read_file(p) == std::string("second\0binary", 13));
  CHECK(entries(dir.path()) == std::set<std::string>{"config.json"});
}

TEST_CASE("write_file_atomic keeps the permissions of the file it replaces") {
  TempDir dir("atomic");
  const fs::path p = dir / "metrics.jsonl";
  write_file_atomic(p, "a");
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  write_file_atomic(p, "b");
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(dl::test::read_file(p) == "b");
}

TEST_CASE("write_file_atomic into a missing folder is a runtime error naming the path") {
  TempDir dir("atomic");
  const fs::path p = dir / "no-such-folder" / "x.bin";
  try {
    write_file_atomic(p, "data");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()).find(p.string()) != std::string::npos);
    CHECK(std::string(e.what()).find("No such file or directory") != std::string::npos);
  }
  CHECK(entries(dir.path()).empty());
}

TEST_CASE("AtomicFileWriter without commit leaves neither target nor temp file") {
  TempDir dir("atomic");
  const fs::path p = dir / "model.safetensors";
  {
    AtomicFileWriter w(p);
    w.write("partial data");
    CHECK(fs::exists(w.temp_path()));
    CHECK(w.temp_path().parent_path() == p.parent_path());
  }
  CHECK(!fs::exists(p));
  CHECK(entries(dir.path()).empty());
}

TEST_CASE("an abandoned second write leaves the existing target intact") {
  TempDir dir("atomic");
  const fs::path p = dir / "ckpt.bin";
  write_file_atomic(p, "good checkpoint");
  {
    AtomicFileWriter w(p);
    w.write(std::string(3 << 20, 'x'));  // past the internal buffer, so bytes reach the temp file
    CHECK(fs::file_size(w.temp_path()) >= (3u << 20));
  }
  CHECK(dl::test::read_file(p) == "good checkpoint");
  // An exception in the middle of writing unwinds the same way.
  try {
    AtomicFileWriter w(p);
    w.write("half of a new");
    throw std::runtime_error("simulated failure");
  } catch (const std::runtime_error&) {
  }
  CHECK(dl::test::read_file(p) == "good checkpoint");
  CHECK(entries(dir.path()) == std::set<std::string>{"ckpt.bin"});
}

TEST_CASE("AtomicFileWriter streams mixed write sizes and reports size and crc") {
  TempDir dir("atomic");
  const fs::path p = dir / "big.bin";
  std::string expected;
  AtomicFileWriter w(p);
  for (size_t n : {size_t(8), size_t(100), size_t(5) << 20, size_t(1), (size_t(1) << 20) - 3, size_t(777)}) {
    std::string chunk(n, '\0');
    for (size_t i = 0; i < n; ++i) chunk[i] = static_cast<char>((expected.size() + i) * 31 % 251);
    w.write(chunk);
    expected += chunk;
  }
  CHECK(w.bytes_written() == expected.size());
  const uint32_t crc = w.crc32c();
  w.commit();
  CHECK(!w.is_open());
  const std::string got = dl::test::read_file(p);
  CHECK(got.size() == expected.size());
  CHECK(got == expected);
  CHECK(crc == crc32c(expected.data(), expected.size()));
  CHECK(entries(dir.path()) == std::set<std::string>{"big.bin"});
}

TEST_CASE("publish_dir_atomic renames a finished folder and refuses to replace one") {
  TempDir dir("atomic");
  const fs::path tmp = dir / ".step-100.tmp";
  fs::create_directories(tmp / "shards");
  dl::test::write_file(tmp / "model.safetensors", "weights");
  dl::test::write_file(tmp / "shards" / "rank0.bin", "opt");
  const fs::path final_dir = dir / "step-100";
  publish_dir_atomic(tmp, final_dir);
  CHECK(!fs::exists(tmp));
  CHECK(dl::test::read_file(final_dir / "model.safetensors") == "weights");
  CHECK(dl::test::read_file(final_dir / "shards" / "rank0.bin") == "opt");

  // A second publication under the same name (even onto an empty folder) must fail loudly.
  const fs::path tmp2 = dir / ".step-100.tmp2";
  fs::create_directories(tmp2);
  dl::test::write_file(tmp2 / "model.safetensors", "other");
  fs::create_directories(dir / "empty-target");
  for (const fs::path& target : {final_dir, dir / "empty-target"}) {
    try {
      publish_dir_atomic(tmp2, target);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::runtime);
      CHECK(std::string(e.what()).find("already exists") != std::string::npos);
      CHECK(std::string(e.what()).find(target.string()) != std::string::npos);
    }
  }
  CHECK(dl::test::read_file(tmp2 / "model.safetensors") == "other");
  CHECK(dl::test::read_file(final_dir / "model.safetensors") == "weights");
  CHECK_THROWS_AS(publish_dir_atomic(dir / "missing", dir / "x"), Error);
}

TEST_CASE("fsync_dir on a missing folder is a runtime error") {
  TempDir dir("atomic");
  fsync_dir(dir.path());  // succeeds on a real folder
  try {
    fsync_dir(dir / "missing");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()).find("missing") != std::string::npos);
  }
}
