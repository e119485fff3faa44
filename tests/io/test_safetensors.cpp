#include <doctest/doctest.h>

#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "dl/core/error.hpp"
#include "dl/io/crc32c.hpp"
#include "dl/io/safetensors.hpp"
#include "support/support.hpp"

using dl::test::has;

using namespace dl;
using dl::test::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A tensor whose element i holds f(i).
template <class T, class F>
Tensor make(Shape shape, F f) {
  Tensor t = Tensor::empty(std::move(shape), dtype_of<T>());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(f(i));
  return t;
}

// A 16-bit tensor (bf16/f16) from raw bit patterns.
Tensor bits16(DType dt, const std::vector<uint16_t>& bits) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bits.size())}, dt);
  std::memcpy(t.raw(), bits.data(), bits.size() * 2);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

uint64_t u64_le(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

std::string u64_bytes(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A hand-made safetensors file: header text (padded to 8 unless told otherwise), then data.
fs::path write_raw(const fs::path& p, std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  dl::test::write_file(p, u64_bytes(header.size()) + header + data);
  return p;
}

// Opens p, expects dl::Error(usage), returns its message.
std::string open_error(const fs::path& p) {
  try {
    SafetensorsReader r(p);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(p.string()) != std::string::npos, msg);
    return msg;
  }
  FAIL("opening ", p.string(), " should have failed");
  return "";
}


struct Sample {
  std::vector<std::pair<std::string, Tensor>> tensors;
};

// Every dtype dlkit handles, plus a 0-element tensor and a scalar (shape []).
Sample sample() {
  Sample s;
  s.tensors.emplace_back("wte.weight", make<float>({2, 3}, [](int64_t i) { return 0.25 * i - 0.5; }));
  s.tensors.emplace_back("h.0.ln_1.bias", make<double>({5}, [](int64_t i) { return 1e10 + i; }));
  s.tensors.emplace_back("bf16", bits16(DType::bf16, {0x3F80, 0x3F00, 0xC000, 0x4049}));  // 1, .5, -2, 3.140625
  s.tensors.emplace_back("f16", bits16(DType::f16, {0x3C00, 0x4000, 0xB800}));  // 1, 2, -0.5
  s.tensors.emplace_back("i32", make<int32_t>({2, 2}, [](int64_t i) { return -1000 * i; }));
  s.tensors.emplace_back("i64", make<int64_t>({3}, [](int64_t i) { return (int64_t(1) << 40) + i; }));
  s.tensors.emplace_back("u8", make<uint8_t>({7}, [](int64_t i) { return 250 + i % 6; }));
  s.tensors.emplace_back("u16", make<uint16_t>({2, 1}, [](int64_t i) { return 65535 - i; }));
  s.tensors.emplace_back("empty", Tensor::empty({0, 4}, DType::f32));
  s.tensors.emplace_back("scalar", make<float>({}, [](int64_t) { return 42.5; }));
  return s;
}

// Sum of a sample tensor's values in double, computed independently of the Python script.
double sum_of(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::f32: s += t.data<float>()[i]; break;
      case DType::f64: s += t.data<double>()[i]; break;
      case DType::i32: s += t.data<int32_t>()[i]; break;
      case DType::i64: s += static_cast<double>(t.data<int64_t>()[i]); break;
      case DType::u8: s += t.data<uint8_t>()[i]; break;
      case DType::u16: s += t.data<uint16_t>()[i]; break;
      case DType::bf16: {
        uint32_t bits = uint32_t(static_cast<const uint16_t*>(t.raw())[i]) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        s += f;
        break;
      }
      case DType::f16: break;  // checked against the known values instead
    }
  }
  return s;
}

}  // namespace

TEST_CASE("safetensors round trip of every dtype with a 0-element tensor and a scalar") {
  TempDir dir("st");
  const fs::path p = dir / "model.safetensors";
  Sample s = sample();
  SafetensorsWriter w;
  for (const auto& [name, t] : s.tensors) w.add(name, t);
  w.set_metadata({{"format", "pt"}, {"step", "100"}, {"note", "ünïcode ok"}});
  CHECK(w.size() == 10);
  const uint32_t crc = w.write(p);

  SafetensorsReader r(p);
  std::vector<std::string> expected_names;
  for (const auto& [name, t] : s.tensors) expected_names.push_back(name);
  CHECK(r.names() == expected_names);  // file order is insertion order
  CHECK(r.metadata() == SafetensorsMetadata{{"format", "pt"}, {"step", "100"}, {"note", "ünïcode ok"}});
  for (const auto& [tensor_name, t] : s.tensors) {
    const std::string& name = tensor_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(name);
    REQUIRE(r.contains(name));
    CHECK(r.info(name).dtype == t.dtype());
    CHECK(r.info(name).shape == t.shape());
    CHECK(r.info(name).nbytes() == t.nbytes());
    Tensor back = r.read(name);
    CHECK(same_bytes(back, t));
  }
  CHECK(r.info("scalar").shape.empty());
  CHECK(r.read("scalar").data<float>()[0] == 42.5f);
  CHECK(r.read("empty").numel() == 0);
  CHECK(!r.contains("missing"));
  CHECK(r.file_size() == fs::file_size(p));

  const std::string bytes = dl::test::read_file(p);
  CHECK(crc == crc32c(bytes.data(), bytes.size()));
  CHECK(r.crc32c_of_file() == crc);
}

