// TOML -> Config: parsing, --set overrides, validation, data-path resolution, TOML output and key
// docs. Every key is named once, in visit_config() (schema.hpp); everything here walks that list.
#include "dl/config/config.hpp"

#include <glob.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <toml++/toml.h>

#include "dl/config/hf_gpt2_config.hpp"
#include "dl/config/hf_llama_config.hpp"
#include "dl/config/schema.hpp"
#include "dl/core/error.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/input_file.hpp"

namespace dl {

namespace fs = std::filesystem;
using config_schema::Spec;
using config_schema::visit_config;

namespace {

// ---------------------------------------------------------------------------------------------
// Formatting

// Shortest text that reads back as the same double ("0.001", "0.0006", "1e-08", "2"), in fixed
// notation unless the exponent is far from 0.
std::string format_number(double x) {
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (auto e = s.find('e'); e != std::string::npos) {
    int exp = std::atoi(s.c_str() + e + 1);
    if (exp >= -5 && exp < 16) {
      r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
      s.assign(buf, r.ptr);
    }
  }
  return s;
}

// A TOML float literal that round-trips exactly: always has '.' or 'e' (or is inf/nan).
std::string format_float(double x) {
  std::string s = format_number(x);
  if (s.find_first_of(".eEin") == std::string::npos) s += ".0";
  return s;
}

std::string quote(std::string_view s) { return toml_quote(s); }

// Values in TOML syntax, for config_to_toml() and the defaults in config_key_docs().
std::string toml_value(int64_t v, const Spec& spec) { return spec.auto_int && v == -1 ? "\"auto\"" : std::to_string(v); }
std::string toml_value(double v, const Spec&) { return format_float(v); }
std::string toml_value(bool v, const Spec&) { return v ? "true" : "false"; }
std::string toml_value(const std::string& v, const Spec&) { return quote(v); }
template <class E>
std::string toml_value(const Choice<E>& v, const Spec&) { return quote(v.name()); }
std::string toml_value(const std::vector<int64_t>& v, const Spec&) {
  std::vector<std::string> parts;
  for (int64_t x : v) parts.push_back(std::to_string(x));
  return "[" + join(parts, ", ") + "]";
}

std::string type_name(int64_t, const Spec& spec) { return spec.auto_int ? "int or \"auto\"" : "int"; }
std::string type_name(double, const Spec&) { return "float"; }
std::string type_name(bool, const Spec&) { return "bool"; }
std::string type_name(const std::string&, const Spec&) { return "string"; }
template <class E>
std::string type_name(const Choice<E>&, const Spec&) { return "string"; }
std::string type_name(const std::vector<int64_t>&, const Spec&) { return "int array"; }

// "in [0, 0.5]", ">= 1", "> 0", "" (no range). An upper bound of kIntMax is overflow protection
// only and not worth a reader's attention.
std::string describe_range(const Spec& s) {
  bool has_lo = std::isfinite(s.lo);
  bool has_hi = std::isfinite(s.hi) && s.hi != config_schema::kIntMax;
  if (has_lo && has_hi)
    return "in " + std::string(s.lo_open ? "(" : "[") + format_number(s.lo) + ", " + format_number(s.hi) +
           (s.hi_open ? ")" : "]");
  if (has_lo) return (s.lo_open ? "> " : ">= ") + format_number(s.lo);
  if (has_hi) return (s.hi_open ? "< " : "<= ") + format_number(s.hi);
  return "";
}

bool in_range(double x, const Spec& s) {
  if (s.lo_open ? !(x > s.lo) : !(x >= s.lo)) return false;
  if (s.hi_open ? !(x < s.hi) : !(x <= s.hi)) return false;
  return true;
}

// "cpu, cuda, auto" for a choice; "" for any other field.
template <class T>
std::string choices_text(const T&) { return ""; }
template <class E>
std::string choices_text(const Choice<E>&) { return choice_list<E>(); }
// Precision::fp8 is a planning precision (dl-cost/dl-shard --precision fp8): dl-train has no FP8
// kernels, so a config cannot ask for it.
std::string choices_text(const Choice<Precision>&) { return "fp32, bf16, fp16"; }
template <class E>
bool config_may_choose(E e) {
  if constexpr (std::is_same_v<E, Precision>) return e != Precision::fp8;
  return true;
}

constexpr std::string_view kSourceForms = "synthetic:addition, text:PATH, tokens:GLOB or csv:PATH";
// Tasks the data module generates for "synthetic:NAME".
const std::vector<std::string_view> kSyntheticTasks = {"addition"};

// What a key accepts, for docs and TOML comments.
template <class T>
std::string allowed_text(const T& field, const Spec& s) {
  std::string a;
  if (std::string c = choices_text(field); !c.empty()) a = "one of " + c;
  if (s.source) a = std::string(kSourceForms) + (s.may_be_empty ? ", or empty" : "");
  std::string r = describe_range(s);
  if (!r.empty()) a = r;
  if (s.auto_int) a += (a.empty() ? "" : ", or ") + std::string("\"auto\"");
  return a;
}

// ---------------------------------------------------------------------------------------------
// Did-you-mean

struct KeyName {
  std::string section, key;
  std::string full() const { return section + "." + key; }
};

std::vector<KeyName> all_keys() {
  std::vector<KeyName> keys;
  Config c;
  visit_config(c, [&](std::string_view s, std::string_view k, auto&, const Spec&) {
    keys.push_back({std::string(s), std::string(k)});
  });
  return keys;
}

std::vector<std::string> all_sections() {
  std::vector<std::string> out;
  for (const auto& k : all_keys())
    if (out.empty() || out.back() != k.section) out.push_back(k.section);
  return out;
}

bool is_section(std::string_view name) {
  auto s = all_sections();
  return std::find(s.begin(), s.end(), name) != s.end();
}

// The known key closest to section.key (section may be empty for a key outside any section),
// counting a known key with the same name in another section as one edit away.
std::optional<std::string> suggest_key(std::string_view section, std::string_view key) {
  std::string full = section.empty() ? std::string(key) : std::string(section) + "." + std::string(key);
  size_t limit = std::clamp<size_t>(key.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_score = SIZE_MAX;
  for (const auto& k : all_keys()) {
    bool same_section = k.section == section;
    size_t d = std::min(edit_distance(full, k.full()), edit_distance(key, k.key) + (same_section ? 0 : 1));
    if (d > limit) continue;
    size_t score = 2 * d + (same_section ? 0 : 1);
    if (score < best_score) best_score = score, best = k.full();
  }
  return best;
}

std::optional<std::string> suggest_section(std::string_view name) {
  return closest_name(name, all_sections());
}

[[noreturn]] void unknown_key(const std::string& where, std::string_view section, std::string_view key) {
  std::string full = section.empty() ? std::string(key) : std::string(section) + "." + std::string(key);
  if (auto s = suggest_key(section, key)) throw_usage(where, ": unknown key '", full, "' — did you mean '", *s, "'?");
  if (section.empty())
    throw_usage(where, ": unknown key '", full, "'; keys belong in a section: [", join(all_sections(), "], ["), "]");
  std::vector<std::string> names;
  for (const auto& k : all_keys())
    if (k.section == section) names.push_back(k.key);
  throw_usage(where, ": unknown key '", full, "'; the keys of [", section, "] are ", join(names, ", "));
}

[[noreturn]] void unknown_section(const std::string& where, std::string_view name) {
  if (auto s = suggest_section(name)) throw_usage(where, ": unknown section '", name, "' — did you mean '", *s, "'?");
  throw_usage(where, ": unknown section '", name, "'; the sections are ", join(all_sections(), ", "));
}

// ---------------------------------------------------------------------------------------------
// TOML nodes -> fields

std::string render(const toml::node& n) {
  if (auto s = n.as_string()) return quote(s->get());
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto f = n.as_floating_point()) return format_float(f->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  if (auto a = n.as_array()) {
    std::vector<std::string> parts;
    for (const auto& e : *a) parts.push_back(render(e));
    return "[" + join(parts, ", ") + "]";
  }
  std::ostringstream os;
  n.visit([&](const auto& x) { os << x; });
  return os.str();
}

// "string \"four\"", "float 4.5", "table"
std::string describe(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "string " + render(n);
    case toml::node_type::integer: return "integer " + render(n);
    case toml::node_type::floating_point: return "float " + render(n);
    case toml::node_type::boolean: return "boolean " + render(n);
    case toml::node_type::array: return "array " + render(n);
    case toml::node_type::table: return "table";
    case toml::node_type::date: return "date " + render(n);
    case toml::node_type::time: return "time " + render(n);
    case toml::node_type::date_time: return "date-time " + render(n);
    default: return "nothing";
  }
}

struct Target {
  std::string where;     // "FILE:LINE" or "--set KEY=VALUE"
  std::string full_key;  // "model.n_layer"
  const std::string* raw = nullptr;  // --set: the value's text, used as-is for string keys
  // Choice keys whose last value names no choice, with that value; reported by validation.
  std::map<std::string, std::string>* unknown_choices = nullptr;
};

[[noreturn]] void type_error(const Target& t, std::string_view expected, const toml::node& n) {
  throw_usage(t.where, ": ", t.full_key, " must be ", expected, ", got ", describe(n));
}

void assign(int64_t& field, const toml::node& n, const Spec& spec, const Target& t) {
  if (auto i = n.as_integer()) {
    field = i->get();
    return;
  }
  if (spec.auto_int) {
    if (auto s = n.as_string(); s && s->get() == "auto") {
      field = -1;
      return;
    }
    type_error(t, "an integer or \"auto\"", n);
  }
  type_error(t, "an integer", n);
}

void assign(double& field, const toml::node& n, const Spec&, const Target& t) {
  if (auto f = n.as_floating_point()) field = f->get();
  else if (auto i = n.as_integer()) field = static_cast<double>(i->get());
  else type_error(t, "a number", n);
}

void assign(bool& field, const toml::node& n, const Spec&, const Target& t) {
  if (auto b = n.as_boolean()) field = b->get();
  else type_error(t, "true or false", n);
}

void assign(std::string& field, const toml::node& n, const Spec&, const Target& t) {
  if (auto s = n.as_string()) field = s->get();
  else if (t.raw) field = *t.raw;  // --set train.device=inf: the text, not the float
  else type_error(t, "a string", n);
}

template <class E>
void assign(Choice<E>& field, const toml::node& n, const Spec& spec, const Target& t) {
  std::string name;
  assign(name, n, spec, t);
  if (auto e = parse_choice<E>(name); e && config_may_choose(*e)) {
    field = *e;
    t.unknown_choices->erase(t.full_key);
  } else {
    (*t.unknown_choices)[t.full_key] = name;
  }
}

void assign(std::vector<int64_t>& field, const toml::node& n, const Spec&, const Target& t) {
  auto a = n.as_array();
  if (!a) type_error(t, "an array of integers", n);
  std::vector<int64_t> v;
  for (const auto& e : *a) {
    auto i = e.as_integer();
    if (!i) type_error(t, "an array of integers", n);
    v.push_back(i->get());
  }
  field = std::move(v);
}

// Where each key got its value from; keys left at their default have no entry.
struct Origin {
  std::string where;  // "FILE:LINE" or "--set KEY=VALUE"
  fs::path base;      // relative data paths resolve against this
  bool from_set = false;
};
using Origins = std::map<std::string, Origin>;

// Sets section.key from a TOML node; false when no such key exists.
bool set_key(Config& c, std::string_view section, std::string_view key, const toml::node& n, const Target& t) {
  bool found = false;
  visit_config(c, [&](std::string_view s, std::string_view k, auto& field, const Spec& spec) {
    if (found || s != section || k != key) return;
    found = true;
    assign(field, n, spec, t);
  });
  return found;
}

std::string at_line(std::string_view source_name, const toml::source_region& r) {
  if (r.begin.line == 0) return std::string(source_name);
  return str(source_name, ":", r.begin.line);
}

void apply_override(Config& c, Origins& origins, std::map<std::string, std::string>& unknown_choices,
                    const std::string& ov) {
  std::string where = "--set " + ov;
  size_t eq = ov.find('=');
  std::string name = trim(ov.substr(0, eq));
  size_t dot = name.find('.');
  std::string section = dot == std::string::npos ? std::string() : name.substr(0, dot);
  std::string key = dot == std::string::npos ? name : name.substr(dot + 1);
  if (eq == std::string::npos) {
    if (auto s = suggest_key(section, key); s && *s != name)
      throw_usage(where, ": expected section.key=value; unknown key '", name, "' — did you mean '", *s, "'?");
    throw_usage(where, ": expected section.key=value, e.g. --set ", name.empty() ? "model.n_layer" : name, "=VALUE");
  }
  if (section.empty()) unknown_key(where, "", key);
  if (!is_section(section)) {
    if (auto s = suggest_key(section, key)) throw_usage(where, ": unknown key '", name, "' — did you mean '", *s, "'?");
    unknown_section(where, section);
  }
  std::string raw = trim(ov.substr(eq + 1));
  // The value as TOML ("4", "1e-3", "[32,32]", "\"x\"", "true"); failing that, the text itself.
  toml::table parsed;
  bool ok = false;
  try {
    std::string doc = "x = " + raw + "\n";
    parsed = toml::parse(std::string_view(doc), std::string_view("--set"));
    ok = parsed.size() == 1 && parsed.contains("x");
  } catch (const toml::parse_error&) {
  }
  toml::value<std::string> as_text(raw);
  const toml::node& node = ok ? *parsed.get("x") : static_cast<const toml::node&>(as_text);
  Target t{where, name, &raw, &unknown_choices};
  if (!set_key(c, section, key, node, t)) unknown_key(where, section, key);
  origins[name] = Origin{where, fs::current_path(), true};
}

// ---------------------------------------------------------------------------------------------
// Validation

struct Checker {
  Config& cfg;
  const Origins& origins;
  const std::map<std::string, std::string>& unknown_choices;
  std::string default_where;  // errors about keys left at their default (a bug) name the source
  fs::path default_base;
  InitFromUse init_from_use = InitFromUse::start;

