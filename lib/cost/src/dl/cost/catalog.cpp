#include "dl/cost/catalog.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/strings.hpp"
#include "dl/io/input_file.hpp"
#include "dl/io/csv.hpp"

namespace dl::cost {

namespace fs = std::filesystem;

namespace {

// More GPUs than any instance has: a cell above it is a typo or corruption, not an offer.
constexpr int64_t kMaxGpusPerInstance = 1'000'000;

// A whole cell as a number: "40.97", " 8 "; nullopt for anything else ("", "n/a", "1.5x").
std::optional<double> number(const std::string& cell) {
  std::string t = trim(cell, kBlank);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// "96", "20-26" or "" (vCPUs and RAM cells).
bool number_or_range(const std::string& cell) {
  std::string t = trim(cell, kBlank);
  if (t.empty() || number(t)) return true;
  size_t dash = t.find('-', 1);
  if (dash == std::string::npos) return false;
  auto a = number(t.substr(0, dash)), b = number(t.substr(dash + 1));
  return a && b && *a >= 0 && *a <= *b;
}

// "(80 GB)", "80GB" inside a GPU name: the per-GPU memory in GB, or 0.
double memory_in_name(const std::string& name) {
  std::string u = to_lower(name);
  for (size_t i = 0; i < u.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(u[i])) || (i > 0 && (std::isalnum(static_cast<unsigned char>(u[i - 1])))))
      continue;
    size_t j = i;
    while (j < u.size() && (std::isdigit(static_cast<unsigned char>(u[j])) || u[j] == '.')) ++j;
    size_t k = j;
    while (k < u.size() && u[k] == ' ') ++k;
    if (u.compare(k, 2, "gb") == 0) return std::atof(u.substr(i, j - i).c_str());
    i = j;
  }
  return 0;
}

std::string money(double v) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(v < 10 ? 3 : 2);
  os << "$" << v;
  return os.str();
}

}  // namespace

std::string interconnect_name(Interconnect c) { return std::string(choice_name(c)); }

Interconnect parse_interconnect(const std::string& s, const std::string& what) {
  if (auto c = parse_choice<Interconnect>(to_lower(trim(s, kBlank)))) return *c;
  throw_usage(what, ": interconnect must be nvlink, pcie or consumer, got '", s, "'");
}

Interconnect interconnect_of(const plan::GpuSpec& gpu) {
  if (gpu.interconnect.rfind("NVLink", 0) == 0) return Interconnect::nvlink;
  if (gpu.name.find("GeForce") != std::string::npos) return Interconnect::consumer;
  return Interconnect::pcie;
}

std::string Offer::why_unusable(bool spot_price) const {
  if (gpu_model.empty()) return "GPU type '" + gpu_name + "' is not in dlkit's GPU table (no speed or memory known)";
  if (gpu_count < 1) return "no GPU count";
  if (spot_price) {
    if (!spot) return "no spot price in the source";
  } else if (!on_demand) {
    return per_gpu_listed ? "no on-demand price in the source (its per-GPU column is not used: per-GPU is not always "
                            "on-demand / GPUs in these tables)"
                          : "no on-demand price in the source";
  }
  if (gpu_mem_bytes <= 0) return "GPU memory unknown";
  return "";
}

std::string offer_slug(const std::string& provider, const std::string& instance) {
  auto slug = [](const std::string& s) {
    std::string out;
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      if (std::isalnum(u) || c == '.' || c == '_') out += static_cast<char>(std::tolower(u));
      else if (!out.empty() && out.back() != '-') out += '-';
    }
    while (!out.empty() && out.back() == '-') out.pop_back();
    return out;
  };
  return slug(provider) + "/" + slug(instance);
}

