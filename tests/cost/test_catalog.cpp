// The catalog readers: the CSV reader, Full Stack Deep Learning's tables with their quirks, dlkit's
// TOML catalog (the shipped one included), offer ids, lookup and filters.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "dl/core/error.hpp"
#include "dl/cost/catalog.hpp"
#include "dl/io/csv.hpp"
#include "support/support.hpp"

using dl::test::has;

using namespace dl::cost;
using dl::parse_csv;
namespace fs = std::filesystem;

namespace {


std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dl::Error& e) {
    CHECK(e.kind() == dl::ErrorKind::usage);
    return e.what();
  }
  return "";
}

const Offer* by_id(const Catalog& c, const std::string& id) {
  for (const auto& o : c.offers)
    if (o.id == id) return &o;
  return nullptr;
}

Catalog fsdl_cloud() {
  auto path = dl::test::shared_path("data/fsdl_cloud-gpus.csv");
  return load_catalogs({path.string()});
}

}  // namespace

TEST_CASE("csv: quotes, CRLF, empty cells and errors") {
  auto recs = parse_csv("a,b,c\r\n1,,\"x, \"\"y\"\"\"\n\n\"multi\nline\",2,3\n", "t.csv");
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].cells == std::vector<std::string>{"a", "b", "c"});
  CHECK(recs[1].line == 2);
  CHECK(recs[1].cells == std::vector<std::string>{"1", "", "x, \"y\""});
  CHECK(recs[2].line == 4);  // the blank line 3 is skipped
  CHECK(recs[2].cells == std::vector<std::string>{"multi\nline", "2", "3"});
  CHECK(csv_column(recs[0], "b") == 1);
  CHECK(csv_column(recs[0], "z") == -1);
  // A trailing empty cell and a last line without a newline.
  auto last = parse_csv("a,b\n1,", "t.csv");
  REQUIRE(last.size() == 2);
  CHECK(last[1].cells == std::vector<std::string>{"1", ""});
  CHECK(has(error_of([] { parse_csv("a,b\n\"open,2\n", "bad.csv"); }), "bad.csv:2: unterminated quoted field"));
  CHECK(has(error_of([] { parse_csv("a,b\n\"x\"y,2\n", "bad.csv"); }), "bad.csv:2: text after a closing quote"));
}

TEST_CASE("FSDL cloud-gpus.csv: all 257 rows load, quirks and missing prices kept") {
  Catalog c = fsdl_cloud();
  REQUIRE(c.offers.size() == 257);
  CHECK(c.warnings.empty());  // every GPU type maps, no row is malformed
  std::set<std::string> ids;
  size_t no_on_demand = 0, no_spot = 0, ranges = 0, per_gpu_ram = 0, per_gpu_mismatch = 0;
  for (const auto& o : c.offers) {
    CAPTURE(o.id);
    CHECK(ids.insert(o.id).second);
    CHECK(!o.gpu_model.empty());
    CHECK(o.gpu_count >= 1);
    CHECK(o.gpu_mem_bytes > 0);
    CHECK(o.line >= 2);
    if (!o.on_demand) {
      ++no_on_demand;
      CHECK(has(o.why_unusable(false), "no on-demand price"));
    } else {
      CHECK(o.why_unusable(false).empty());
    }
    if (!o.spot) {
      ++no_spot;
      CHECK(has(o.why_unusable(true), "no spot price"));
    }
    for (const auto& n : o.notes) {
      ranges += has(n, "range") ? 1 : 0;
      per_gpu_ram += has(n, "is given per GPU") ? 1 : 0;
      per_gpu_mismatch += has(n, "Per-GPU") ? 1 : 0;
    }
  }
  CHECK(no_on_demand == 6);
  CHECK(no_spot == 178);
  CHECK(ranges == 9);  // Dataoorts: vCPUs "20-26", RAM "120-150", ...
  CHECK(per_gpu_ram >= 5);
  CHECK(per_gpu_mismatch >= 10);  // Cudo Compute rows: Per-GPU != On-demand / GPUs

  // Line 2: AWS p4de.24xlarge, A100 (80 GB) x 8, 640 GB per instance, no spot.
  const Offer* p4de = by_id(c, "aws/p4de.24xlarge");
  REQUIRE(p4de);
  CHECK(p4de->line == 2);
  CHECK(p4de->gpu_model == "A100-SXM-80GB");
  CHECK(p4de->gpu_count == 8);
  CHECK(p4de->gpu_mem_bytes == 80e9);
  CHECK(*p4de->on_demand == doctest::Approx(40.97));
  CHECK_FALSE(p4de->spot);
  CHECK(p4de->notes.empty());
  // Dataoorts 8x A100 gives GPU RAM per GPU (80) and ranges for vCPUs and RAM.
  const Offer* dao = by_id(c, "dataoorts/gc2.a100-80-8");
  REQUIRE(dao);
  CHECK(dao->gpu_mem_bytes == 80e9);
  CHECK(dao->vcpus == "200-240");
  CHECK(dao->ram == "1200-1600");
  CHECK(has(dao->notes.front(), "given per GPU"));
  // Exoscale rows have a Per-GPU price but no On-demand: listed, not estimated, with the reason.
  const Offer* exo = by_id(c, "exoscale/gpu3080ti-small");
  REQUIRE(exo);
  CHECK_FALSE(exo->on_demand);
  CHECK(*exo->per_gpu_listed == doctest::Approx(0.92361));
  CHECK(exo->gpu_model == "RTX-3080-Ti");
  CHECK(exo->interconnect == Interconnect::consumer);
  CHECK(has(exo->why_unusable(false), "per-GPU column is not used"));
  // Rows without a Name get "<n>x <GPU Type>" and duplicates a "#k" suffix.
  CHECK(by_id(c, "cudo-compute/1x-a4000-16-gb"));
  CHECK(by_id(c, "cudo-compute/1x-a4000-16-gb#2"));
  CHECK(by_id(c, "aws/g4dn.4xlarge#3"));  // listed three times in the file
  // Oracle's H100 row has empty vCPUs and RAM.
  const Offer* oci = by_id(c, "oracle-cloud/bm.gpu.h100.8");
  REQUIRE(oci);
  CHECK(oci->vcpus.empty());
  CHECK(oci->gpu_model == "H100-SXM");
  CHECK(oci->interconnect == Interconnect::nvlink);
}

