#include <doctest/doctest.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/env/lock.hpp"
#include "support/support.hpp"

using namespace dl;

namespace {

Lock sample_lock() {
  Lock l;
  l.header.created_by = "dl-envlock test";
  l.header.date = "2026-01-02T03:04:05Z";
  l.header.host = "box";
  l.add({"system", "os"}, "debian");
  l.add({"system", "os-version"}, "12");
  Component& rt = l.add({"cuda", "runtime"}, "13.0");
  rt.set("code", int64_t{13000});
  rt.set("library", "/usr/local/cuda/lib/libcudart.so.13");
  l.add({"driver"}, "none").set("source", "none");
  l.add({"gpu", "count"}, "0");
  l.add({"deb", "libopenblas-dev"}, "0.3.21+ds-4");
  l.add({"deb", "version"}, "1.0-1");  // a package named like the table key
  l.add({"deb", "libssl3:amd64"}, "3.0.19-1~deb12u2");
  l.add({"python", "/usr/bin/python3"}, "3.11.2").set("executable", "/usr/bin/python3");
  l.add({"python", "/usr/bin/python3", "packages", "numpy"}, "1.24.2");
  l.add({"python", "/usr/bin/python3", "packages", "version"}, "0.1");
  l.add({"loaded", "/lib/x86_64-linux-gnu/libc.so.6"}, "sha256:abcd");
  l.set_probe("driver", "not found: no nvidia-smi on PATH");
  l.set_probe("python:/usr/bin/python3", "ok");
  seal(l);
  return l;
}

std::string usage_error(const std::string& text) {
  try {
    parse_lock(text, "x.lock");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("lock: TOML keys and schemes") {
  CHECK(toml_key({"python", "/usr/bin/python3", "packages", "numpy"}) == "python.\"/usr/bin/python3\".packages.numpy");
  CHECK(toml_key({"deb", "libssl3:amd64"}) == "deb.\"libssl3:amd64\"");
  CHECK(toml_key({"cuda", "cudnn"}) == "cuda.cudnn");
  CHECK(plain_key({"python", "/usr/bin/python3", "packages", "numpy"}) == "python./usr/bin/python3.packages.numpy");
  CHECK(toml_string("a\"b\\c\n\x01") == "\"a\\\"b\\\\c\\n\\u0001\"");
  CHECK(scheme_for({"deb", "x"}) == Scheme::dpkg);
  CHECK(scheme_for({"python", "p", "packages", "numpy"}) == Scheme::pep440);
  CHECK(scheme_for({"python", "p"}) == Scheme::pep440);
  CHECK(scheme_for({"loaded", "/lib/x.so"}) == Scheme::hash);
  CHECK(scheme_for({"system", "cpu-flags"}) == Scheme::set);
  CHECK(scheme_for({"system", "cpu"}) == Scheme::text);
  CHECK(scheme_for({"gpu", "0", "name"}) == Scheme::text);
  CHECK(scheme_for({"cuda", "cudnn"}) == Scheme::numeric);
  CHECK(scheme_for({"driver"}) == Scheme::numeric);
}

TEST_CASE("lock: write, read back, same content and hash") {
  Lock l = sample_lock();
  std::string text = lock_to_toml(l);
  CHECK(text.find("[cuda.runtime]\nversion = \"13.0\"\ncode = 13000\n") != std::string::npos);
  CHECK(text.find("[deb]\nlibopenblas-dev = \"0.3.21+ds-4\"\nversion = \"1.0-1\"\n\"libssl3:amd64\"") != std::string::npos);
  CHECK(text.find("[python.\"/usr/bin/python3\"]\nversion = \"3.11.2\"") != std::string::npos);
  CHECK(text.find("[python.\"/usr/bin/python3\".packages]\nnumpy = \"1.24.2\"") != std::string::npos);
  CHECK(text.find("[driver]\nversion = \"none\"\nsource = \"none\"") != std::string::npos);
  LockRead r = parse_lock(text, "x.lock");
  CHECK(r.hash_ok);
  CHECK(r.computed_hash == l.header.content_hash);
  CHECK(r.lock.header.created_by == "dl-envlock test");
  CHECK(r.lock.header.host == "box");
  CHECK(r.lock.kind == "snapshot");
  REQUIRE(r.lock.components.size() == l.components.size());
  for (size_t i = 0; i < l.components.size(); ++i) {
    INFO(l.components[i].key());
    CHECK(r.lock.components[i].path == l.components[i].path);  // file order is kept
    CHECK(r.lock.components[i].version == l.components[i].version);
    CHECK(r.lock.components[i].fields.size() == l.components[i].fields.size());
  }
  CHECK(r.lock.find("cuda.runtime")->field_text("code") == "13000");
  CHECK(std::get<int64_t>(*r.lock.find("cuda.runtime")->field("code")) == 13000);
  CHECK(r.lock.find("deb.version")->version == "1.0-1");
  CHECK(r.lock.find("python.\"/usr/bin/python3\".packages.version")->version == "0.1");
  CHECK(r.lock.probe("driver") == "not found: no nvidia-smi on PATH");
  CHECK(lock_to_toml(r.lock) == text);  // a read lock writes back byte for byte
}

TEST_CASE("lock: the content hash ignores layout and catches edited values") {
  Lock l = sample_lock();
  std::string text = lock_to_toml(l);
  // Comments, blank lines and a moved table do not change the content.
  std::string moved = text;
  size_t a = moved.find("[gpu]\ncount = \"0\"\n");
  REQUIRE(a != std::string::npos);
  moved.erase(a, std::string("[gpu]\ncount = \"0\"\n").size());
  moved += "\n# moved here by hand\n[gpu]\ncount   =   \"0\"\n";
  CHECK(parse_lock(moved, "x.lock").hash_ok);
  // An edited version does.
  std::string edited = text;
  size_t v = edited.find("numpy = \"1.24.2\"");
  edited.replace(v, std::string("numpy = \"1.24.2\"").size(), "numpy = \"1.26.4\"");
  LockRead r = parse_lock(edited, "x.lock");
  CHECK_FALSE(r.hash_ok);
  CHECK(r.computed_hash != l.header.content_hash);
  CHECK(r.lock.find("python.\"/usr/bin/python3\".packages.numpy")->version == "1.26.4");
  // So does an edited fact or probe.
  std::string fact = text;
  fact.replace(fact.find("code = 13000"), 12, "code = 12040");
  CHECK_FALSE(parse_lock(fact, "x.lock").hash_ok);
  // The canonical form is sorted lines; the hash is its sha256.
  std::string canon = canonical_content(l);
  CHECK(canon.find("C\tcuda.runtime\t\"13.0\"\n") != std::string::npos);
  CHECK(canon.find("F\tcuda.runtime\tcode\t13000\n") != std::string::npos);
  CHECK(l.header.content_hash.size() == 7 + 64);
}

TEST_CASE("lock: invalid files are usage errors naming the file and line") {
  std::string good = lock_to_toml(sample_lock());
  CHECK(usage_error("[header]\nformat = \"dlkit-envlock/1\"\nx = [\n").find("x.lock:3") == 0);
  CHECK(usage_error("[system]\nos = \"debian\"\n").find("no [header]") != std::string::npos);
  CHECK(usage_error("[header]\nformat = \"something\"\n[lock]\nkind = \"snapshot\"\n").find("x.lock:2: header.format") == 0);
  CHECK(usage_error("[header]\nformat = \"dlkit-envlock/9\"\n[lock]\nkind = \"snapshot\"\n").find("newer") != std::string::npos);
  CHECK(usage_error("[header]\nformat = \"dlkit-envlock/1\"\n[lock]\nkind = \"guess\"\n").find("x.lock:4: lock.kind") == 0);
  CHECK(usage_error("[header]\nformat = \"dlkit-envlock/1\"\nwho = \"me\"\n[lock]\nkind = \"snapshot\"\n").find("x.lock:3: unknown key header.who") == 0);
  std::string bad_version = "[header]\nformat = \"dlkit-envlock/1\"\n[lock]\nkind = \"snapshot\"\n\n[cuda.runtime]\nversion = 13\n";
  CHECK(usage_error(bad_version).find("x.lock:7: cuda.runtime.version must be a string") == 0);
  std::string bad_value = "[header]\nformat = \"dlkit-envlock/1\"\n[lock]\nkind = \"snapshot\"\n[deb]\nlibfoo = 1\n";
  CHECK(usage_error(bad_value).find("x.lock:6: deb.libfoo must be a version string") == 0);
  test::TempDir dir("lock");
  try {
    read_lock(dir / "missing.lock");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
    CHECK(std::string(e.what()).find("missing.lock: no such file") != std::string::npos);
  }
  write_lock(dir / "ok.lock", sample_lock());
  CHECK(test::read_file(dir / "ok.lock") == good);
  CHECK(read_lock(dir / "ok.lock").hash_ok);
}