Catalog parse_fsdl_csv(const std::string& text, const std::string& source, const CatalogOptions& opt) {
  Catalog cat;
  cat.files.push_back(source);
  auto records = parse_csv(text, source);
  if (records.empty()) throw_usage(source, ": empty catalog (no header, no rows)");
  const CsvRecord& header = records.front();
  const bool serverless = csv_column(header, "Vendor") >= 0;
  auto col = [&](const char* name, bool required) -> int64_t {
    int64_t c = csv_column(header, name);
    if (c < 0 && required)
      throw_usage(source, ":", header.line, ": not a Full Stack Deep Learning GPU table: no '", name,
                  "' column (expected Cloud,GPU Type,GPU Arch,GPUs,GPU RAM,vCPUs,RAM,On-demand,Per-GPU,Spot,Name"
                  " or Vendor,GPU Type,GPU Arch,GPUs,GPU RAM,vCPUs,RAM,Per-Hour,Per-GPU)");
    return c;
  };
  const int64_t c_provider = col(serverless ? "Vendor" : "Cloud", true);
  const int64_t c_type = col("GPU Type", true);
  const int64_t c_gpus = col("GPUs", true);
  const int64_t c_ram = col("GPU RAM", true);
  const int64_t c_price = col(serverless ? "Per-Hour" : "On-demand", true);
  const int64_t c_spot = serverless ? -1 : col("Spot", true);
  const int64_t c_per_gpu = col("Per-GPU", false);
  const int64_t c_name = serverless ? -1 : col("Name", false);
  const int64_t c_vcpus = col("vCPUs", false);
  const int64_t c_hostram = col("RAM", false);
  const std::string price_col = serverless ? "Per-Hour" : "On-demand";
  const std::string file_name = fs::path(source).filename().string();

  std::map<std::string, std::vector<int64_t>> unmapped;  // GPU type -> lines
  for (size_t r = 1; r < records.size(); ++r) {
    const CsvRecord& rec = records[r];
    const std::string where = str(source, ":", rec.line);
    std::vector<std::string> problems;
    auto malformed = [&](const std::string& what) {
      if (opt.strict) throw_usage(where, ": malformed row (--strict): ", what);
      problems.push_back(what);
    };
    if (rec.cells.size() != header.cells.size()) {
      malformed(str(rec.cells.size(), " cells, the header has ", header.cells.size()));
      cat.warnings.push_back(str(where, ": row skipped: ", problems.back()));
      continue;
    }
    auto cell = [&](int64_t c) { return c >= 0 ? trim(rec.cells[static_cast<size_t>(c)], kBlank) : std::string(); };
    Offer o;
    o.catalog = source;
    o.line = rec.line;
    o.provider = cell(c_provider);
    o.gpu_name = cell(c_type);
    o.vcpus = cell(c_vcpus);
    o.ram = cell(c_hostram);
    o.price_source = "Full Stack Deep Learning " + std::string(serverless ? "serverless" : "cloud") +
                     " GPU table (" + file_name + ")";
    if (o.provider.empty()) malformed(str("empty ", serverless ? "Vendor" : "Cloud"));
    if (o.gpu_name.empty()) malformed("empty GPU Type");
    auto gpus = number(cell(c_gpus));
    // The upper bound keeps the conversion to int64 defined (fuzz_cost_csv found GPUs = 2e83).
    if (!gpus || *gpus < 1 || *gpus > kMaxGpusPerInstance || std::floor(*gpus) != *gpus) {
      malformed(str("GPUs '", cell(c_gpus), "' is not a whole number from 1 to ", kMaxGpusPerInstance));
      cat.warnings.push_back(str(where, ": row skipped: ", problems.back()));
      continue;
    }
    o.gpu_count = static_cast<int64_t>(*gpus);
    bool dollar = false;
    auto price = [&](int64_t c, const std::string& name) -> std::optional<double> {
      if (c < 0) return std::nullopt;
      std::string t = cell(c);
      if (t.empty()) return std::nullopt;
      auto v = number(t[0] == '$' ? t.substr(1) : t);
      if (t[0] == '$' && v) dollar = true;
      if (!v || *v < 0) {
        malformed(str(name, " '", t, "' is not a price (USD per hour)"));
        o.notes.push_back(str(name, " '", t, "' is not a price: treated as missing"));
        return std::nullopt;
      }
      return v;
    };
    o.on_demand = price(c_price, price_col);
    o.spot = price(c_spot, "Spot");
    o.per_gpu_listed = price(c_per_gpu, "Per-GPU");
    if (!number_or_range(o.vcpus)) malformed(str("vCPUs '", o.vcpus, "' is neither a number nor a range"));
    if (!number_or_range(o.ram)) malformed(str("RAM '", o.ram, "' is neither a number nor a range"));
    if (dollar) o.notes.push_back("prices written with '$'");
    double ram_gb = -1;  // the GPU RAM column; -1 when empty or malformed
    if (!cell(c_ram).empty()) {
      // "640", or "40GB" as a few serverless rows write it.
      std::string t = cell(c_ram);
      if (t.size() > 2 && to_lower(t.substr(t.size() - 2)) == "gb") t = trim(t.substr(0, t.size() - 2), kBlank);
      auto v = number(t);
      if (v && *v >= 0) ram_gb = *v;
      else malformed(str("GPU RAM '", cell(c_ram), "' is not a number of GB"));
    }
    for (const auto& p : problems) cat.warnings.push_back(str(where, ": ", p));

    std::string name = cell(c_name);
    o.instance = name.empty() ? str(o.gpu_count, "x ", o.gpu_name) : name;
    auto model = plan::canonical_gpu(o.gpu_name);
    // An ambiguous type ("Nvidia A100") with the memory per GPU in the GPU RAM column: the two
    // together may name one model ("Nvidia A100 40GB" -> A100-SXM-40GB, the catalog convention).
    if (!model && ram_gb > 0 && memory_in_name(o.gpu_name) <= 0) {
      const double per = ram_gb / static_cast<double>(o.gpu_count);
      model = plan::canonical_gpu(str(o.gpu_name, " ", per, "GB"));
      if (model) o.notes.push_back(str("GPU model ", *model, " from the GPU Type and ", per, " GB per GPU in GPU RAM"));
    }
    const auto spec = model ? plan::gpu_spec(*model) : std::nullopt;
    if (spec) {
      o.gpu_model = spec->model;
      o.interconnect = interconnect_of(*spec);
    } else {
      unmapped[o.gpu_name].push_back(rec.line);
    }
    // Per-GPU memory: the GPU model's, else the size in the name, else GPU RAM / GPUs. The
    // GPU RAM column is per instance in most rows and per GPU in some: say which.
    double per_gpu_gb = spec ? spec->memory_bytes / 1e9 : memory_in_name(o.gpu_name);
    const double n = static_cast<double>(o.gpu_count);
    if (per_gpu_gb <= 0 && ram_gb >= 0) per_gpu_gb = ram_gb / n;
    o.gpu_mem_bytes = per_gpu_gb * 1e9;
    if (ram_gb >= 0 && per_gpu_gb > 0) {
      if (std::fabs(ram_gb - n * per_gpu_gb) < 0.5) {
        // per instance, as the column is meant
      } else if (o.gpu_count > 1 && std::fabs(ram_gb - per_gpu_gb) < 0.5) {
        o.notes.push_back(str("GPU RAM ", ram_gb, " GB is given per GPU, not per instance"));
      } else {
        o.notes.push_back(str("GPU RAM ", ram_gb, " GB is neither ", o.gpu_count, " x ", per_gpu_gb, " GB nor ",
                              per_gpu_gb, " GB: ", per_gpu_gb, " GB per GPU (from the GPU type) is used"));
      }
    }
    if (o.on_demand && o.per_gpu_listed) {
      const double per = *o.on_demand / n;
      if (std::fabs(per - *o.per_gpu_listed) > std::max(0.01, 0.02 * *o.per_gpu_listed))
        o.notes.push_back(str("Per-GPU ", money(*o.per_gpu_listed), " differs from ", price_col, " / GPUs = ", money(per),
                              ": the instance price is used"));
    }
    if (o.vcpus.find('-') != std::string::npos || o.ram.find('-') != std::string::npos)
      o.notes.push_back("vCPUs/RAM given as a range");
    cat.offers.push_back(std::move(o));
  }
  for (const auto& [type, lines] : unmapped) {
    std::string l;
    for (size_t i = 0; i < lines.size() && i < 5; ++i) l += (i ? ", " : "") + std::to_string(lines[i]);
    if (lines.size() > 5) l += ", ...";
    cat.warnings.push_back(str(source, ": GPU type '", type, "' (", lines.size(), lines.size() == 1 ? " row" : " rows",
                               ", line", lines.size() == 1 ? " " : "s ", l,
                               ") does not map to a GPU in dlkit's table (ambiguous or unknown): listed, not estimated"));
  }
  return cat;
}