TEST_CASE("FSDL serverless table and unmappable GPU names are reported") {
  Catalog c = load_catalogs({dl::test::shared_path("data/fsdl_serverless-gpus.csv").string()});
  CHECK(c.offers.size() == 72);
  std::string warnings;
  for (const auto& w : c.warnings) warnings += w + "\n";
  MESSAGE(warnings);
  // The only warning: a MIG slice is not a GPU of the table. ("Nvidia A100" alone is ambiguous,
  // but its rows say 40GB or 80GB in GPU RAM; their "$3" prices are read too.)
  REQUIRE(c.warnings.size() == 1);
  CHECK(has(warnings, "GPU type 'A100 (20 GB)' (1 row, line 50)"));
  CHECK(has(warnings, "listed, not estimated"));
  const Offer* mystic = by_id(c, "mystic-ai/1x-nvidia-a100#2");
  REQUIRE(mystic);
  CHECK(mystic->gpu_model == "A100-SXM-80GB");
  CHECK(*mystic->on_demand == 4.0);
  CHECK(has(mystic->notes.at(0), "prices written with '$'"));
  CHECK(has(mystic->notes.at(1), "from the GPU Type and 80 GB per GPU"));
  size_t unmapped = 0;
  for (const auto& o : c.offers) {
    CHECK_FALSE(o.spot);
    if (o.gpu_model.empty()) {
      ++unmapped;
      CHECK(has(o.why_unusable(false), "not in dlkit's GPU table"));
    }
  }
  CHECK(unmapped == 1);
  // A serverless Per-Hour price is the instance price.
  const Offer* b = by_id(c, "baseten/2x-a10g-24-gb");
  REQUIRE(b);
  CHECK(*b->on_demand == doctest::Approx(3.40));
  CHECK(b->gpu_model == "A10G");
}

