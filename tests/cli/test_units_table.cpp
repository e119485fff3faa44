#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "dl/cli/table.hpp"
#include "dl/cli/units.hpp"
#include "dl/core/error.hpp"

using namespace dl;

TEST_CASE("sizes: decimal, binary, bare prefixes") {
  CHECK(parse_size("80GB", "x") == 80e9);
  CHECK(parse_size("80GiB", "x") == 80.0 * 1024 * 1024 * 1024);
  CHECK(parse_size("512 MiB", "x") == 512.0 * 1024 * 1024);
  CHECK(parse_size("4096B", "x") == 4096);
  CHECK(parse_size("1.5TB", "x") == 1.5e12);
  CHECK(parse_size("128M", "x") == 128e6);
  CHECK(parse_size("128M", "x", true) == 128.0 * 1024 * 1024);
  CHECK(parse_size("128MB", "x", true) == 128e6);  // written-out "B" stays decimal
  CHECK(parse_size("8", "x", true) == 8);
  CHECK(parse_size("2k", "x") == 2000);
  CHECK_THROWS_AS(parse_size("80XB", "--gpu-mem"), Error);
  CHECK_THROWS_AS(parse_size("abc", "--gpu-mem"), Error);
  CHECK_THROWS_AS(parse_size("-5GB", "--gpu-mem"), Error);
  // A memory size needs a unit; a message size (binary_bare) is nccl-tests' bare bytes.
  try {
    parse_size("80", "--gpu-mem");
    FAIL("a bare 80 was read as a memory size");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()) == "--gpu-mem: '80' has no unit: write 80GB or 80GiB (80B if bytes are meant)");
  }
  try {
    parse_size("80XB", "--gpu-mem");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("--gpu-mem") != std::string::npos);
  }
}

TEST_CASE("counts and hours") {
  CHECK(parse_count("7.5e9", "x") == 7.5e9);
  CHECK(parse_count("1.5B", "x") == 1.5e9);
  CHECK(parse_count("124M", "x") == 124e6);
  CHECK(parse_count("350k", "x") == 350e3);
  CHECK(parse_count("1,000,000", "x") == 1e6);
  CHECK(parse_count("2T", "x") == 2e12);
  CHECK_THROWS_AS(parse_count("3Q", "x"), Error);
  CHECK(parse_hours("36", "x") == 36);
  CHECK(parse_hours("90m", "x") == 1.5);
  CHECK(parse_hours("2d", "x") == 48);
  CHECK_THROWS_AS(parse_hours("-1", "x"), Error);
}

TEST_CASE("table renders every format with the same rows") {
  Table t({{"name", "name", false}, {"size", "size (bytes)", true}, {"ok", "ok", false}});
  t.add_row({Cell::str("a,b"), Cell::num(1.5e9, format_bytes(1.5e9)), Cell::boolean(true)});
  t.add_row({Cell::str("plain"), Cell::integer(42), Cell::null()});
  t.add_note("# a note");
  auto json = nlohmann::json::parse(t.render(OutputFormat::json));
  REQUIRE(json.size() == 2);
  CHECK(json[0]["name"] == "a,b");
  CHECK(json[0]["size"] == 1.5e9);
  CHECK(json[1]["ok"].is_null());
  std::string jsonl = t.render(OutputFormat::jsonl);
  CHECK(std::count(jsonl.begin(), jsonl.end(), '\n') == 2);
  CHECK(nlohmann::json::parse(jsonl.substr(0, jsonl.find('\n')))["size"] == 1.5e9);
  std::string csv = t.render(OutputFormat::csv);
  CHECK(csv == "name,size,ok\n\"a,b\",1500000000,true\nplain,42,\n");
  std::string table = t.render(OutputFormat::table);
  CHECK(table.find("1.50 GB") != std::string::npos);
  CHECK(table.find("# a note") != std::string::npos);
  std::string md = t.render(OutputFormat::md);
  CHECK(md.find("| name | size (bytes) | ok |") == 0);
  CHECK(md.find("| --- | ---: | --- |") != std::string::npos);
  CHECK_THROWS_AS(parse_output_format("xml"), Error);
}

TEST_CASE("human number formats") {
  CHECK(format_bytes(80e9) == "80.0 GB");
  CHECK(format_bytes(1024.0 * 1024 * 1024, true) == "1.00 GiB");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_si(23456, "tok/s") == "23.5 ktok/s");
  CHECK(format_duration(0.00123) == "1.23 ms");
  CHECK(format_duration(3725) == "1h02m");
}

TEST_CASE("table and md show a cell's control bytes as \\xNN; json escapes them; csv keeps the bytes") {
  Table t({{"name", "name", false}, {"n", "n", true}});
  t.add_row({Cell::str("gpu\x1b[2Jx"), Cell::integer(1)});
  t.add_note("from \x1b]0;t\x07 a file");
  for (OutputFormat f : {OutputFormat::table, OutputFormat::md}) {
    const std::string s = t.render(f);
    CAPTURE(s);
    CHECK(s.find('\x1b') == std::string::npos);
    CHECK(s.find("gpu\\x1b[2Jx") != std::string::npos);
    CHECK(s.find("from \\x1b]0;t\\x07 a file") != std::string::npos);
  }
  CHECK(nlohmann::json::parse(t.render(OutputFormat::json))[0]["name"] == "gpu\x1b[2Jx");
  CHECK(t.render(OutputFormat::csv).find("gpu\x1b[2Jx") != std::string::npos);
}

TEST_CASE("a table without headers (key and value) starts with its first row; a headed one has no trailing spaces") {
  Table kv({{"key", "", false}, {"value", "", false}});
  kv.add_row({Cell::str("steps"), Cell::integer(3)});
  kv.add_row({Cell::str("train_loss"), Cell::str("5.3978")});
  CHECK(kv.render(OutputFormat::table) == "steps       3\ntrain_loss  5.3978\n");  // was a line of 18 spaces first
  Table t({{"name", "name", false}, {"note", "note", false}});
  t.add_row({Cell::str("a-long-name"), Cell::str("x")});
  CHECK(t.render(OutputFormat::table) == "name         note\na-long-name  x\n");
}
