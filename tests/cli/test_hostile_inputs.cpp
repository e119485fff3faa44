// Hostile inputs run through the real tools (docs/RELIABILITY.md, "Hostile inputs"). The stated
// answer for each: exit 2 within seconds, a message on stderr naming the file and the field that
// is wrong, and nothing written (no output file, no run directory, nothing run).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "support/support.hpp"

using namespace dl::test;
namespace fs = std::filesystem;

namespace {


// A tool run that must not hang: a FIFO or /dev/zero that were waited on or read would time out.
RunResult run_bounded(const std::string& name, const std::vector<std::string>& args) {
  return run(tool(name), args, "", {}, 60);
}

void expect_refused(const RunResult& r, const std::vector<std::string>& parts) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  for (const auto& p : parts) CHECK(has(r.err, p));
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A safetensors file from a header (padded to 8 bytes) and a data section.
std::string safetensors(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return u64_le(header.size()) + header + data;
}

// A single-process checkpoint folder whose manifest is `manifest` (model.safetensors beside it).
fs::path checkpoint(const TempDir& d, const nlohmann::json& manifest) {
  const fs::path dir = d / "ckpt" / "step_00000001";
  fs::create_directories(dir);
  write_file(dir / "model.safetensors",
             safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  write_file(dir / "trainer_state.json", manifest.dump(1));
  return dir;
}

nlohmann::json manifest_naming(const std::string& file) {
  return {{"format", "dlkit-checkpoint"},
          {"version", 2},
          {"model_type", "mlp"},
          {"step", 1},
          {"tensors", {{"w", {{"shape", {2}}, {"dtype", "F32"}}}}},
          {"pieces",
           {{{"name", "w"}, {"kind", "param"}, {"file", file}, {"key", "w"}, {"slice", {{"dim", -1}, {"segments", nlohmann::json::array()}}},
             {"range", {0, 2}}}}},
          {"files", {{file, {{"crc32c", 0}, {"bytes", 8}}}}}};
}

}  // namespace

TEST_CASE("hostile safetensors: a header claiming terabytes, offsets past the end, overlapping offsets") {
  TempDir d("hostile-st");
  struct Case {
    std::string name, bytes;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"length field of 1 TiB", u64_le(uint64_t{1} << 40) + "{}      ",
       {"tb.safetensors", "the header length field says 1099511627776 bytes but the file has only 8"}},
      {"a tensor of 4 TB", safetensors(R"({"big":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})", "abcd"),
       {"tb.safetensors", "the data section holds 4 bytes but the header describes 4000000000000"}},
      {"offsets past the end", safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, 'x')),
       {"tb.safetensors", "holds 8 bytes but the header describes 16 (the file is truncated)"}},
      {"offsets overlapping",
       safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   std::string(12, 'x')),
       {"tb.safetensors", "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]"}},
      {"offsets wrapping around 2^64",
       safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", "x"),
       {"tb.safetensors", "tensor 'a': data_offsets [18446744073709551615, 0] end before they begin"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    write_file(d / "tb.safetensors", c.bytes);
    expect_refused(run_bounded("dl-shard", {"inspect", (d / "tb.safetensors").string()}), c.expect);
  }
}