  std::string where(const std::string& key) const {
    auto it = origins.find(key);
    return it == origins.end() ? default_where : it->second.where;
  }

  // `name` is the key, or one element of it ("model.hidden[1]").
  void check_range(const std::string& key, const std::string& name, double x, const std::string& got,
                   const Spec& spec, bool allow_auto = false) {
    if (in_range(x, spec)) return;
    if (spec.hi == config_schema::kIntMax && x > spec.hi)
      throw_usage(where(key), ": ", name, " must be <= ", format_number(spec.hi), ", got ", got);
    throw_usage(where(key), ": ", name, " must be ", describe_range(spec), allow_auto ? " or \"auto\"" : "", ", got ", got);
  }

  void check(const std::string& key, int64_t& v, const Spec& spec) {
    if (spec.auto_int && v == -1) return;
    check_range(key, key, static_cast<double>(v), std::to_string(v), spec, spec.auto_int);
  }
  void check(const std::string& key, double& v, const Spec& spec) {
    if (!std::isfinite(v)) throw_usage(where(key), ": ", key, " must be a finite number, got ", format_number(v));
    check_range(key, key, v, format_number(v), spec);
  }
  void check(const std::string&, bool&, const Spec&) {}
  void check(const std::string& key, std::vector<int64_t>& v, const Spec& spec) {
    if (v.empty() && !spec.may_be_empty) throw_usage(where(key), ": ", key, " must not be empty");
    for (size_t i = 0; i < v.size(); ++i)
      check_range(key, str(key, "[", i, "]"), static_cast<double>(v[i]), std::to_string(v[i]), spec);
  }
  void check(const std::string& key, std::string& v, const Spec& spec) {
    if (spec.source) resolve_source(key, v, spec);
    if (spec.tokenizer) resolve_tokenizer(key, v);
    if (spec.folder && !v.empty() && init_from_use == InitFromUse::start) resolve_folder(key, v);
  }
  template <class E>
  void check(const std::string& key, Choice<E>& v, const Spec&) {
    if (auto it = unknown_choices.find(key); it != unknown_choices.end())
      throw_usage(where(key), ": ", key, " must be one of ", choices_text(v), "; got ", quote(it->second));
  }

