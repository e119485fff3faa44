// The two TOML formats dl-cost reads, kept in one translation unit so toml++ is compiled once:
// the offer catalog (schema "dlkit-catalog/1") and the relative-throughput table
// (schema "dlkit-relative-throughput/1"). Formats: docs/COST.md.
#include <toml++/toml.h>

#include <cmath>
#include <set>

#include "dl/cli/units.hpp"
#include "dl/core/error.hpp"
#include "dl/cost/catalog.hpp"
#include "dl/cost/throughput.hpp"

namespace dl::cost {

namespace {

toml::table parse_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw_usage(source, ":", e.source().begin.line, ":", e.source().begin.column, ": TOML syntax error: ", e.description());
  }
}

std::string at(const std::string& source, const toml::node& n) {
  if (n.source().begin.line == 0) return source;
  return str(source, ":", n.source().begin.line);
}

// Reads the keys of one table, checking types and that no unknown key is present.
class Fields {
 public:
  Fields(const toml::table& t, std::string where, std::string what) : t_(t), where_(std::move(where)), what_(std::move(what)) {}

  std::optional<std::string> text(const std::string& key, bool required = false) {
    used_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return missing<std::string>(key, required);
    if (auto v = n->value<std::string>()) return *v;
    throw_usage(where_, ": ", what_, ".", key, " must be a string");
  }
  std::optional<double> number(const std::string& key, bool required = false) {
    used_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return missing<double>(key, required);
    if (n->is_integer() || n->is_floating_point()) {
      double v = *n->value<double>();
      if (!std::isfinite(v)) throw_usage(where_, ": ", what_, ".", key, " must be a finite number");
      return v;
    }
    throw_usage(where_, ": ", what_, ".", key, " must be a number");
  }
  std::optional<int64_t> integer(const std::string& key, bool required = false) {
    used_.insert(key);
    const toml::node* n = t_.get(key);
    if (!n) return missing<int64_t>(key, required);
    if (auto v = n->value_exact<int64_t>()) return *v;
    throw_usage(where_, ": ", what_, ".", key, " must be an integer");
  }
  std::vector<std::string> strings(const std::string& key) {
    used_.insert(key);
    std::vector<std::string> out;
    const toml::node* n = t_.get(key);
    if (!n) return out;
    const toml::array* a = n->as_array();
    if (!a) throw_usage(where_, ": ", what_, ".", key, " must be an array of strings");
    for (const auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v) throw_usage(where_, ": ", what_, ".", key, " must be an array of strings");
      out.push_back(*v);
    }
    return out;
  }
  void known(const std::string& key) { used_.insert(key); }
  void no_unknown_keys(const std::string& allowed) const {
    for (auto&& [k, v] : t_) {
      std::string key(k.str());
      if (!used_.count(key))
        throw_usage(at(where_file(), v), ": unknown key '", what_, ".", key, "' (known: ", allowed, ")");
    }
  }

 private:
  template <class T>
  std::optional<T> missing(const std::string& key, bool required) {
    if (required) throw_usage(where_, ": ", what_, " needs '", key, "'");
    return std::nullopt;
  }
  std::string where_file() const {
    size_t colon = where_.rfind(':');
    return colon == std::string::npos ? where_ : where_.substr(0, colon);
  }
  const toml::table& t_;
  std::string where_, what_;
  std::set<std::string> used_;
};

}  // namespace

