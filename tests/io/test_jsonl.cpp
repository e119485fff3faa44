#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/io/jsonl.hpp"
#include "support/support.hpp"

using namespace dl;
using dl::test::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

TEST_CASE("jsonl round trip with one line per record and appending across writers") {
  TempDir dir("jsonl");
  const fs::path p = dir / "metrics.jsonl";
  {
    JsonlWriter w(p);
    w.write(json{{"step", 1}, {"loss", 2.5}});
    w.write(json{{"step", 2}, {"loss", 2.25}, {"tag", "train"}});
  }
  {
    JsonlWriter w(p);  // a resumed run appends
    nlohmann::ordered_json o;
    o["step"] = 3;
    o["loss"] = 2.0;
    w.write_ordered(o);
  }
  CHECK(dl::test::read_file(p) ==
        "{\"loss\":2.5,\"step\":1}\n{\"loss\":2.25,\"step\":2,\"tag\":\"train\"}\n{\"step\":3,\"loss\":2.0}\n");
  const auto recs = read_jsonl(p);
  REQUIRE(recs.size() == 3);
  CHECK(recs[0] == json{{"step", 1}, {"loss", 2.5}});
  CHECK(recs[1]["tag"] == "train");
  CHECK(recs[2]["step"] == 3);
  CHECK(recs[2]["loss"].get<double>() == 2.0);
}

TEST_CASE("jsonl malformed line is a usage error with its line number") {
  TempDir dir("jsonl");
  const fs::path p = dir / "metrics.jsonl";
  dl::test::write_file(p, "{\"step\":1}\n\n{\"step\":2}\n{\"step\":3,}\n{\"step\":4}\n");
  try {
    read_jsonl(p);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    const std::string msg = e.what();
    CHECK(msg.find(p.string() + ":4:") != std::string::npos);  // blank line 2 still counts
    CHECK(msg.find("{\"step\":3,}") != std::string::npos);
  }
  try {
    read_jsonl(dir / "absent.jsonl");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("absent.jsonl") != std::string::npos);
  }
}

TEST_CASE("jsonl torn last line from a crash is skipped when reading and repaired when appending") {
  TempDir dir("jsonl");
  const fs::path p = dir / "metrics.jsonl";
  dl::test::write_file(p, "{\"step\":1}\n{\"step\":2,\"lo");
  CHECK(read_jsonl(p).size() == 1);
  {
    JsonlWriter w(p);
    w.write(json{{"step", 2}});
  }
  CHECK(dl::test::read_file(p) == "{\"step\":1}\n{\"step\":2}\n");

  // A complete record that only lacks its newline is kept.
  dl::test::write_file(p, "{\"step\":1}");
  {
    JsonlWriter w(p);
    w.write(json{{"step", 2}});
  }
  CHECK(dl::test::read_file(p) == "{\"step\":1}\n{\"step\":2}\n");
}

TEST_CASE("rewrite_jsonl_keep keeps exactly the selected lines byte for byte") {
  TempDir dir("jsonl");
  const fs::path p = dir / "metrics.jsonl";
  std::string all, expected;
  for (int step = 0; step < 10; ++step) {
    // Keys in a non-sorted order: kept lines must not be re-serialized.
    const std::string line = "{\"step\": " + std::to_string(step) + ", \"loss\": " + std::to_string(10 - step) + "}";
    all += line + "\n";
    if (step <= 5) expected += line + "\n";
  }
  dl::test::write_file(p, all);
  rewrite_jsonl_keep(p, [](const json& j) { return j["step"].get<int>() <= 5; });
  CHECK(dl::test::read_file(p) == expected);
  CHECK(read_jsonl(p).size() == 6);
  rewrite_jsonl_keep(p, [](const json&) { return false; });
  CHECK(dl::test::read_file(p).empty());
  CHECK(!fs::exists(dir / "metrics.jsonl.tmp"));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 1);
}