  // Checks a tokenizer and makes its folder absolute.
  void resolve_tokenizer(const std::string& key, std::string& v) {
    if (v == "bytes") return;
    const std::string scheme = v.starts_with("gpt2:") ? "gpt2:" : v.starts_with("hf:") ? "hf:" : "";
    if (scheme.empty() || v.size() == scheme.size())
      throw_usage(where(key), ": ", key, " must be \"bytes\", \"gpt2:DIR\" (a folder with vocab.json + merges.txt or ",
                  "tokenizer.json) or \"hf:DIR\" (a folder with a Hugging Face tokenizer.json); got ", quote(v));
    const fs::path p(v.substr(scheme.size()));
    const auto [base, note] = path_base(key, p);
    const fs::path abs = p.is_relative() ? (base / p).lexically_normal() : p.lexically_normal();
    std::error_code ec;
    if (!fs::is_directory(abs, ec)) throw_usage(where(key), ": ", key, ": no such folder: ", abs.string(), note);
    v = scheme + abs.string();
  }

  // Where a relative path in `key` resolves from, and the note errors about it add.
  std::pair<fs::path, std::string> path_base(const std::string& key, const fs::path& p) const {
    auto it = origins.find(key);
    const bool from_set = it != origins.end() && it->second.from_set;
    std::string note = !p.is_relative() ? ""
                       : from_set      ? " (paths in --set are relative to the current directory)"
                                       : " (paths are relative to the config file's folder)";
    return {it == origins.end() ? default_base : it->second.base, note};
  }

