// The lock file: what a machine's stack was (snapshot) or must be (resolve), as TOML.
//
//   [header]                 who wrote it, when, where, and content-hash; not part of the content
//   [lock]                   kind = "snapshot" | "resolved"
//   [system] [cuda.*] [driver] [gpu] [blas.*] [comm.*] [lib.*] [deb] [python."<interpreter>"]
//   [loaded]                 sha256 of every shared library the snapshot process had loaded
//   [probes]                 how each probe went: "ok", "not found: ...", "failed: ..."
//
// Every versioned thing is a component, named by its TOML key path ("cuda.cudnn",
// "deb.libopenblas-dev", `python."/usr/bin/python3".packages.numpy`), with a version string and
// optional facts (library path, raw version code). A component without facts is written as
// `name = "version"` under its parent table; one with facts as a table with `version = ...`.
// The content hash is sha256 over a canonical, order-independent serialisation of everything
// outside [header], so reformatting or comments do not change it but any edited value does.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "dl/env/versions.hpp"

namespace dl {

inline constexpr const char* kLockFormat = "dlkit-envlock/1";

using FieldValue = std::variant<std::string, int64_t>;
struct Field {
  std::string key;
  FieldValue value;
};

struct Component {
  std::vector<std::string> path;  // TOML key path: {"cuda", "cudnn"}
  std::string version;            // "none": not on this machine; "unknown": its probe failed
  std::vector<Field> fields;      // facts kept with it (not compared): library, code, package, ...
  std::string comment;            // written as "# comment" above it; not part of the content
  int line = 0;                   // where it was read from (0 for snapshots)

  std::string key() const;                                  // TOML form: python."/usr/bin/python3".numpy
  const FieldValue* field(std::string_view name) const;     // nullptr when absent
  std::string field_text(std::string_view name) const;      // string field or number as text; "" when absent
  void set(std::string name, FieldValue v);                 // adds or replaces
};

struct LockHeader {
  std::string format = kLockFormat;
  std::string created_by;
  std::string date;  // ISO 8601 UTC
  std::string host;
  std::string content_hash;  // "sha256:<hex>"
};

struct Probe {
  std::string name;
  std::string status;  // "ok" | "not found: ..." | "failed: ..."
};

struct Lock {
  LockHeader header;
  std::string kind = "snapshot";  // "snapshot" | "resolved"
  std::vector<Component> components;
  std::vector<Probe> probes;

  const Component* find(std::string_view key) const;
  Component* find(std::string_view key);
  const Component* find_path(const std::vector<std::string>& path) const;
  Component& add(std::vector<std::string> path, std::string version);  // appends
  void set_probe(const std::string& name, const std::string& status);  // adds or replaces
  std::string probe(const std::string& name) const;                    // "" when absent
};

// TOML key path -> "a.b.\"c d\"" (bare keys where TOML allows, basic strings otherwise).
std::string toml_key(const std::vector<std::string>& path);
std::string toml_quote_key(std::string_view key);
std::string toml_string(std::string_view s);  // a TOML basic string literal with escapes
// The key path with plain dots ("python./usr/bin/python3.numpy"), for --ignore matching.
std::string plain_key(const std::vector<std::string>& path);

// How a component's versions compare, decided by where it lives:
// deb.* dpkg; python.<interp>(.packages.*) pep440; loaded.* hash; system.cpu-flags set;
// system.os, system.arch, system.cpu, gpu.<i>.name text; everything else numeric.
Scheme scheme_for(const std::vector<std::string>& path);

// The canonical serialisation that the content hash covers: one line per component
// ("<key>\t<json version>") and per fact ("<key>\t<fact>\t<json value>"), the [lock] metadata and
// the probes, sorted. Independent of file layout, comments and order.
std::string canonical_content(const Lock& lock);
std::string compute_content_hash(const Lock& lock);  // "sha256:<hex>"

// The lock as TOML. Sets nothing: call seal() first to fill header.content_hash.
std::string lock_to_toml(const Lock& lock);
void seal(Lock& lock);  // header.content_hash = compute_content_hash(lock)

// Reading (lock_read.cpp). Throws dl::Error(usage) naming the file and line: unreadable file,
// TOML syntax, not a dl-envlock lock, a value of the wrong type.
struct LockRead {
  Lock lock;
  bool hash_ok = true;        // header.content-hash matches the content as read
  std::string computed_hash;  // what the content hashes to now
};
LockRead parse_lock(std::string_view text, std::string_view source_name);
LockRead read_lock(const std::filesystem::path& path);

// Writes the sealed lock atomically.
void write_lock(const std::filesystem::path& path, const Lock& lock);

// "2026-11-03T12:34:56Z" for now; the host name.
std::string utc_timestamp();
std::string host_name();

}  // namespace dl