TEST_CASE("safetensors header layout: starts with '{' and is padded to 8 with contiguous offsets in insertion order") {
  TempDir dir("st");
  const fs::path p = dir / "x.safetensors";
  Sample s = sample();
  SafetensorsWriter w;
  for (const auto& [name, t] : s.tensors) w.add(name, t);
  w.set_metadata({{"format", "pt"}});
  w.write(p);
  const std::string bytes = dl::test::read_file(p);
  const uint64_t n = u64_le(bytes, 0);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  const std::string header = bytes.substr(8, n);
  CHECK(header.find_last_not_of(' ') == header.find_last_of('}'));  // only spaces after the JSON
  const json h = json::parse(header);
  CHECK(h["__metadata__"] == json{{"format", "pt"}});
  uint64_t offset = 0;
  for (const auto& [tensor_name, t] : s.tensors) {
    const std::string& name = tensor_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(name);
    const json& e = h.at(name);
    CHECK(e["dtype"] == std::string(safetensors_dtype(t.dtype())));
    CHECK(e["shape"].get<Shape>() == t.shape());
    CHECK(e["data_offsets"][0].get<uint64_t>() == offset);
    offset += t.nbytes();
    CHECK(e["data_offsets"][1].get<uint64_t>() == offset);
  }
  CHECK(bytes.size() == 8 + n + offset);
  CHECK(w.data_bytes() == offset);
}

TEST_CASE("safetensors add_raw and read_into with its dtype and shape check") {
  TempDir dir("st");
  const fs::path p = dir / "opt.safetensors";
  std::vector<float> m = {1, 2, 3, 4, 5, 6};
  SafetensorsWriter w;
  w.add_raw("exp_avg", DType::f32, {2, 3}, m.data());
  w.write(p);
  SafetensorsReader r(p);
  Tensor dst = Tensor::zeros({2, 3}, DType::f32);
  r.read_into("exp_avg", dst);
  for (int i = 0; i < 6; ++i) CHECK(dst.data<float>()[i] == m[i]);
  CHECK(r.metadata().empty());

  Tensor wrong = Tensor::zeros({3, 2}, DType::f32);
  try {
    r.read_into("exp_avg", wrong);
    FAIL("expected a shape mismatch");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(has(e.what(), "'exp_avg' is F32[2,3] in the file but the destination is F32[3,2]"));
  }
  Tensor wrong_type = Tensor::zeros({2, 3}, DType::f64);
  CHECK_THROWS_AS(r.read_into("exp_avg", wrong_type), Error);
  try {
    r.read("nope");
    FAIL("expected a missing-tensor error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(has(e.what(), "no tensor named 'nope'"));
  }
}

TEST_CASE("safetensors writer rejects duplicate and reserved names") {
  Tensor t = Tensor::zeros({1}, DType::f32);
  SafetensorsWriter w;
  w.add("a", t);
  CHECK_THROWS_AS(w.add("a", t), Error);
  CHECK_THROWS_AS(w.add("__metadata__", t), Error);
  CHECK_THROWS_AS(w.add("", t), Error);
  CHECK(w.size() == 1);
}

TEST_CASE("safetensors reads one tensor of a file larger than memory") {
  // A sparse file: the header describes a 64 GiB U8 tensor followed by a small F32 one. Opening
  // and reading the small one must touch only the header and those 16 bytes.
  TempDir dir("st");
  const fs::path p = dir / "huge.safetensors";
  const uint64_t big = uint64_t(1) << 36;
  std::string header = json{{"big", {{"dtype", "U8"}, {"shape", {big}}, {"data_offsets", {0, big}}}},
                            {"tail", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {big, big + 16}}}}}
                           .dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string prefix = u64_bytes(header.size()) + header;
  dl::test::write_file(p, prefix);
  const float tail[4] = {1.5f, -2.0f, 3.25f, 1e-3f};
  int fd = ::open(p.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, tail, 16, static_cast<off_t>(prefix.size() + big)) == 16);
  ::close(fd);
  REQUIRE(fs::file_size(p) == prefix.size() + big + 16);

  SafetensorsReader r(p);
  CHECK(r.names() == std::vector<std::string>{"big", "tail"});
  CHECK(r.info("big").nbytes() == big);
  Tensor t = r.read("tail");
  for (int i = 0; i < 4; ++i) CHECK(t.data<float>()[i] == tail[i]);
}