  // Checks a folder path and makes it absolute.
  void resolve_folder(const std::string& key, std::string& v) {
    const fs::path p(v);
    const auto [base, note] = path_base(key, p);
    const fs::path abs = p.is_relative() ? (base / p).lexically_normal() : p.lexically_normal();
    std::error_code ec;
    if (!fs::exists(abs, ec)) throw_usage(where(key), ": ", key, ": folder not found: ", abs.string(), note);
    if (!fs::is_directory(abs, ec)) throw_usage(where(key), ": ", key, ": not a folder: ", abs.string(), note);
    v = abs.has_filename() ? abs.string() : abs.parent_path().string();
  }

  // Checks a data source and makes its path absolute.
  void resolve_source(const std::string& key, std::string& v, const Spec& spec) {
    if (v.empty()) {
      if (spec.may_be_empty) return;
      throw_usage(where(key), ": ", key, " must not be empty; use ", kSourceForms);
    }
    size_t colon = v.find(':');
    std::string kind = colon == std::string::npos ? std::string() : v.substr(0, colon);
    const std::optional<SourceKind> k = parse_choice<SourceKind>(kind);
    if (!k) throw_usage(where(key), ": ", key, " must be ", kSourceForms, "; got ", quote(v));
    std::string arg = v.substr(colon + 1);
    if (*k == SourceKind::synthetic) {
      if (std::find(kSyntheticTasks.begin(), kSyntheticTasks.end(), arg) == kSyntheticTasks.end()) {
        std::vector<std::string> names(kSyntheticTasks.begin(), kSyntheticTasks.end());
        throw_usage(where(key), ": ", key, ": unknown synthetic task ", quote(arg), "; known: ", join(names, ", "));
      }
      return;
    }
    if (arg.empty())
      throw_usage(where(key), ": ", key, ": ", kind, ": needs a ", *k == SourceKind::tokens ? "glob" : "path", ", e.g. ",
                  kind, *k == SourceKind::tokens ? ":data/shard_*.bin" : *k == SourceKind::csv ? ":data/train.csv" : ":data/input.txt");
    fs::path p(arg);
    bool relative = p.is_relative();
    const auto [base, note] = path_base(key, p);
    // tokens: is always a glob; text: may be one (its files are documents).
    if (*k == SourceKind::tokens || (*k == SourceKind::text && arg.find_first_of("*?[") != std::string::npos)) {
      // Glob metacharacters in the base folder itself must match literally.
      std::string pattern = arg;
      if (relative) {
        std::string b;
        for (char ch : base.lexically_normal().string()) {
          if (ch == '*' || ch == '?' || ch == '[' || ch == '\\') b += '\\';
          b += ch;
        }
        pattern = (fs::path(b) / p).lexically_normal().string();
      }
      if (glob_files(pattern).empty()) throw_usage(where(key), ": ", key, ": no files match ", pattern, note);
      v = kind + ":" + pattern;
      return;
    }
    fs::path abs = relative ? (base / p).lexically_normal() : p.lexically_normal();
    std::error_code ec;
    auto st = fs::status(abs, ec);
    if (!fs::exists(st)) throw_usage(where(key), ": ", key, ": file not found: ", abs.string(), note);
    if (!fs::is_regular_file(st)) throw_usage(where(key), ": ", key, ": not a regular file: ", abs.string(), note);
    v = kind + ":" + abs.string();
  }