Catalog parse_catalog_toml(const std::string& text, const std::string& source) {
  toml::table root = parse_toml(text, source);
  Catalog cat;
  cat.files.push_back(source);
  Fields top(root, source, "catalog");
  auto schema = top.text("schema", true);
  if (*schema != "dlkit-catalog/1")
    throw_usage(source, ": schema must be \"dlkit-catalog/1\", got \"", *schema, "\"");
  top.text("title");
  top.text("description");
  top.known("offer");  // checked below
  const toml::node* offers = root.get("offer");
  top.no_unknown_keys("schema, title, description, [[offer]]");
  if (!offers) return cat;
  const toml::array* arr = offers->as_array();
  if (!arr) throw_usage(at(source, *offers), ": 'offer' must be an array of tables ([[offer]])");
  const std::string allowed =
      "provider, instance, region, gpu, gpus, gpu_mem, on_demand, spot, interconnect, source, as_of, spot_source, "
      "spot_as_of, vcpus, ram, note";
  for (const auto& node : *arr) {
    const toml::table* t = node.as_table();
    if (!t) throw_usage(at(source, node), ": each [[offer]] must be a table");
    const std::string where = at(source, node);
    Fields f(*t, where, "offer");
    Offer o;
    o.catalog = source;
    o.line = node.source().begin.line;
    o.provider = *f.text("provider", true);
    o.instance = *f.text("instance", true);
    o.region = f.text("region").value_or("");
    o.gpu_name = *f.text("gpu", true);
    auto spec = plan::gpu_spec(o.gpu_name);
    if (!spec) throw_usage(where, ": offer ", o.provider, " ", o.instance, ": unknown GPU '", o.gpu_name,
                           "' (use a model of dlkit's GPU table, e.g. H100-SXM, A100-SXM-80GB, L4)");
    o.gpu_model = spec->model;
    o.interconnect = interconnect_of(*spec);
    o.gpu_count = *f.integer("gpus", true);
    if (o.gpu_count < 1) throw_usage(where, ": offer ", o.instance, ": gpus must be >= 1");
    o.gpu_mem_bytes = spec->memory_bytes;
    if (auto m = f.text("gpu_mem")) o.gpu_mem_bytes = parse_size(*m, where + ": offer.gpu_mem");
    o.on_demand = f.number("on_demand");
    o.spot = f.number("spot");
    for (auto* p : {&o.on_demand, &o.spot})
      if (*p && **p < 0) throw_usage(where, ": offer ", o.instance, ": prices must be >= 0");
    if (auto ic = f.text("interconnect")) o.interconnect = parse_interconnect(*ic, where + ": offer.interconnect");
    o.price_source = *f.text("source", true);
    o.as_of = *f.text("as_of", true);
    o.spot_source = f.text("spot_source").value_or("");
    o.spot_as_of = f.text("spot_as_of").value_or("");
    o.vcpus = f.text("vcpus").value_or("");
    o.ram = f.text("ram").value_or("");
    if (auto n = f.text("note")) o.notes.push_back(*n);
    f.no_unknown_keys(allowed);
    cat.offers.push_back(std::move(o));
  }
  return cat;
}

RelativeThroughput parse_relative_throughput_toml(const std::string& text, const std::string& source) {
  toml::table root = parse_toml(text, source);
  RelativeThroughput rt;
  rt.path = source;
  Fields top(root, source, "table");
  auto schema = top.text("schema", true);
  if (*schema != "dlkit-relative-throughput/1")
    throw_usage(source, ": schema must be \"dlkit-relative-throughput/1\", got \"", *schema, "\"");
  rt.reference = *top.text("reference", true);
  if (!plan::gpu_spec(rt.reference)) throw_usage(source, ": reference GPU '", rt.reference, "' is not in dlkit's GPU table");
  rt.reference = *plan::canonical_gpu(rt.reference);
  rt.source = *top.text("source", true);
  rt.method = top.text("method").value_or("");
  top.known("ratio");
  const toml::node* ratios = root.get("ratio");
  top.no_unknown_keys("schema, reference, source, method, [[ratio]]");
  if (!ratios || !ratios->as_array()) throw_usage(source, ": no [[ratio]] entries");
  for (const auto& node : *ratios->as_array()) {
    const toml::table* t = node.as_table();
    if (!t) throw_usage(at(source, node), ": each [[ratio]] must be a table");
    const std::string where = at(source, node);
    Fields f(*t, where, "ratio");
    RelativeEntry e;
    const std::string precision = *f.text("precision", true);
    const std::optional<Precision> table = parse_choice<Precision>(precision);
    if (!table || *table == Precision::bf16)
      throw_usage(where, ": ratio.precision must be \"fp32\" or \"fp16\", got \"", precision, "\"");
    e.precision = *table;
    e.gpu = *f.text("gpu", true);
    auto model = plan::canonical_gpu(e.gpu);
    if (!model) throw_usage(where, ": GPU '", e.gpu, "' is not in dlkit's GPU table");
    e.gpu = *model;
    e.ratio = *f.number("ratio", true);
    if (!(e.ratio > 0)) throw_usage(where, ": ratio must be > 0");
    e.benchmarks = f.integer("benchmarks").value_or(0);
    e.missing = f.strings("missing");
    e.rows = f.integer("rows").value_or(0);
    e.file = f.text("file").value_or("");
    e.via = f.text("via").value_or("");
    f.no_unknown_keys("precision, gpu, ratio, benchmarks, missing, rows, file, via");
    if (rt.find(e.gpu, e.precision)) throw_usage(where, ": a second ", e.precision, " ratio for ", e.gpu);
    rt.entries.push_back(std::move(e));
  }
  return rt;
}

}  // namespace dl::cost