fs::path default_catalog_dir() {
  std::vector<fs::path> tried;
  auto good = [&](const fs::path& p) {
    tried.push_back(p);
    std::error_code ec;
    return fs::is_directory(p, ec);
  };
  if (const char* env = std::getenv("DLKIT_CATALOG_DIR"); env && *env) {
    if (good(env)) return fs::path(env);
    throw_usage("DLKIT_CATALOG_DIR=", env, " is not a folder");
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path bin = exe.parent_path();
    for (const fs::path& p : {bin / ".." / "share" / "dlkit" / "catalog", bin / ".." / ".." / "configs" / "catalog",
                              bin / ".." / "configs" / "catalog"})
      if (good(p)) return fs::weakly_canonical(p, ec);
  }
  // The source tree this file was compiled from (lib/CMakeLists.txt defines it on this file only:
  // __FILE__ is relative when ccache compiles with CCACHE_BASEDIR).
  if (const fs::path p = fs::path(DL_SOURCE_DIR) / "configs" / "catalog"; good(p)) return fs::weakly_canonical(p, ec);
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t.string();
  throw_option_error("cannot find dlkit's shipped catalog (looked in ", list, "); set DLKIT_CATALOG_DIR or pass {catalogs} FILE");
}

namespace {

// `what` names the option ("{catalogs}").
std::string read_text(const fs::path& p, const std::string& what) {
  return read_naming_option(what + ": cannot read", [&](const std::string& prefix) { return read_input_file(p, prefix); });
}

// A TOML file's top-level schema value, read without a TOML parser (first `schema = "..."`).
std::string toml_schema(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string t = trim(line, kBlank);
    if (t.empty() || t[0] == '#') continue;
    if (t[0] == '[') return "";
    if (t.rfind("schema", 0) == 0) {
      size_t q1 = t.find('"'), q2 = t.find('"', q1 + 1);
      if (q1 != std::string::npos && q2 != std::string::npos) return t.substr(q1 + 1, q2 - q1 - 1);
    }
  }
  return "";
}