  // The dotted name of a field of cfg, found by address in the one list.
  std::string key_of(const void* field) {
    std::string name;
    visit_config(cfg, [&](std::string_view s, std::string_view k, auto& f, const Spec&) {
      if (static_cast<const void*>(&f) == field) name = std::string(s) + "." + std::string(k);
    });
    DL_CHECK(!name.empty(), "field is not in visit_config");
    return name;
  }

  // Fails naming the first of `fields` that was set (file line or --set), else the source.
  template <class... Args>
  [[noreturn]] void fail(std::initializer_list<const void*> fields, Args&&... msg) {
    std::string at = default_where;
    for (const void* f : fields)
      if (auto it = origins.find(key_of(f)); it != origins.end()) {
        at = it->second.where;
        break;
      }
    throw_usage(at, ": ", std::forward<Args>(msg)...);
  }

  // model.init_from: the folder's config.json fixes the model's shape; a [model] key that was set
  // and says otherwise is an error naming both values. A llama, mistral or qwen2 folder makes the run a
  // llama one (model.type set to anything else is an error).
  void apply_init_from() {
    ModelConfig& m = cfg.model;
    const std::string from = key_of(&m.init_from);
    const fs::path file = read_init_from(from, [&] { return init_from_config_json(m.init_from); });
    const std::string model_type = read_init_from(from, [&] { return hf_config_model_type(file); });
    const bool llama = is_hf_llama_family(model_type);
    const ModelType wanted = llama ? ModelType::llama : ModelType::gpt;
    if (origins.count(key_of(&m.type)) && m.type != wanted)
      fail({&m.type}, from, " holds a ", llama ? "llama" : "gpt", " model (", file.string(), ": model_type ",
           model_type.empty() ? std::string("missing") : "\"" + model_type + "\"", "); model.type is \"", m.type,
           "\" (leave it out or set it to \"", Choice<ModelType>(wanted), "\")");
    m.type = wanted;
    // An untied folder's head cannot be tied to the embedding; a tied folder's may be untied (the
    // head starts as a copy of the embedding).
    const bool tied = llama ? take_llama_shape(file, from) : take_gpt2_shape(file, from);
    const std::string tie = key_of(&m.tie_embeddings);
    if (!origins.count(tie))
      m.tie_embeddings = tied;
    else if (m.tie_embeddings && !tied)
      throw_usage(where(tie), ": ", tie, " = true, but ", file.string(),
                  " says tie_word_embeddings = false (its lm_head.weight is a tensor of its own): leave ", tie,
                  " out or set it to false");
    // A Hugging Face folder usually carries its tokenizer: text then becomes the ids the weights
    // were trained on, unless data.tokenizer says otherwise.
    const fs::path dir(m.init_from);
    std::error_code ec;
    // GPT-2's vocab.json + merges.txt where the folder has them, else its tokenizer.json.
    if (!origins.count(key_of(&cfg.data.tokenizer))) {
      if (fs::is_regular_file(dir / "vocab.json", ec) && fs::is_regular_file(dir / "merges.txt", ec))
        cfg.data.tokenizer = "gpt2:" + dir.string();
      else if (fs::is_regular_file(dir / "tokenizer.json", ec))
        cfg.data.tokenizer = "hf:" + dir.string();
    }
  }

