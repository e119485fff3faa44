#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <unistd.h>

#include "dl/core/error.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/tensorboard.hpp"
#include "support/support.hpp"

using namespace dl;
using dl::test::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

dl::test::RunResult check_events(const fs::path& p) {
  return dl::test::run(dl::test::torch_python(),
                       {dl::test::source_path("tests/scripts/check_tfevents.py").string(), p.string()});
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

uint32_t u32_le(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

}  // namespace

TEST_CASE("protobuf varints and the scalar Event encoding") {
  std::string v;
  detail::pb_varint(v, 300);
  CHECK(hex(v) == "ac02");  // the protobuf encoding guide's example
  v.clear();
  detail::pb_varint(v, static_cast<uint64_t>(int64_t(-1)));
  CHECK(hex(v) == "ffffffffffffffffff01");  // negative int64 takes 10 bytes

  // Event{wall_time=1.0, step=5, summary{value{tag="a", simple_value=1.0f}}}, encoded by hand:
  // 09 <1.0 as double> | 10 05 | 2a 0a { 0a 08 { 0a 01 'a' | 15 <1.0f> } }
  CHECK(hex(detail::tb_scalar_event("a", 1.0f, 5, 1.0)) ==
        "09000000000000f03f" "1005" "2a0a" "0a08" "0a0161" "150000803f");
  CHECK(hex(detail::tb_file_version_event(0.0)) ==
        "090000000000000000" "1a0d" + hex("brain.Event:2"));

  const std::string data = "abc";
  const std::string rec = detail::tb_record(data);
  REQUIRE(rec.size() == 8 + 4 + 3 + 4);
  CHECK(hex(rec.substr(0, 8)) == "0300000000000000");
  CHECK(u32_le(rec, 8) == masked_crc32c(rec.data(), 8));
  CHECK(rec.substr(12, 3) == "abc");
  CHECK(u32_le(rec, 15) == masked_crc32c("abc", 3));
}

TEST_CASE("TensorBoard event file name and file_version and scalars read back by an independent reader") {
  TempDir dir("tb");
  const fs::path logdir = dir / "tb";  // created by the writer
  const int64_t before = static_cast<int64_t>(std::floor(TensorBoardWriter::now()));
  struct Scalar {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
  };
  const std::vector<Scalar> scalars = {
      {"train/loss", 10.98765432f, 0, 1767225600.123456},
      {"train/lr", 6e-4f, 1, 1767225601.5},
      {"train/loss", 0.1f, 1000, 1767225602.25},
      {"train/tiny", 1.17549435e-38f, int64_t(1) << 40, 1767225603.0},
      {"train/huge", std::numeric_limits<float>::max(), 123456789, 1767225604.75},
      {"eval/négatif", -2.5f, 7, 1767225605.0},
  };
  fs::path path;
  {
    TensorBoardWriter w(logdir);
    path = w.path();
    for (const auto& s : scalars) w.add_scalar(s.tag, s.value, s.step, s.wall_time);
    w.flush();
  }
  CHECK(path.parent_path() == logdir);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string name = path.filename().string();
  CHECK(std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+)")));
  CHECK(name.substr(name.size() - std::strlen(host)) == host);
  const int64_t stamp = std::stoll(name.substr(std::strlen("events.out.tfevents."), 10));
  CHECK(stamp >= before);
  CHECK(stamp <= before + 5);

  auto r = check_events(path);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto lines = dl::test::lines(r.out);
  REQUIRE(lines.size() == scalars.size());
  for (size_t i = 0; i < scalars.size(); ++i) {
    CAPTURE(i);
    const json j = json::parse(lines[i]);
    CHECK(j["tag"] == scalars[i].tag);
    CHECK(j["step"].get<int64_t>() == scalars[i].step);
    // float32 written, float32 read: exact, not approximately equal.
    CHECK(j["value"].get<double>() == static_cast<double>(scalars[i].value));
    CHECK(static_cast<float>(j["value"].get<double>()) == scalars[i].value);
    CHECK(j["wall_time"].get<double>() == scalars[i].wall_time);
  }
}

TEST_CASE("a corrupted byte in an event record is detected by the independent reader") {
  TempDir dir("tb");
  fs::path path;
  {
    TensorBoardWriter w(dir.path());
    path = w.path();
    w.add_scalar("loss", 1.25f, 3, 1767225600.0);
    w.flush();
  }
  const std::string good = dl::test::read_file(path);
  REQUIRE(check_events(path).exit_code == 0);
  const size_t first_len = 8 + 4 + static_cast<unsigned char>(good[0]) + 4;  // first record's size

  // One flipped bit in the scalar's data, then in its length field.
  for (size_t at : {first_len + 12 + 5, first_len + 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    dl::test::write_file(path, bad);
    auto r = check_events(path);
    CAPTURE(at);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("crc mismatch") != std::string::npos);
  }
  // A file whose first record is not the file_version event is rejected too.
  dl::test::write_file(path, good.substr(first_len));
  auto r = check_events(path);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("brain.Event:2") != std::string::npos);
}

TEST_CASE("two TensorBoard writers in one folder get separate files") {
  TempDir dir("tb");
  TensorBoardWriter a(dir.path());
  TensorBoardWriter b(dir.path());
  CHECK(a.path() != b.path());
  a.add_scalar("x", 1.0f, 1);
  b.add_scalar("x", 2.0f, 1);
  a.flush();
  b.flush();
  const auto ra = check_events(a.path()), rb = check_events(b.path());
  REQUIRE(ra.exit_code == 0);
  REQUIRE(rb.exit_code == 0);
  CHECK(json::parse(ra.out)["value"].get<double>() == 1.0);
  CHECK(json::parse(rb.out)["value"].get<double>() == 2.0);
}

TEST_CASE("TensorBoard writer in an unusable folder is a runtime error naming it") {
  TempDir dir("tb");
  dl::test::write_file(dir / "file", "x");
  try {
    TensorBoardWriter w(dir / "file" / "tb");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()).find((dir / "file" / "tb").string()) != std::string::npos);
  }
}