void append(Catalog& into, Catalog&& part) {
  for (auto& f : part.files) into.files.push_back(std::move(f));
  for (auto& w : part.warnings) into.warnings.push_back(std::move(w));
  for (auto& o : part.offers) into.offers.push_back(std::move(o));
}

Catalog load_one(const std::string& path, const CatalogOptions& opt) {
  const std::string what = "{catalogs}";
  fs::path p = path == "builtin" ? default_catalog_dir() : fs::path(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    Catalog c;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.is_regular_file() && e.path().extension() == ".toml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string text = read_text(f, what);
      if (toml_schema(text) == "dlkit-catalog/1") append(c, parse_catalog_toml(text, f.string()));
    }
    if (c.files.empty())
      throw OptionError(what + ": ", ErrorKind::usage, p.string() + " has no catalog files (*.toml with schema = \"dlkit-catalog/1\")");
    return c;
  }
  if (!fs::exists(p, ec)) throw OptionError(what + ": no such file ", ErrorKind::usage, path);
  std::string text = read_text(p, what);
  if (p.extension() == ".toml") {
    std::string schema = toml_schema(text);
    if (schema != "dlkit-catalog/1")
      throw_usage(path, ": not a dlkit catalog (schema = \"dlkit-catalog/1\" expected, found ",
                  schema.empty() ? std::string("none") : "\"" + schema + "\"", "; docs/COST.md)");
    return parse_catalog_toml(text, path);
  }
  return parse_fsdl_csv(text, path, opt);
}

}  // namespace

