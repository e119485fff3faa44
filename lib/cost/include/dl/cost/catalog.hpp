// The cloud GPU catalog dl-cost prices experiments against: offers (an instance type of a
// provider: GPUs, memory, on-demand and spot $/h, where and when the price was read), loaded from
// the project's own TOML catalog (configs/catalog/*.toml, schema "dlkit-catalog/1") or from Full
// Stack Deep Learning's cloud-gpus.csv / serverless-gpus.csv tables. Formats, quirks and
// sources: docs/COST.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dl/plan/gpus.hpp"

namespace dl::cost {

// How the GPUs of one instance talk to each other; picks the multi-GPU scaling efficiency.
enum class Interconnect {
  nvlink,    // SXM/HGX boards, NVLink + NVSwitch (H100/H200/A100 SXM, V100 SXM2, GH200)
  pcie,      // datacenter and workstation cards on PCIe (L4, L40S, A10, A100 PCIe, RTX A6000, ...)
  consumer,  // GeForce cards: PCIe without peer-to-peer (RTX 4090, 3090, 3080 Ti)
};
inline constexpr std::string_view kInterconnectNames[] = {"nvlink", "pcie", "consumer"};
constexpr std::span<const std::string_view> choice_names(Interconnect) { return kInterconnectNames; }
inline constexpr ChoiceAlias<Interconnect> kInterconnectAliases[] = {{"sxm", Interconnect::nvlink}};
constexpr std::span<const ChoiceAlias<Interconnect>> choice_aliases(Interconnect) { return kInterconnectAliases; }
std::string interconnect_name(Interconnect c);  // "nvlink" | "pcie" | "consumer"
// "nvlink" | "pcie" | "consumer"; usage error naming `what` otherwise.
Interconnect parse_interconnect(const std::string& s, const std::string& what);
// The class a GPU model's boards usually have: NVLink when its table entry's interconnect is
// NVLink, consumer for GeForce cards, PCIe otherwise.
Interconnect interconnect_of(const plan::GpuSpec& gpu);

struct Offer {
  std::string id;          // unique in a loaded catalog: "aws/p5.48xlarge", "lambda/8x-a100-80-gb#2"
  std::string provider;    // "AWS"
  std::string instance;    // "p5.48xlarge"; FSDL rows without a Name: "8x A100 (80 GB)"
  std::string region;      // "" when the source does not say
  std::string gpu_name;    // as the source writes it: "A100 (80 GB)"
  std::string gpu_model;   // canonical (plan::canonical_gpu); "" when the name does not map
  int64_t gpu_count = 0;   // GPUs per instance
  double gpu_mem_bytes = 0;  // per GPU (decimal bytes); 0 when unknown
  std::optional<double> on_demand;  // USD per hour per instance
  std::optional<double> spot;       // USD per hour per instance
  std::optional<double> per_gpu_listed;  // the source's own per-GPU price column, when it has one
  Interconnect interconnect = Interconnect::pcie;
  std::string vcpus, ram;  // as written: "96", "20-26", "" (informational)
  std::string catalog;     // the file the offer came from
  int64_t line = 0;        // its line in that file (0 when not known)
  std::string price_source;  // URL or name of the price's source
  std::string as_of;         // date of the price: "2024-06"
  std::string spot_source, spot_as_of;  // when the spot price has another source or date
  std::vector<std::string> notes;  // quirks found while reading: "GPU RAM given per GPU", ...

  // Why the offer cannot be priced with on-demand (spot = false) or spot (true) prices; "" when
  // it can: "no on-demand price in the source", "GPU type 'X' is not in dlkit's GPU table".
  std::string why_unusable(bool spot_price = false) const;
  std::optional<double> price(bool spot_price) const { return spot_price ? spot : on_demand; }
};

struct Catalog {
  std::vector<Offer> offers;
  std::vector<std::string> files;     // what was read
  std::vector<std::string> warnings;  // unmappable GPU names, rows skipped (not strict), quirks
};

struct CatalogOptions {
  // A malformed row (wrong column count, a count or price that is not a number, GPUs < 1, a
  // negative price, vCPUs/RAM that are neither a number nor a range) is an error naming the file
  // and line instead of a warning.
  bool strict = false;
};

// Full Stack Deep Learning's tables: cloud-gpus.csv (Cloud, GPU Type, GPU Arch, GPUs, GPU RAM,
// vCPUs, RAM, On-demand, Per-GPU, Spot, Name) and serverless-gpus.csv (Vendor, ..., Per-Hour,
// Per-GPU), told apart by the header. Every well-formed row becomes an offer, priced or not.
Catalog parse_fsdl_csv(const std::string& text, const std::string& source, const CatalogOptions& opt = {});
// dlkit's catalog TOML (schema "dlkit-catalog/1", [[offer]] tables; docs/COST.md). Any error
// (unknown key, missing key, bad value, unknown GPU) names the file and line.
Catalog parse_catalog_toml(const std::string& text, const std::string& source);

// The folder of the shipped catalog: $DLKIT_CATALOG_DIR, else configs/catalog next to the
// executable's build or install tree, else the source tree this library was built from.
// Throws a usage error saying where it looked when none exists.
std::filesystem::path default_catalog_dir();

// Reads catalogs: each entry a .toml or .csv file, a folder (its *.toml files of schema
// "dlkit-catalog/1"), or "builtin" (the shipped catalog); no entries: the shipped catalog.
// Offer ids are made unique across files (a repeated id gets "@<file stem>", then "#2", "#3").
// Throws a usage error for an unreadable file and for a catalog with no offers at all.
Catalog load_catalogs(const std::vector<std::string>& paths, const CatalogOptions& opt = {});

// The offer a user names: an id ("aws/p5.48xlarge", any case) or an instance name that is
// unique ("p5.48xlarge"). Usage error naming the offer otherwise (with close matches).
const Offer& find_offer(const Catalog& c, const std::string& query);

// Offers whose GPU matches `gpu` (a canonical model name exactly, else a case-insensitive
// substring of the model or raw name ignoring spaces and dashes: "H100" matches H100-SXM,
// H100-PCIe and "H100 (80 GB)") and whose provider contains `provider` (case-insensitive).
// Empty filters match everything.
std::vector<const Offer*> filter_offers(const Catalog& c, const std::string& gpu, const std::string& provider);

// "AWS" + "p5.48xlarge" -> "aws/p5.48xlarge": lower case, runs of other characters as one '-'.
std::string offer_slug(const std::string& provider, const std::string& instance);

}  // namespace dl::cost