  // read(), a reading of the folder's config.json, its errors prefixed by where model.init_from was set.
  template <class F>
  auto read_init_from(const std::string& from, F read) -> decltype(read()) {
    try {
      return read();
    } catch (const Error& e) {
      throw_usage(where(from), ": ", from, ": ", e.what());
    }
  }

  // A [model] field takes config.json's value; set to another, it is an error naming both.
  template <class T>
  void take(T& field, const T& value, const char* json_key, const fs::path& file, const std::string& from) {
    const std::string key = key_of(&field);
    if (origins.count(key) && !(field == value))
      throw_usage(where(key), ": ", key, " = ", field, ", but ", file.string(), " says ", json_key, " = ", value, " (",
                  from, " fixes the model's shape: leave ", key, " out or set it to ", value, ")");
    field = value;
  }

  // GPT-2's shape; returns tie_word_embeddings.
  bool take_gpt2_shape(const fs::path& file, const std::string& from) {
    ModelConfig& m = cfg.model;
    const HfGpt2Shape shape = read_init_from(from, [&] { return read_hf_gpt2_config(file); });
    take(m.n_layer, shape.n_layer, "n_layer", file, from);
    take(m.n_head, shape.n_head, "n_head", file, from);
    take(m.n_embd, shape.n_embd, "n_embd", file, from);
    take(m.block_size, shape.n_positions, "n_positions", file, from);
    take(m.vocab_size, shape.vocab_size, "vocab_size", file, from);
    return shape.tie_word_embeddings;
  }

