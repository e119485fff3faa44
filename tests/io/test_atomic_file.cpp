#include <doctest/doctest.h>

#include <fcntl.h>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "dl/core/error.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/io/crc32c.hpp"
#include "support/special_files.hpp"
#include "support/support.hpp"

using namespace dl;
using dl::test::has;
using dl::test::TempDir;
namespace fs = std::filesystem;

namespace {
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// A refusal of output_target/output_folder: a usage error (exit 2) whose message says `part`.
void check_refused(const std::function<void()>& call, const std::string& part) {
  try {
    call();
    FAIL_CHECK("no error; expected one saying: " << part);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK_MESSAGE(has(e.what(), part), e.what());
  }
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

// ---- outputs a user names (README "Outputs")

TEST_CASE("output_target: a regular file or a new name is written atomically; '-' is standard output") {
  TempDir dir("output");
  const fs::path p = dir / "env.lock";
  OutputTarget t = output_target(p);
  CHECK(t.kind == OutputKind::file);
  CHECK(t.path == p);
  write_output(t, "first");
  write_output(output_target(p), "second");
  CHECK(dl::test::read_file(p) == "second");
  CHECK(entries(dir.path()) == std::set<std::string>{"env.lock"});
  // "-": the bytes go to file descriptor 1 (redirected here to a file), nothing is created.
  CHECK(output_target("-").kind == OutputKind::standard_output);
  const fs::path captured = dir / "stdout.txt";
  std::fflush(stdout);  // what doctest printed so far stays on the real stdout
  const int saved = ::dup(STDOUT_FILENO);
  const int fd = ::open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
  write_output(output_target("-"), "to stdout\n");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  CHECK(dl::test::read_file(captured) == "to stdout\n");
  CHECK(!fs::exists(fs::current_path() / "-"));
}

TEST_CASE("output_target: a character device is written through and stays a device") {
  TempDir dir("output");
  const fs::path dev = dir / "null";
  const std::string why = dl::test::make_null_device(dev);
  if (!why.empty()) {
    MESSAGE("skipped: cannot make a character device here (", why, ")");
    return;
  }
  const OutputTarget t = output_target(dev);
  CHECK(t.kind == OutputKind::stream);
  write_output(t, "discarded");
  AtomicFileWriter w(t);  // a streamed writer abandoned half-way leaves the device alone too
  w.write("partial");
  CHECK(w.temp_path().empty());
  w.abandon();
  CHECK(fs::is_character_file(fs::symlink_status(dev)));
  CHECK(entries(dir.path()) == std::set<std::string>{"null"});  // no temp file beside it
  // Through a symlink: the device is written, the link stays.
  fs::create_symlink("null", dir / "link");
  CHECK(output_target(dir / "link").kind == OutputKind::stream);
  write_output(output_target(dir / "link"), "discarded");
  CHECK(fs::is_symlink(fs::symlink_status(dir / "link")));
  CHECK(fs::is_character_file(fs::symlink_status(dev)));
}

TEST_CASE("output_target: a FIFO receives the bytes and stays a FIFO") {
  TempDir dir("output");
  const fs::path fifo = dir / "pipe";
  dl::test::FifoReader reader(fifo);
  const std::string big(300000, 'x');  // more than a pipe holds: the writer waits for the reader
  write_output(output_target(fifo), "head:" + big);
  CHECK(reader.finish() == "head:" + big);
  CHECK(fs::is_fifo(fs::symlink_status(fifo)));
  CHECK(entries(dir.path()) == std::set<std::string>{"pipe"});
}

TEST_CASE("output_target: a symlink is written through; its target is replaced atomically and the link kept") {
  TempDir dir("output");
  fs::create_directories(dir / "store");
  dl::test::write_file(dir / "store" / "real.lock", "old");
  fs::create_symlink("store/real.lock", dir / "env.lock");        // relative, from its own folder
  fs::create_symlink(dir / "env.lock", dir / "chain.lock");       // a chain of two
  const OutputTarget t = output_target(dir / "chain.lock");
  CHECK(t.kind == OutputKind::file);
  CHECK(t.path == fs::canonical(dir / "store" / "real.lock"));
  write_output(t, "new");
  CHECK(fs::is_symlink(fs::symlink_status(dir / "env.lock")));
  CHECK(fs::is_symlink(fs::symlink_status(dir / "chain.lock")));
  CHECK(dl::test::read_file(dir / "store" / "real.lock") == "new");
  CHECK(entries(dir / "store") == std::set<std::string>{"real.lock"});
  // A dangling link creates the file it names.
  fs::create_symlink("store/later.lock", dir / "dangling");
  write_output(output_target(dir / "dangling"), "created");
  CHECK(dl::test::read_file(dir / "store" / "later.lock") == "created");
  CHECK(fs::is_symlink(fs::symlink_status(dir / "dangling")));
  // A loop is refused.
  fs::create_symlink("loop-b", dir / "loop-a");
  fs::create_symlink("loop-a", dir / "loop-b");
  check_refused([&] { output_target(dir / "loop-a"); }, "too many levels of symbolic links");
}

TEST_CASE("output_target: a folder, a missing folder and an input are usage errors, before anything is written") {
  TempDir dir("output");
  check_refused([&] { output_target(dir.path()); }, "is a directory; name a file inside it");
  check_refused([&] { output_target(dir / "no" / "x.lock"); }, "does not exist");
  check_refused([&] { output_target(""); }, "empty");
  const fs::path in = dir / "constraints.toml", other = dir / "other.toml";
  dl::test::write_file(in, "cuda = \"*\"\n");
  dl::test::write_file(other, "x");
  const std::vector<fs::path> inputs{other, in, dir / "missing.toml"};  // a missing input is skipped
  // The same path, a symlink to it and a hard link to it: the same inode.
  fs::create_symlink("constraints.toml", dir / "via-link");
  fs::create_hard_link(in, dir / "hard");
  for (const char* name : {"constraints.toml", "via-link", "hard"}) {
    CAPTURE(name);
    check_refused([&] { output_target(dir / name, inputs); }, "is the input " + in.string());
  }
  CHECK(dl::test::read_file(in) == "cuda = \"*\"\n");
  CHECK(output_target(dir / "new.lock", inputs).kind == OutputKind::file);
}

TEST_CASE("output_folder: devices and files refused, symlinks followed, never an input folder or inside one") {
  TempDir dir("output");
  dl::test::write_file(dir / "file", "x");
  check_refused([&] { output_folder(dir / "file"); }, "is a regular file, not a directory");
  const std::string why = dl::test::make_null_device(dir / "null");
  if (why.empty()) check_refused([&] { output_folder(dir / "null"); }, "is a character device, not a directory");
  else MESSAGE("device case skipped: ", why);
  fs::create_directories(dir / "ckpt" / "step_3");
  fs::create_directories(dir / "target");
  fs::create_symlink("target", dir / "link");
  CHECK(output_folder(dir / "link") == fs::canonical(dir / "target"));
  CHECK(output_folder(dir / "new") == dir / "new");
  const std::vector<fs::path> inputs{dir / "ckpt" / "step_3"};
  check_refused([&] { output_folder(dir / "ckpt" / "step_3", inputs); }, "is the input");
  check_refused([&] { output_folder(dir / "ckpt" / "step_3" / "sub" / "new", inputs); }, "lies inside the input");
  fs::create_symlink("ckpt/step_3", dir / "into-input");
  check_refused([&] { output_folder(dir / "into-input", inputs); }, "is the input");
  CHECK(output_folder(dir / "ckpt" / "step_4", inputs) == dir / "ckpt" / "step_4");  // beside it is fine
}
