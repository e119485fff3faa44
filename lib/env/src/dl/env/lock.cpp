#include "dl/env/lock.hpp"

#include "dl/config/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>

#include <nlohmann/json.hpp>

#include "dl/core/error.hpp"
#include "dl/env/sha256.hpp"
#include "dl/io/atomic_file.hpp"

namespace dl {

std::string Component::key() const { return toml_key(path); }

const FieldValue* Component::field(std::string_view name) const {
  for (const auto& f : fields)
    if (f.key == name) return &f.value;
  return nullptr;
}

std::string Component::field_text(std::string_view name) const {
  const FieldValue* v = field(name);
  if (!v) return "";
  if (auto* s = std::get_if<std::string>(v)) return *s;
  return std::to_string(std::get<int64_t>(*v));
}

void Component::set(std::string name, FieldValue v) {
  for (auto& f : fields)
    if (f.key == name) {
      f.value = std::move(v);
      return;
    }
  fields.push_back({std::move(name), std::move(v)});
}

const Component* Lock::find(std::string_view key) const {
  for (const auto& c : components)
    if (c.key() == key) return &c;
  return nullptr;
}

Component* Lock::find(std::string_view key) {
  for (auto& c : components)
    if (c.key() == key) return &c;
  return nullptr;
}

const Component* Lock::find_path(const std::vector<std::string>& path) const {
  for (const auto& c : components)
    if (c.path == path) return &c;
  return nullptr;
}

Component& Lock::add(std::vector<std::string> path, std::string version) {
  components.push_back(Component{std::move(path), std::move(version), {}, {}, 0});
  return components.back();
}

void Lock::set_probe(const std::string& name, const std::string& status) {
  for (auto& p : probes)
    if (p.name == name) {
      p.status = status;
      return;
    }
  probes.push_back({name, status});
}

std::string Lock::probe(const std::string& name) const {
  for (const auto& p : probes)
    if (p.name == name) return p.status;
  return "";
}

std::string toml_string(std::string_view s) { return toml_quote(s); }

std::string toml_quote_key(std::string_view key) {
  bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  return bare ? std::string(key) : toml_string(key);
}

std::string toml_key(const std::vector<std::string>& path) {
  std::string s;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) s += '.';
    s += toml_quote_key(path[i]);
  }
  return s;
}

std::string plain_key(const std::vector<std::string>& path) {
  std::string s;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) s += '.';
    s += path[i];
  }
  return s;
}

Scheme scheme_for(const std::vector<std::string>& path) {
  if (path.empty()) return Scheme::text;
  const std::string& top = path[0];
  if (top == "deb") return Scheme::dpkg;
  if (top == "python") return Scheme::pep440;
  if (top == "loaded") return Scheme::hash;
  if (top == "system" && path.size() == 2) {
    if (path[1] == "cpu-flags") return Scheme::set;
    if (path[1] == "os" || path[1] == "arch" || path[1] == "cpu") return Scheme::text;
  }
  if (top == "gpu" && path.size() == 3 && path[2] == "name") return Scheme::text;
  return Scheme::numeric;
}

namespace {

std::string json_value(const FieldValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) return nlohmann::json(*s).dump();
  return nlohmann::json(std::get<int64_t>(v)).dump();
}

std::string toml_value(const FieldValue& v) {
  if (auto* s = std::get_if<std::string>(&v)) return toml_string(*s);
  return std::to_string(std::get<int64_t>(v));
}

void write_comment(std::string& out, const std::string& comment) {
  if (comment.empty()) return;
  size_t b = 0;
  for (;;) {
    size_t e = comment.find('\n', b);
    out += "# " + comment.substr(b, e == std::string::npos ? std::string::npos : e - b) + "\n";
    if (e == std::string::npos) break;
    b = e + 1;
  }
}

}  // namespace