TEST_CASE("hostile checkpoint manifest: a file outside its folder is never opened") {
  TempDir d("hostile-ckpt");
  // The file the manifest points at exists, so only the manifest check can refuse it.
  write_file(d / "ckpt" / "secret.safetensors",
             safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  for (const std::string file : {"../secret.safetensors", "shards/../../secret.safetensors", "/etc/passwd"}) {
    CAPTURE(file);
    const fs::path dir = checkpoint(d, manifest_naming(file));
    const std::string field = "trainer_state.json: files[\"" + file + "\"]: names a file outside the checkpoint folder";
    expect_refused(run_bounded("dl-shard", {"inspect", dir.string()}), {field});
    expect_refused(run_bounded("dl-shard", {"merge", dir.string(), "-o", (d / "merged.safetensors").string()}), {field});
    CHECK(!fs::exists(d / "merged.safetensors"));
  }
  // A piece whose slice lies outside its tensor (dim 3 of a 1-D tensor) is refused before any copy.
  nlohmann::json m = manifest_naming("model.safetensors");
  m["pieces"][0]["slice"] = {{"dim", 3}, {"segments", {{0, 2}}}};
  const fs::path dir = checkpoint(d, m);
  expect_refused(run_bounded("dl-shard", {"merge", dir.string(), "-o", (d / "merged.safetensors").string()}),
                 {"trainer_state.json: pieces[0].slice.dim: 3 is outside [-1, 0]"});
  CHECK(!fs::exists(d / "merged.safetensors"));
}

TEST_CASE("hostile token shard: a header that lies about its token count") {
  TempDir d("hostile-tok");
  // llm.c header claiming 2^31 - 1 tokens over 100 tokens of data.
  std::string shard(1024 + 2 * 100, '\0');
  const int32_t header[3] = {20240520, 1, 2147483647};
  std::memcpy(shard.data(), header, sizeof header);
  write_file(d / "lie.bin", shard);
  write_file(d / "c.toml", "[model]\ntype = \"gpt\"\nn_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 8\n"
                           "[data]\nsource = \"tokens:" + (d / "lie.bin").string() + "\"\n[train]\nsteps = 2\nbatch_size = 2\n");
  expect_refused(run_bounded("dl-train", {(d / "c.toml").string(), "--run-dir", (d / "run").string()}),
                 {"lie.bin", "header says 2147483647 tokens but the file holds 100"});
  CHECK(!fs::exists(d / "run"));
}

TEST_CASE("hostile lock file: package names with shell syntax never reach a shell or apt-get") {
  TempDir d("hostile-lock");
  const std::string header = "[header]\nformat = \"dlkit-envlock/1\"\n\n[lock]\nkind = \"resolved\"\n\n";
  struct Case {
    std::string name, deb_line, expect;
  };
  const std::vector<Case> cases = {
      {"command separator", "\"libfoo; touch " + (d / "pwned").string() + "\" = \"1.0\"",
       "deb.\"libfoo; touch "},
      {"an apt-get option", "\"-oAPT::Update::Pre-Invoke::=touch pwned\" = \"1.0\"", "deb.\"-oAPT::Update::Pre-Invoke::=touch pwned\""},
      {"a line break", "\"libfoo\\ntouch pwned\" = \"1.0\"", "deb.\"libfoo\\ntouch pwned\""},
      {"a version with shell syntax", "libfoo = \"1.0 $(touch pwned)\"", "deb.libfoo: version \"1.0 $(touch pwned)\""},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    write_file(d / "bad.lock", header + "[deb]\n" + c.deb_line + "\n");
    for (const char* mode : {"--dry-run", "--yes"}) {
      RunResult r = run_bounded("dl-envlock", {"sync", (d / "bad.lock").string(), mode});
      expect_refused(r, {"bad.lock:8: " + c.expect, "dl-envlock sync will not pass it to apt-get or pip"});
      CHECK(r.out.empty());  // no plan printed, nothing run
    }
    CHECK(!fs::exists(d / "pwned"));
  }
  // A valid lock: the exact argv dl-envlock would run, one element per package pin, never a
  // command line (json prints the vector; '+' and '~' are ordinary characters in it).
  write_file(d / "ok.lock", header + "[deb]\n\"libstdc++6\" = \"12.2.0-14~test1\"\n");
  RunResult r = run_bounded("dl-envlock", {"sync", (d / "ok.lock").string(), "--format", "json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto plan = nlohmann::json::parse(r.out);
  std::vector<std::string> argv = plan["apt_command"];
  if (!argv.empty() && argv[0] == "sudo") argv.erase(argv.begin());
  REQUIRE(argv.size() >= 4);  // --allow-downgrades sits between them when the installed one is newer
  CHECK(std::vector<std::string>(argv.begin(), argv.begin() + 3) == std::vector<std::string>{"apt-get", "install", "-y"});
  CHECK(argv.back() == "libstdc++6=12.2.0-14~test1");
}

TEST_CASE("hostile paths: a FIFO or /dev/zero where a file belongs is refused at once") {
  TempDir d("hostile-fifo");
  const fs::path fifo = d / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  write_file(d / "ok.toml", "[model]\ntype = \"gpt\"\n[data]\nsource = \"synthetic:addition\"\n");
  auto with_source = [&](const std::string& source) {
    write_file(d / "c.toml", "[model]\ntype = \"gpt\"\n[data]\nsource = \"" + source + "\"\n");
    return (d / "c.toml").string();
  };
  struct Case {
    std::string name, tool;
    std::vector<std::string> args, expect;
  };
  const std::vector<Case> cases = {
      {"config is a FIFO", "dl-train", {fifo.string(), "--run-dir", (d / "run").string()},
       {fifo.string(), "not a regular file (it is a FIFO)"}},
      {"config is /dev/zero", "dl-train", {"/dev/zero", "--run-dir", (d / "run").string()},
       {"/dev/zero", "not a regular file (it is a character device)"}},
      {"data.source is /dev/zero", "dl-train", {with_source("text:/dev/zero"), "--run-dir", (d / "run").string()},
       {"data.source", "not a regular file: /dev/zero"}},
      {"lock is a FIFO", "dl-envlock", {"check", fifo.string()}, {fifo.string(), "not a regular file (it is a FIFO)"}},
      {"catalog is a FIFO", "dl-cost", {"estimate", "--flops", "1e18", "--catalog", fifo.string()},
       {fifo.string(), "not a regular file (it is a FIFO)"}},
      {"dl-bench rows are /dev/zero", "dl-shard",
       {"plan", "--params", "1.5B", "--gpus", "8", "--gpu-mem", "80GiB", "--bench", "/dev/zero"},
       {"/dev/zero", "not a regular file (it is a character device)"}},
      {"safetensors is a FIFO", "dl-shard", {"inspect", fifo.string()}, {fifo.string(), "not a file or a directory"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    expect_refused(run_bounded(c.tool, c.args), c.expect);
    CHECK(!fs::exists(d / "run"));
  }
}

TEST_CASE("hostile text: escape bytes from a file reach the terminal as \\x1b, never raw") {
  TempDir d("hostile-escapes");
  // A key and a value carrying a terminal title change and a colour (TOML's \u escapes make the
  // bytes): the errors quote both.
  const std::string evil = "\\u001b]0;owned\\u0007\\u001b[31m";
  write_file(d / "key.toml", "[model]\ntype = \"gpt\"\n\"n_layer" + evil + "\" = 2\n");
  write_file(d / "value.toml", "[model]\ntype = \"gpt" + evil + "\"\n");
  for (const char* config : {"key.toml", "value.toml"}) {
    CAPTURE(config);
    RunResult r = run(tool("dl-train"), {(d / config).string(), "--run-dir", (d / "run").string()});
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find('\x1b') == std::string::npos);
    CHECK(r.err.find('\x07') == std::string::npos);
    CHECK((has(r.err, "\\x1b]0;owned\\x07") || has(r.err, "\\u001b]0;owned\\u0007")));  // shown, escaped
    CHECK(!fs::exists(d / "run"));
  }
}

TEST_CASE("one command-line grammar: CLI11's refusals read 'TOOL: error:' with a did-you-mean, exit 2") {
  struct Case {
    std::string tool;
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      // It said "A subcommand is required", without the tool's name or the near miss.
      {"dl-envlock", {"chek", "env.lock"}, "error: unknown subcommand chek (did you mean 'check'?)"},
      {"dl-shard", {"plam", "--params", "124M"}, "(did you mean 'plan'?)"},
      // It said "The following arguments were not expected: 20 --stpes".
      {"dl-train", {"configs/addition.toml", "--stpes", "20"}, "(did you mean '--steps'?)"},
      {"dl-cost", {"estimate", "--flops", "1e18", "--catalgo", "x.csv"}, "(did you mean '--catalog'?)"},
      // dl-train's first positional is a config: a near miss of a subcommand that is no file said
      // "config file not found: evl".
      {"dl-train", {"evl", "--run-dir", "runs/x"}, "error: unknown subcommand evl (did you mean 'eval'?)"},
      {"dl-bench", {"gem"}, "(did you mean 'gemm'?)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.tool);
    RunResult r = run(tool(c.tool), c.args);
    INFO("stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind(c.tool + ": error: ", 0) == 0);
    CHECK(has(r.err, c.expect));
    CHECK(r.out.empty());
  }
  RunResult help = run(tool("dl-envlock"), {"--help"});
  CHECK(help.exit_code == 0);
  CHECK(has(help.out, "check"));
}