TEST_CASE("FSDL format: malformed rows warn, or fail with --strict naming file and line") {
  dl::test::TempDir dir("cost-cat");
  const std::string header = "Cloud,GPU Type,GPU Arch,GPUs,GPU RAM,vCPUs,RAM,On-demand,Per-GPU,Spot,Name\n";
  auto write = [&](const std::string& name, const std::string& rows) {
    auto p = dir / name;
    dl::test::write_file(p, header + rows);
    return p.string();
  };
  const std::string bad_price = write("price.csv", "X,H100 (80 GB),Hopper,1,80,8,64,2.00,2.00,,a\nX,L4 (24 GB),Ada,1,24,4,16,abc,,,b\n");
  Catalog lax = load_catalogs({bad_price});
  REQUIRE(lax.offers.size() == 2);
  CHECK_FALSE(lax.offers[1].on_demand);
  REQUIRE(lax.warnings.size() == 1);
  CHECK(has(lax.warnings[0], "price.csv:3"));
  CHECK(has(lax.warnings[0], "On-demand 'abc'"));
  std::string e = error_of([&] { load_catalogs({bad_price}, {true}); });
  CHECK(has(e, "price.csv:3: malformed row (--strict): On-demand 'abc' is not a price"));

  const std::string short_row = write("short.csv", "X,H100 (80 GB),Hopper,1,80\n");
  Catalog skipped = load_catalogs({write("short2.csv", "X,H100 (80 GB),Hopper,1,80\nY,L4 (24 GB),Ada,1,24,4,16,0.8,0.8,,c\n")});
  CHECK(skipped.offers.size() == 1);
  CHECK(has(skipped.warnings.at(0), "short2.csv:2: row skipped: 5 cells, the header has 11"));
  CHECK(has(error_of([&] { load_catalogs({short_row}, {true}); }), "short.csv:2: malformed row"));
  CHECK(has(error_of([&] { load_catalogs({write("gpus.csv", "X,L4 (24 GB),Ada,two,24,4,16,0.8,0.8,,c\n")}, {true}); }),
            "gpus.csv:2: malformed row (--strict): GPUs 'two'"));
  // Found by fuzz_cost_csv (corpus/fuzz_cost_csv/gpus-2e83.csv): a GPU count beyond int64 was
  // converted to int64 (undefined); it is a malformed row like any other.
  Catalog huge = load_catalogs({write("huge.csv", "X,L4 (24 GB),Ada,2e83,24,4,16,0.8,0.8,,c\nY,L4 (24 GB),Ada,1,24,4,16,0.8,0.8,,d\n")});
  CHECK(huge.offers.size() == 1);
  CHECK(has(huge.warnings.at(0), "huge.csv:2: row skipped: GPUs '2e83' is not a whole number from 1 to 1000000"));
  CHECK(has(error_of([&] { load_catalogs({write("neg.csv", "X,L4 (24 GB),Ada,1,24,4,16,-1,0.8,,c\n")}, {true}); }),
            "neg.csv:2"));
  CHECK(has(error_of([&] { load_catalogs({write("range.csv", "X,L4 (24 GB),Ada,1,24,4 to 6,16,0.8,0.8,,c\n")}, {true}); }),
            "vCPUs '4 to 6'"));
  // Unknown GPU names map to nothing, with a warning naming the type and line.
  Catalog tpu = load_catalogs({write("tpu.csv", "G,TPU v4,TPU,8,256,96,400,12.9,1.6,,v4-8\n")});
  REQUIRE(tpu.offers.size() == 1);
  CHECK(tpu.offers[0].gpu_model.empty());
  CHECK(has(tpu.warnings.at(0), "GPU type 'TPU v4' (1 row, line 2)"));
  // A header alone is an empty catalog; another header is not a catalog.
  CHECK(has(error_of([&] { load_catalogs({write("empty.csv", "")}); }), "empty catalog"));
  auto other = dir / "other.csv";
  dl::test::write_file(other, "name,price\nx,1\n");
  CHECK(has(error_of([&] { load_catalogs({other.string()}); }), "no 'Cloud' column"));
  CHECK(has(error_of([&] { load_catalogs({(dir / "missing.csv").string()}); }), "no such file"));
}