std::string canonical_content(const Lock& lock) {
  std::vector<std::string> lines;
  lines.push_back("M\tkind\t" + nlohmann::json(lock.kind).dump());
  for (const auto& c : lock.components) {
    std::string k = toml_key(c.path);
    lines.push_back("C\t" + k + "\t" + nlohmann::json(c.version).dump());
    for (const auto& f : c.fields) lines.push_back("F\t" + k + "\t" + toml_quote_key(f.key) + "\t" + json_value(f.value));
  }
  for (const auto& p : lock.probes)
    lines.push_back("P\t" + toml_quote_key(p.name) + "\t" + nlohmann::json(p.status).dump());
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::string compute_content_hash(const Lock& lock) { return "sha256:" + sha256_hex(canonical_content(lock)); }

void seal(Lock& lock) { lock.header.content_hash = compute_content_hash(lock); }

std::string lock_to_toml(const Lock& lock) {
  // Group components into tables, keeping first-appearance order.
  struct Node {
    std::vector<std::string> path;
    const Component* table = nullptr;     // a component written as [path] with version = ...
    std::vector<const Component*> compact;  // components written as name = "version" in this table
    std::vector<size_t> children;
  };
  std::vector<Node> nodes(1);
  std::map<std::vector<std::string>, size_t> index{{{}, 0}};
  auto node = [&](const std::vector<std::string>& path) {
    std::vector<std::string> p;
    size_t parent = 0;
    for (const auto& part : path) {
      p.push_back(part);
      auto it = index.find(p);
      if (it == index.end()) {
        nodes.push_back(Node{p, nullptr, {}, {}});
        size_t id = nodes.size() - 1;
        index[p] = id;
        nodes[parent].children.push_back(id);
        parent = id;
      } else {
        parent = it->second;
      }
    }
    return parent;
  };
  // A component that other components live under must be a table (TOML cannot give one key both
  // a string value and sub-keys).
  std::map<std::vector<std::string>, bool> has_children;
  for (const auto& c : lock.components)
    for (size_t n = 1; n < c.path.size(); ++n) has_children[std::vector<std::string>(c.path.begin(), c.path.begin() + n)] = true;
  for (const auto& c : lock.components) {
    bool table_form = !c.fields.empty() || c.path.size() == 1 || has_children.count(c.path);
    if (table_form) {
      nodes[node(c.path)].table = &c;
    } else {
      std::vector<std::string> parent(c.path.begin(), c.path.end() - 1);
      nodes[node(parent)].compact.push_back(&c);
    }
  }

  std::string out;
  out += "# dl-envlock lock file (" + std::string(kLockFormat) + ").\n";
  out += "# `dl-envlock check FILE` compares this machine with it; `dl-envlock diff A B` compares two locks.\n";
  out += "# header.content-hash covers everything outside [header]; editing a value makes check warn.\n\n";
  out += "[header]\n";
  out += "format = " + toml_string(lock.header.format) + "\n";
  out += "created-by = " + toml_string(lock.header.created_by) + "\n";
  out += "date = " + toml_string(lock.header.date) + "\n";
  out += "host = " + toml_string(lock.header.host) + "\n";
  out += "content-hash = " + toml_string(lock.header.content_hash) + "\n";
  out += "\n[lock]\nkind = " + toml_string(lock.kind) + "\n";

  std::vector<size_t> stack(nodes[0].children.rbegin(), nodes[0].children.rend());
  while (!stack.empty()) {
    size_t id = stack.back();
    stack.pop_back();
    const Node& n = nodes[id];
    if (n.table || !n.compact.empty()) {
      out += "\n";
      if (n.table) write_comment(out, n.table->comment);
      out += "[" + toml_key(n.path) + "]\n";
      if (n.table) {
        out += "version = " + toml_string(n.table->version) + "\n";
        for (const auto& f : n.table->fields) out += toml_quote_key(f.key) + " = " + toml_value(f.value) + "\n";
      }
      for (const Component* c : n.compact) {
        write_comment(out, c->comment);
        out += toml_quote_key(c->path.back()) + " = " + toml_string(c->version) + "\n";
      }
    }
    for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) stack.push_back(*it);
  }
  if (!lock.probes.empty()) {
    out += "\n[probes]\n";
    for (const auto& p : lock.probes) out += toml_quote_key(p.name) + " = " + toml_string(p.status) + "\n";
  }
  return out;
}

void write_lock(const std::filesystem::path& path, const Lock& lock) { write_file_atomic(path, lock_to_toml(lock)); }

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace dl