  // A llama, mistral or qwen2 folder's shape; returns tie_word_embeddings. model.block_size is the run's
  // (max_position_embeddings when left out, never more: the weights saw no longer sequences).
  bool take_llama_shape(const fs::path& file, const std::string& from) {
    ModelConfig& m = cfg.model;
    const HfLlamaShape s = read_init_from(from, [&] { return read_hf_llama_config(file); });
    take(m.n_layer, s.n_layer, "num_hidden_layers", file, from);
    take(m.n_head, s.n_head, "num_attention_heads", file, from);
    take(m.n_kv_head, s.n_kv_head, "num_key_value_heads", file, from);
    take(m.n_embd, s.n_embd, "hidden_size", file, from);
    take(m.ffn_hidden, s.ffn_hidden, "intermediate_size", file, from);
    take(m.vocab_size, s.vocab_size, "vocab_size", file, from);
    take(m.rms_norm_eps, s.rms_norm_eps, "rms_norm_eps", file, from);
    take(m.rope_theta, s.rope_theta, "rope_theta", file, from);
    Choice<RopeScaling> scaling = s.rope_scaling;
    take(m.rope_scaling, scaling, "rope_scaling.rope_type", file, from);
    if (s.rope_scaling != RopeScaling::none) take(m.rope_factor, s.rope_factor, "rope_scaling.factor", file, from);
    if (s.rope_scaling == RopeScaling::llama3) {
      take(m.rope_low_freq_factor, s.rope_low_freq_factor, "rope_scaling.low_freq_factor", file, from);
      take(m.rope_high_freq_factor, s.rope_high_freq_factor, "rope_scaling.high_freq_factor", file, from);
      take(m.rope_original_max_position, s.rope_original_max_position,
           "rope_scaling.original_max_position_embeddings", file, from);
    }
    const std::string bias = key_of(&m.qkv_bias);
    if (origins.count(bias) && m.qkv_bias != s.qkv_bias)
      throw_usage(where(bias), ": ", bias, " = ", m.qkv_bias ? "true" : "false", ", but ", file.string(),
                  " says model_type = \"", s.model_type, "\", which has ", s.qkv_bias ? "" : "no ",
                  "q/k/v biases (", from, " fixes the model's shape: leave ", bias, " out)");
    m.qkv_bias = s.qkv_bias;
    const std::string block = key_of(&m.block_size);
    if (!origins.count(block))
      m.block_size = s.max_position_embeddings;
    else if (m.block_size > s.max_position_embeddings)
      throw_usage(where(block), ": ", block, " = ", m.block_size, ", but ", file.string(),
                  " says max_position_embeddings = ", s.max_position_embeddings,
                  " (the longest sequence the model takes): set ", block, " to at most that");
    // A window at least the block is causal attention over the whole block, which dl-train computes.
    if (s.sliding_window > 0 && s.sliding_window < m.block_size)
      throw_usage(where(block), ": ", file.string(), " says sliding_window = ", s.sliding_window,
                  " (each token attends only to the last ", s.sliding_window, "), but ", block, " is ", m.block_size,
                  " and dl-train's llama attends to the whole block: set ", block, " to at most ", s.sliding_window,
                  ", where the window is full causal attention");
    return s.tie_word_embeddings;
  }

  void run() {
    visit_config(cfg, [&](std::string_view s, std::string_view k, auto& field, const Spec& spec) {
      check(std::string(s) + "." + std::string(k), field, spec);
    });
    if (!cfg.model.init_from.empty() && init_from_use == InitFromUse::start) apply_init_from();
    const auto& m = cfg.model;
    if (m.type == ModelType::gpt && m.n_embd % m.n_head != 0)
      fail({&m.n_embd, &m.n_head}, key_of(&m.n_embd), " (", m.n_embd, ") must be divisible by ", key_of(&m.n_head),
           " (", m.n_head, ") for a gpt model");
    if (m.type == ModelType::llama) {
      if (m.n_embd % m.n_head != 0 || (m.n_embd / m.n_head) % 2 != 0)
        fail({&m.n_embd, &m.n_head}, key_of(&m.n_embd), " (", m.n_embd, ") must be ", key_of(&m.n_head), " (", m.n_head,
             ") heads of an even size for a llama model (rotary embeddings rotate pairs)");
      if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
        fail({&m.n_kv_head, &m.n_head}, key_of(&m.n_kv_head), " (", m.n_kv_head, ") must divide ", key_of(&m.n_head),
             " (", m.n_head, "): each K/V head serves a whole group of query heads");
      if (m.rope_scaling == RopeScaling::llama3 && !(m.rope_high_freq_factor > m.rope_low_freq_factor))
        fail({&m.rope_high_freq_factor, &m.rope_low_freq_factor, &m.rope_scaling}, key_of(&m.rope_high_freq_factor),
             " (", m.rope_high_freq_factor, ") must be above ", key_of(&m.rope_low_freq_factor), " (",
             m.rope_low_freq_factor, ") for rope_scaling = \"llama3\"");
    }
    if (m.type != ModelType::mlp) {
      // An upper bound (a GELU MLP of 4 n_embd where ffn_hidden is 0; every expert and bias), so
      // any model it admits counts in int64.
      const long double d = static_cast<long double>(m.n_embd);
      const long double ffn = m.ffn_hidden > 0 ? static_cast<long double>(m.ffn_hidden) : 4 * d;
      const long double expert = m.expert_ffn_hidden > 0 ? static_cast<long double>(m.expert_ffn_hidden) : ffn;
      const long double block = 4 * d * d + 3 * d * ffn + 16 * d +
                                static_cast<long double>(m.n_experts + m.n_shared_experts) * (3 * d * expert + d);
      const long double params = static_cast<long double>(m.n_layer) * block +
                                 2 * d * static_cast<long double>(m.vocab_size + m.block_size);
      if (params > kMaxModelParameters)
        fail({&m.n_embd, &m.n_layer, &m.vocab_size, &m.ffn_hidden, &m.n_experts}, key_of(&m.n_layer), " ", m.n_layer,
             ", ", key_of(&m.n_embd), " ", m.n_embd, ", ", key_of(&m.vocab_size), " ", m.vocab_size,
             " describe about ", static_cast<double>(params), " parameters, more than the ", kMaxModelParameters,
             " dlkit builds or plans: check the model's sizes");
    }
    // torch.optim.SGD refuses the same: Nesterov's look-ahead is defined for undamped momentum.
    const auto& o = cfg.optim;
    if (o.name == OptimizerKind::sgd && o.nesterov && (o.momentum == 0.0 || o.dampening != 0.0))
      fail({&o.nesterov, &o.momentum, &o.dampening}, key_of(&o.nesterov), " needs ", key_of(&o.momentum), " > 0 and ",
           key_of(&o.dampening), " = 0 (as torch.optim.SGD), got momentum ", o.momentum, " and dampening ", o.dampening);
  }
};

Config parse_impl(std::string_view text, std::string_view source_name, const fs::path& base_dir,
                  const std::vector<std::string>& overrides, InitFromUse init_from_use = InitFromUse::start) {
  fs::path base = fs::absolute(base_dir).lexically_normal();
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw_usage(source_name, ":", e.source().begin.line, ":", e.source().begin.column,
                ": TOML syntax error: ", e.description());
  }
  Config cfg;
  Origins origins;
  std::map<std::string, std::string> unknown_choices;
  for (auto&& [skey, snode] : root) {
    std::string section(skey.str());
    std::string where = at_line(source_name, skey.source().begin.line ? skey.source() : snode.source());
    auto table = snode.as_table();
    if (!table) {
      if (is_section(section))
        throw_usage(where, ": ", section, " must be a section ([", section, "] followed by its keys), got ", describe(snode));
      unknown_key(where, "", section);
    }
    if (!is_section(section)) unknown_section(where, section);
    for (auto&& [k, node] : *table) {
      std::string key(k.str());
      std::string kwhere = at_line(source_name, k.source().begin.line ? k.source() : node.source());
      Target t{kwhere, section + "." + key, nullptr, &unknown_choices};
      if (!set_key(cfg, section, key, node, t)) unknown_key(kwhere, section, key);
      origins[t.full_key] = Origin{kwhere, base, false};
    }
  }
  for (const auto& ov : overrides) apply_override(cfg, origins, unknown_choices, ov);
  Checker{cfg, origins, unknown_choices, std::string(source_name), base, init_from_use}.run();
  return cfg;
}

}  // namespace