TEST_CASE("safetensors corruption is a usage error naming the file and the tensor") {
  TempDir dir("st");
  const std::string f32x4(16, '\0');
  const std::string ok_entry = R"("a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})";

  SUBCASE("file shorter than the length field") {
    const fs::path p = dir / "tiny.safetensors";
    dl::test::write_file(p, "abc");
    CHECK(has(open_error(p), "too short"));
  }
  SUBCASE("truncated header") {
    const fs::path p = dir / "trunc_header.safetensors";
    std::string header = "{" + ok_entry + "}";
    dl::test::write_file(p, u64_bytes(header.size() + 8) + header.substr(0, header.size() - 3));
    CHECK(has(open_error(p), "header length field says"));
  }
  SUBCASE("header length larger than the file") {
    const fs::path p = dir / "huge_len.safetensors";
    dl::test::write_file(p, u64_bytes(uint64_t(1) << 40) + "{}      ");
    const std::string msg = open_error(p);
    CHECK(has(msg, "1099511627776"));
    CHECK(has(msg, "corrupt"));
  }
  SUBCASE("header over the 100 MB limit") {
    // A sparse 101 MB file, so the length fits the file but is still refused.
    const fs::path p = dir / "big_header.safetensors";
    dl::test::write_file(p, u64_bytes(101'000'000) + "{");
    fs::resize_file(p, 8 + 101'000'000);
    CHECK(has(open_error(p), "limit"));
  }
  SUBCASE("truncated data") {
    const fs::path p = write_raw(dir / "trunc.safetensors", "{" + ok_entry + "}", f32x4.substr(0, 12));
    CHECK(has(open_error(p), "data section holds 12 bytes but the header describes 16 (the file is truncated)"));
  }
  SUBCASE("bytes after the last tensor") {
    const fs::path p = write_raw(dir / "trailing.safetensors", "{" + ok_entry + "}", f32x4 + "xx");
    CHECK(has(open_error(p), "2 bytes after the last tensor"));
  }
  SUBCASE("invalid JSON") {
    const fs::path p = write_raw(dir / "badjson.safetensors", R"({"a": {"dtype": "F32",)", "");
    CHECK(has(open_error(p), "not valid JSON"));
  }
  SUBCASE("a number too large for a double") {
    // Found by fuzz_safetensors (corpus/fuzz_safetensors/found-number-overflow.bin): JSON's
    // out_of_range escaped the reader as an uncaught exception instead of a usage error.
    const fs::path p = write_raw(dir / "huge.safetensors", R"({"a": {"dtype": "F32", "shape": [1e555], "data_offsets": [0, 0]}})", "");
    CHECK(has(open_error(p), "huge.safetensors: the header is not valid JSON ([json.exception.out_of_range.406] number overflow"));
  }
  SUBCASE("header not starting with '{'") {
    const fs::path p = write_raw(dir / "space.safetensors", " {" + ok_entry + "}", f32x4);
    CHECK(has(open_error(p), "does not start with '{'"));
  }
  SUBCASE("header is an array") {
    const fs::path p = write_raw(dir / "array.safetensors", "[1,2]", "");
    CHECK(has(open_error(p), "does not start with '{'"));
  }
  SUBCASE("unknown dtype") {
    const fs::path p = write_raw(dir / "fp8.safetensors",
                                 R"({"w.q": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})",
                                 std::string(4, '\0'));
    const std::string msg = open_error(p);
    CHECK(has(msg, "tensor 'w.q': dtype 'F8_E4M3' is not supported"));
    CHECK(has(msg, "F32, F64, BF16, F16, I32, I64, U8, U16"));
  }
  SUBCASE("negative dimension") {
    const fs::path p = write_raw(dir / "neg.safetensors",
                                 R"({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", f32x4);
    CHECK(has(open_error(p), "tensor 'a': shape [-4] must hold non-negative integers"));
  }
  SUBCASE("offsets with a hole") {
    const fs::path p = write_raw(
        dir / "hole.safetensors",
        "{" + ok_entry + R"(, "b": {"dtype": "F32", "shape": [4], "data_offsets": [20, 36]}})",
        std::string(36, '\0'));
    const std::string msg = open_error(p);
    CHECK(has(msg, "tensor 'b': data_offsets [20, 36] leave bytes [16, 20) after tensor 'a' unused"));
  }
  SUBCASE("first tensor not at offset 0") {
    const fs::path p = write_raw(dir / "start.safetensors",
                                 R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                                 std::string(24, '\0'));
    CHECK(has(open_error(p), "tensor 'a': data_offsets [8, 24] but the first tensor must start at offset 0"));
  }
  SUBCASE("overlapping offsets") {
    const fs::path p = write_raw(
        dir / "overlap.safetensors",
        "{" + ok_entry + R"(, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
        std::string(24, '\0'));
    CHECK(has(open_error(p), "tensor 'b': data_offsets [8, 24] overlap tensor 'a' at [0, 16]"));
  }
  SUBCASE("wrong byte count for the shape") {
    const fs::path p = write_raw(
        dir / "model.safetensors",
        R"({"h.0.ln_1.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})",
        std::string(12, '\0'));
    CHECK(has(open_error(p),
              "model.safetensors: tensor 'h.0.ln_1.weight': data_offsets [0, 12] hold 12 bytes but F32[4] needs 16"
              " — the file is corrupt or was written by an incompatible tool"));
  }
  SUBCASE("missing data_offsets") {
    const fs::path p = write_raw(dir / "nooff.safetensors", R"({"a": {"dtype": "F32", "shape": [4]}})", f32x4);
    CHECK(has(open_error(p), "tensor 'a': \"data_offsets\" must be"));
  }
  SUBCASE("metadata with a non-string value") {
    const fs::path p = write_raw(dir / "meta.safetensors", R"({"__metadata__": {"step": 100}})", "");
    CHECK(has(open_error(p), "\"__metadata__\" entry 'step' is not a string"));
  }
  SUBCASE("missing file") {
    const fs::path p = dir / "absent.safetensors";
    CHECK(has(open_error(p), "no such file"));
  }
}