TEST_CASE("dlkit TOML catalog: the shipped catalog and bad files") {
  Catalog c = load_catalogs({});  // the shipped configs/catalog
  REQUIRE(c.offers.size() >= 30);
  CHECK(c.files.size() == 2);
  std::set<std::string> providers;
  for (const auto& o : c.offers) {
    CAPTURE(o.id);
    providers.insert(o.provider);
    CHECK(!o.gpu_model.empty());
    CHECK(o.on_demand);
    CHECK(!o.price_source.empty());
    CHECK(o.as_of.size() >= 7);  // "2024-06"
    if (o.spot) CHECK(!o.spot_source.empty());
    CHECK(o.why_unusable(false).empty());
  }
  for (const char* p : {"AWS", "GCP", "Azure", "Lambda", "RunPod", "CoreWeave"}) CHECK(providers.count(p));
  const Offer& p5 = find_offer(c, "aws/p5.48xlarge");
  CHECK(p5.gpu_model == "H100-SXM");
  CHECK(p5.gpu_count == 8);
  CHECK(p5.interconnect == Interconnect::nvlink);
  CHECK(&find_offer(c, "P5.48XLARGE") == &p5);  // a unique instance name, any case
  CHECK(find_offer(c, "runpod/1x-rtx-4090").interconnect == Interconnect::consumer);
  CHECK(has(error_of([&] { find_offer(c, "p9.huge"); }), "unknown offer 'p9.huge'"));
  CHECK(has(error_of([&] { find_offer(c, "aws/p5"); }), "close: aws/p5.48xlarge"));

  // Filters: a family substring, an exact canonical model, a provider.
  auto h100 = filter_offers(c, "H100", "");
  auto sxm = filter_offers(c, "H100-SXM", "");
  CHECK(h100.size() > sxm.size());
  for (const Offer* o : sxm) CHECK(o->gpu_model == "H100-SXM");
  for (const Offer* o : filter_offers(c, "", "aws")) CHECK(o->provider == "AWS");
  CHECK(filter_offers(c, "a100", "lambda").size() == 2);
  CHECK(filter_offers(c, "TPU", "").empty());

  // The shipped catalog together with the FSDL table: repeated ids get the file's stem.
  Catalog both = load_catalogs({"builtin", dl::test::shared_path("data/fsdl_cloud-gpus.csv").string()});
  CHECK(both.offers.size() == c.offers.size() + 257);
  CHECK(by_id(both, "aws/p4d.24xlarge"));
  CHECK(by_id(both, "aws/p4d.24xlarge@fsdl_cloud-gpus"));

  dl::test::TempDir dir("cost-toml");
  auto write = [&](const std::string& name, const std::string& text) {
    auto p = dir / name;
    dl::test::write_file(p, text);
    return p.string();
  };
  const std::string head = "schema = \"dlkit-catalog/1\"\n";
  const std::string ok = "[[offer]]\nprovider = \"P\"\ninstance = \"i\"\ngpu = \"L4\"\ngpus = 2\non_demand = 1.5\n"
                         "source = \"quote\"\nas_of = \"2026-10\"\n";
  Catalog one = load_catalogs({write("ok.toml", head + ok)});
  REQUIRE(one.offers.size() == 1);
  CHECK(one.offers[0].id == "p/i");
  CHECK(one.offers[0].gpu_mem_bytes == 24e9);
  CHECK(one.offers[0].line == 2);
  CHECK(has(error_of([&] { load_catalogs({write("empty.toml", head)}); }), "empty catalog"));
  CHECK(has(error_of([&] { load_catalogs({write("noschema.toml", ok)}); }), "not a dlkit catalog"));
  CHECK(has(error_of([&] { load_catalogs({write("key.toml", head + ok + "colour = \"red\"\n")}); }),
            "key.toml:10: unknown key 'offer.colour'"));
  CHECK(has(error_of([&] { load_catalogs({write("gpu.toml", head + "[[offer]]\nprovider = \"P\"\ninstance = \"i\"\n"
                                                                   "gpu = \"TPU v5\"\ngpus = 1\nsource = \"s\"\nas_of = \"d\"\n")}); }),
            "unknown GPU 'TPU v5'"));
  CHECK(has(error_of([&] { load_catalogs({write("neg.toml", head + "[[offer]]\nprovider = \"P\"\ninstance = \"i\"\n"
                                                                   "gpu = \"L4\"\ngpus = 1\non_demand = -2\nsource = \"s\"\nas_of = \"d\"\n")}); }),
            "prices must be >= 0"));
  CHECK(has(error_of([&] { load_catalogs({write("src.toml", head + "[[offer]]\nprovider = \"P\"\ninstance = \"i\"\n"
                                                                   "gpu = \"L4\"\ngpus = 1\nas_of = \"d\"\n")}); }),
            "src.toml:2: offer needs 'source'"));
  CHECK(has(error_of([&] { load_catalogs({write("syntax.toml", head + "[[offer]\n")}); }), "syntax.toml:2"));
}