Catalog load_catalogs(const std::vector<std::string>& paths, const CatalogOptions& opt) {
  Catalog all;
  if (paths.empty()) {
    all = load_one("builtin", opt);
  } else {
    for (const auto& p : paths) append(all, load_one(p, opt));
  }
  if (all.offers.empty()) {
    const std::string files = join(all.files, ", ");
    throw_usage("empty catalog: no offers in ", files.empty() ? std::string("the given catalogs") : files);
  }
  // Unique ids: provider/instance; a repeat from another file gets "@<stem>", then "#k".
  std::set<std::string> seen;
  for (auto& o : all.offers) {
    std::string id = offer_slug(o.provider, o.instance);
    if (seen.count(id)) {
      std::string stem = to_lower(fs::path(o.catalog).stem().string());
      bool other_file = false;
      for (const auto& q : all.offers) {
        if (&q == &o) break;
        if (q.id == id && q.catalog != o.catalog) other_file = true;
      }
      if (other_file && !seen.count(id + "@" + stem)) id += "@" + stem;
    }
    if (seen.count(id)) {
      int k = 2;
      while (seen.count(id + "#" + std::to_string(k))) ++k;
      id += "#" + std::to_string(k);
    }
    seen.insert(id);
    o.id = id;
  }
  return all;
}

const Offer& find_offer(const Catalog& c, const std::string& query) {
  const std::string q = to_lower(trim(query, kBlank));
  if (q.empty()) throw_option_error("{on_offer}: name an offer (an id from `dl-cost offers`, e.g. aws/p5.48xlarge)");
  for (const auto& o : c.offers)
    if (o.id == q) return o;
  std::vector<const Offer*> by_instance;
  for (const auto& o : c.offers) {
    std::string slug = offer_slug("", o.instance).substr(1);
    if (to_lower(o.instance) == q || slug == q) by_instance.push_back(&o);
  }
  if (by_instance.size() == 1) return *by_instance.front();
  if (by_instance.size() > 1) {
    std::string ids;
    for (const auto* o : by_instance) ids += (ids.empty() ? "" : ", ") + o->id;
    throw_usage("offer '", query, "' is ambiguous: ", ids);
  }
  std::vector<std::string> close;
  const std::string sq = lower_alnum(query);
  for (const auto& o : c.offers) {
    if (close.size() >= 5) break;
    if (!sq.empty() && (lower_alnum(o.id).find(sq) != std::string::npos || sq.find(lower_alnum(o.instance)) != std::string::npos))
      close.push_back(o.id);
  }
  const std::string hint = join(close, ", ");
  throw_usage("unknown offer '", query, "'", hint.empty() ? std::string() : " (close: " + hint + ")",
              "; list the ids with `dl-cost offers`");
}

std::vector<const Offer*> filter_offers(const Catalog& c, const std::string& gpu, const std::string& provider) {
  std::vector<const Offer*> out;
  std::string exact;
  for (const auto& g : plan::gpu_table())
    if (to_lower(g.model) == to_lower(trim(gpu, kBlank))) exact = g.model;
  const std::string sg = lower_alnum(gpu), sp = to_lower(trim(provider, kBlank));
  for (const auto& o : c.offers) {
    if (!gpu.empty()) {
      bool match = !exact.empty() ? o.gpu_model == exact
                                  : (lower_alnum(o.gpu_model).find(sg) != std::string::npos ||
                                     lower_alnum(o.gpu_name).find(sg) != std::string::npos);
      if (!match) continue;
    }
    if (!sp.empty() && to_lower(o.provider).find(sp) == std::string::npos) continue;
    out.push_back(&o);
  }
  return out;
}

}  // namespace dl::cost