TEST_CASE("safetensors accepts an unpadded header and an empty file of tensors") {
  TempDir dir("st");
  // Older writers did not pad; the format's readers accept that, so dlkit does too.
  const fs::path p = write_raw(dir / "unpadded.safetensors",
                               R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", "xyz", false);
  SafetensorsReader r(p);
  CHECK(r.header_bytes() % 8 != 0);
  Tensor t = r.read("a");
  CHECK(std::string(static_cast<const char*>(t.raw()), 3) == "xyz");

  SafetensorsWriter w;
  w.write(dir / "none.safetensors");
  SafetensorsReader r2(dir / "none.safetensors");
  CHECK(r2.names().empty());
  CHECK(dl::test::read_file(dir / "none.safetensors") == u64_bytes(8) + "{}      ");
}

TEST_CASE("an independent Python reader agrees with what dlkit wrote") {
  TempDir dir("st");
  const fs::path p = dir / "check.safetensors";
  Sample s = sample();
  SafetensorsWriter w;
  for (const auto& [name, t] : s.tensors) w.add(name, t);
  w.set_metadata({{"format", "pt"}});
  w.write(p);

  auto r = dl::test::run(dl::test::torch_python(),
                         {dl::test::source_path("tests/scripts/check_safetensors.py").string(), p.string()});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const json got = json::parse(r.out);
  CHECK(got["__metadata__"] == json{{"format", "pt"}});
  CHECK(got.size() == s.tensors.size() + 1);
  for (const auto& [tensor_name, t] : s.tensors) {
    const std::string& name = tensor_name;  // clang 14: a structured binding cannot be captured (CAPTURE)
    CAPTURE(name);
    REQUIRE(got.contains(name));
    CHECK(got[name]["dtype"] == std::string(safetensors_dtype(t.dtype())));
    CHECK(got[name]["shape"].get<Shape>() == t.shape());
    const double sum = got[name]["sum"].get<double>();
    if (t.dtype() == DType::f16) CHECK(sum == 2.5);  // 1 + 2 - 0.5
    else CHECK(sum == doctest::Approx(sum_of(t)).epsilon(1e-12));
  }
  CHECK(got["bf16"]["sum"].get<double>() == 2.640625);  // 1 + 0.5 - 2 + 3.140625
  CHECK(got["scalar"]["sum"].get<double>() == 42.5);
  CHECK(got["empty"]["sum"].get<double>() == 0.0);

  // The script is strict: a hand-made file with a hole must make it fail.
  const fs::path bad = write_raw(
      dir / "hole.safetensors",
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
      std::string(12, '\0'));
  auto rb = dl::test::run(dl::test::torch_python(),
                          {dl::test::source_path("tests/scripts/check_safetensors.py").string(), bad.string()});
  CHECK(rb.exit_code != 0);
  CHECK(has(rb.err, "'b'"));
}
