// Reading TOML: lock files and constraint files. The only translation unit of dl/env that
// includes toml++.
#include <algorithm>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "dl/core/error.hpp"
#include "dl/io/input_file.hpp"
#include "dl/env/lock.hpp"
#include "dl/env/resolve.hpp"

namespace dl {

namespace {

std::string read_text(const std::filesystem::path& path, const char* what) {
  return read_input_file(path, str("cannot read ", what));
}

std::string at(std::string_view source, const toml::source_region& r) {
  if (r.begin.line == 0) return std::string(source);
  return str(source, ":", r.begin.line);
}

std::string describe(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

toml::table parse_toml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw_usage(source, ":", e.source().begin.line, ":", e.source().begin.column, ": TOML syntax error: ", e.description());
  }
}

// Sections whose entries are all `name = "version"` (a key there named "version" is a package).
bool is_list_section(const std::vector<std::string>& path) {
  if (path.size() == 1 && (path[0] == "deb" || path[0] == "loaded")) return true;
  return path.size() == 3 && path[0] == "python" && path[2] == "packages";
}

struct Walker {
  std::string_view source;
  Lock& lock;

  void component(std::vector<std::string> path, const toml::node& n, int line) {
    Component c;
    c.path = std::move(path);
    c.version = *n.value<std::string>();
    c.line = line;
    lock.components.push_back(std::move(c));
  }

  void walk(const toml::table& t, std::vector<std::string>& path) {
    const toml::node* version = is_list_section(path) || path.empty() ? nullptr : t.get("version");
    if (version) {
      if (!version->is_string())
        throw_usage(at(source, version->source()), ": ", toml_key(path), ".version must be a string, got ", describe(*version));
      Component c;
      c.path = path;
      c.version = *version->value<std::string>();
      c.line = static_cast<int>(version->source().begin.line);
      for (auto&& [k, n] : t) {
        std::string key(k.str());
        if (key == "version" || n.is_table()) continue;
        if (n.is_string()) c.fields.push_back({key, *n.value<std::string>()});
        else if (n.is_integer()) c.fields.push_back({key, *n.value<int64_t>()});
        else
          throw_usage(at(source, n.source()), ": ", toml_key(path), ".", toml_quote_key(key),
                      " must be a string or an integer, got ", describe(n));
      }
      lock.components.push_back(std::move(c));
    }
    for (auto&& [k, n] : t) {
      std::string key(k.str());
      if (version && key == "version") continue;
      path.push_back(key);
      if (n.is_table()) {
        walk(*n.as_table(), path);
      } else if (!version) {
        if (!n.is_string())
          throw_usage(at(source, n.source()), ": ", toml_key(path), " must be a version string (or a table with version = \"...\"), got ",
                      describe(n));
        component(path, n, static_cast<int>(n.source().begin.line));
      }
      path.pop_back();
    }
  }
};

std::string string_at(const toml::table& t, const char* key, std::string_view source, const char* table, bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) throw_usage(source, ": [", table, "] has no ", key, " (was this file written by dl-envlock?)");
    return "";
  }
  if (!n->is_string()) throw_usage(at(source, n->source()), ": ", table, ".", key, " must be a string, got ", describe(*n));
  return *n->value<std::string>();
}

}  // namespace

LockRead parse_lock(std::string_view text, std::string_view source) {
  toml::table root = parse_toml(text, source);
  LockRead r;
  Lock& lock = r.lock;

  const toml::table* header = root.get_as<toml::table>("header");
  if (!header)
    throw_usage(source, ": not a dl-envlock lock file: no [header] table (write one with `dl-envlock snapshot -o ",
                source, "`)");
  lock.header.format = string_at(*header, "format", source, "header", true);
  if (lock.header.format != kLockFormat) {
    if (lock.header.format.rfind("dlkit-envlock/", 0) == 0)
      throw_usage(at(source, header->get("format")->source()), ": lock format ", lock.header.format,
                  " is newer than this dl-envlock reads (", kLockFormat, "); use a newer dl-envlock");
    throw_usage(at(source, header->get("format")->source()), ": header.format is '", lock.header.format,
                "', not a dl-envlock lock (expected ", kLockFormat, ")");
  }
  lock.header.created_by = string_at(*header, "created-by", source, "header", false);
  lock.header.date = string_at(*header, "date", source, "header", false);
  lock.header.host = string_at(*header, "host", source, "header", false);
  lock.header.content_hash = string_at(*header, "content-hash", source, "header", false);
  for (auto&& [k, n] : *header) {
    std::string key(k.str());
    if (key != "format" && key != "created-by" && key != "date" && key != "host" && key != "content-hash")
      throw_usage(at(source, n.source()), ": unknown key header.", key,
                  " (the header has format, created-by, date, host and content-hash)");
  }

  const toml::table* meta = root.get_as<toml::table>("lock");
  if (!meta) throw_usage(source, ": no [lock] table with kind = \"snapshot\" or \"resolved\"");
  lock.kind = string_at(*meta, "kind", source, "lock", true);
  if (lock.kind != "snapshot" && lock.kind != "resolved")
    throw_usage(at(source, meta->get("kind")->source()), ": lock.kind is '", lock.kind, "' (expected \"snapshot\" or \"resolved\")");
  for (auto&& [k, n] : *meta)
    if (k.str() != "kind") throw_usage(at(source, n.source()), ": unknown key lock.", k.str(), " ([lock] has only kind)");

  if (const toml::node* probes = root.get("probes")) {
    if (!probes->is_table()) throw_usage(at(source, probes->source()), ": probes must be a table");
    for (auto&& [k, n] : *probes->as_table()) {
      if (!n.is_string()) throw_usage(at(source, n.source()), ": probes.", k.str(), " must be a string, got ", describe(n));
      lock.probes.push_back({std::string(k.str()), *n.value<std::string>()});
    }
  }

  Walker w{source, lock};
  for (auto&& [k, n] : root) {
    std::string key(k.str());
    if (key == "header" || key == "lock" || key == "probes") continue;
    std::vector<std::string> path{key};
    if (n.is_table()) {
      w.walk(*n.as_table(), path);
    } else if (n.is_string()) {
      w.component(path, n, static_cast<int>(n.source().begin.line));
    } else {
      throw_usage(at(source, n.source()), ": ", toml_quote_key(key), " must be a table or a version string, got ", describe(n));
    }
  }
  // toml++ keeps keys sorted; restore the file's order.
  std::stable_sort(lock.components.begin(), lock.components.end(),
                   [](const Component& a, const Component& b) { return a.line < b.line; });

  r.computed_hash = compute_content_hash(lock);
  r.hash_ok = !lock.header.content_hash.empty() && lock.header.content_hash == r.computed_hash;
  return r;
}