Config parse_config(std::string_view toml_text, std::string_view source_name, const fs::path& base_dir,
                    const std::vector<std::string>& overrides) {
  return parse_impl(toml_text, source_name, base_dir, overrides);
}

Config load_config(const fs::path& file, const std::vector<std::string>& overrides, InitFromUse init_from) {
  std::error_code ec;
  auto st = fs::status(file, ec);
  if (!fs::exists(st)) throw_usage("config file not found: ", file.string());
  if (fs::is_directory(st)) throw_usage("config file is a directory: ", file.string());
  const std::string text = read_input_file(file, "cannot read config file");
  return parse_impl(text, file.string(), fs::absolute(file).parent_path(), overrides, init_from);
}

std::string toml_float(double x) { return format_float(x); }

std::string config_to_toml(const Config& config) {
  std::string out;
  std::string_view section;
  visit_config(config, [&](std::string_view s, std::string_view k, const auto& field, const Spec& spec) {
    if (s != section) {
      out += str(section.empty() ? "" : "\n", "[", s, "]\n");
      section = s;
    }
    std::string allowed = allowed_text(field, spec);
    out += str("# ", spec.help, allowed.empty() ? "" : " (" + allowed + ")", "\n");
    out += str(k, " = ", toml_value(field, spec), "\n");
  });
  return out;
}

std::vector<ConfigKeyDoc> config_key_docs() {
  std::vector<ConfigKeyDoc> docs;
  const Config defaults;
  visit_config(defaults, [&](std::string_view s, std::string_view k, const auto& field, const Spec& spec) {
    docs.push_back({str(s, ".", k), type_name(field, spec), toml_value(field, spec), std::string(spec.help),
                    allowed_text(field, spec)});
  });
  return docs;
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      std::error_code ec;
      if (fs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
    }
  ::globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) throw_runtime("cannot expand ", pattern, ": glob failed (", rc, ")");
  std::sort(out.begin(), out.end());
  return out;
}

DataSourceSpec split_data_source(std::string_view source) {
  size_t colon = source.find(':');
  if (colon == std::string_view::npos) return {std::string(), std::string(source)};
  return {std::string(source.substr(0, colon)), std::string(source.substr(colon + 1))};
}

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace dl