LockRead read_lock(const std::filesystem::path& path) {
  std::string text = read_text(path, "lock file");
  return parse_lock(text, path.string());
}

// ---- constraints ----

namespace {

const std::set<std::string>& stack_keys() {
  static const std::set<std::string> keys{"cuda", "driver", "cudnn", "nccl", "cublas"};
  return keys;
}

bool valid_deb_name(const std::string& s) {
  if (s.size() < 2 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'))) return false;
  size_t colon = s.find(':');
  std::string name = s.substr(0, colon);
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.')) return false;
  return true;
}

}  // namespace

Constraints parse_constraints(std::string_view text, std::string_view source) {
  toml::table root = parse_toml(text, source);
  Constraints c;
  c.source = std::string(source);
  const char* known = "cuda, driver, cudnn, nccl, cublas, deb.<package>, python.<package>, python-interpreter";

  auto add = [&](const std::string& key, Scheme scheme, const toml::node& n) {
    std::string where = at(source, n.source());
    if (!n.is_string())
      throw_usage(where, ": ", key, ": expected a constraint string such as \">=12.4,<14\" or \"*\", got ", describe(n),
                  " (quote it)");
    ConstraintEntry e;
    e.key = key;
    e.spec = *n.value<std::string>();
    e.line = static_cast<int>(n.source().begin.line);
    try {
      e.constraint = parse_constraint(scheme, e.spec);
    } catch (const Error& err) {
      throw_usage(where, ": ", key, ": invalid constraint \"", e.spec, "\": ", err.what());
    }
    if (c.find(key)) throw_usage(where, ": ", key, " is constrained twice");
    c.entries.push_back(std::move(e));
  };

  for (auto&& [k, n] : root) {
    std::string key(k.str());
    if (key == "python-interpreter") {
      if (!n.is_string() || n.value<std::string>()->empty())
        throw_usage(at(source, n.source()), ": python-interpreter must be a path such as \"/usr/bin/python3\"");
      c.python = *n.value<std::string>();
      c.python_line = static_cast<int>(n.source().begin.line);
    } else if (stack_keys().count(key)) {
      add(key, Scheme::numeric, n);
    } else if (key == "deb" || key == "python") {
      if (!n.is_table())
        throw_usage(at(source, n.source()), ": ", key, " takes package names: ", key, ".NAME = \"CONSTRAINT\" (e.g. ",
                    key == "deb" ? "deb.libopenblas-dev = \"*\"" : "python.numpy = \">=1.24\"", ")");
      for (auto&& [pk, pn] : *n.as_table()) {
        std::string name(pk.str());
        if (key == "deb") {
          if (!valid_deb_name(name))
            throw_usage(at(source, pn.source()), ": deb.", name,
                        ": not a Debian package name (lowercase letters, digits, + - ., optional :arch)");
          add("deb." + name, Scheme::dpkg, pn);
        } else {
          add("python." + normalize_python_name(name), Scheme::pep440, pn);
        }
      }
    } else {
      throw_usage(at(source, n.source()), ": unknown constraint '", key, "' (known: ", known, ")");
    }
  }
  std::stable_sort(c.entries.begin(), c.entries.end(),
                   [](const ConstraintEntry& a, const ConstraintEntry& b) { return a.line < b.line; });
  return c;
}

Constraints read_constraints(const std::filesystem::path& path) {
  std::string text = read_text(path, "constraints file");
  return parse_constraints(text, path.string());
}

}  // namespace dl
