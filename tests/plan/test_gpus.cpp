// The GPU table and its name aliases, including every "GPU Type" of the Full Stack Deep Learning
// cloud GPU catalog (../shared/data/fsdl_cloud-gpus.csv).
#include <doctest/doctest.h>

#include <set>
#include <sstream>

#include "dl/core/option_error.hpp"
#include "dl/plan/gpus.hpp"
#include "support/support.hpp"

using namespace dl::plan;

TEST_CASE("datasheet values of the reference GPUs") {
  auto h100 = gpu_spec("H100-SXM");
  REQUIRE(h100);
  CHECK(h100->bf16_flops == 989.4e12);
  CHECK(h100->memory_bw == 3.35e12);
  CHECK(h100->memory_bytes == 80e9);
  CHECK(*h100->peak_flops(dl::MathPrecision::bf16) == 989.4e12);
  CHECK(*h100->peak_flops(dl::MathPrecision::fp32) == doctest::Approx(66.9e12));
  auto h200 = gpu_spec("H200");
  REQUIRE(h200);
  CHECK(h200->bf16_flops == 989.4e12);
  CHECK(h200->memory_bw == 4.8e12);
  CHECK(h200->memory_bytes == 141e9);
  CHECK(gpu_spec("H100-PCIe")->bf16_flops == 756e12);
  CHECK(gpu_spec("A100-SXM-80GB")->bf16_flops == 312e12);
  CHECK(gpu_spec("A100-SXM-40GB")->memory_bytes == 40e9);
  CHECK(gpu_spec("L40S")->memory_bytes == 48e9);
  // V100 and T4 have no bf16: nullopt, and hardware_for_gpu falls back to fp16 saying so.
  CHECK_FALSE(gpu_spec("V100-SXM2-16GB")->peak_flops(dl::MathPrecision::bf16));
  std::string note;
  dl::plan::Hardware hw = hardware_for_gpu(*gpu_spec("T4"), dl::Precision::bf16, &note);
  CHECK(hw.peak_flops == 65e12);
  CHECK(note.find("no bf16") != std::string::npos);
  dl::plan::Hardware hh = hardware_for_gpu(*h100, dl::Precision::bf16);
  CHECK(hh.gpu_model == "H100-SXM");
  CHECK(hh.gpu_mem_bytes == 80e9);
  CHECK(hh.intra_node_bw == 450e9);
  // Every entry is complete and unique.
  std::set<std::string> names;
  for (const auto& g : gpu_table()) {
    CAPTURE(g.model);
    CHECK(names.insert(g.model).second);
    CHECK(g.memory_bytes > 0);
    CHECK(g.fp32_flops > 0);
    CHECK(g.memory_bw > 0);
    CHECK(g.intra_node_busbw > 0);
    CHECK(g.host_bw > 0);
    CHECK(!g.source.empty());
    CHECK(canonical_gpu(g.model) == g.model);  // canonical names are their own alias
  }
}

TEST_CASE("canonical_gpu: unnormalised names") {
  CHECK(canonical_gpu("H100 (80 GB)") == "H100-SXM");
  CHECK(canonical_gpu("H100 PCIe (80GB)") == "H100-PCIe");
  CHECK(canonical_gpu("H100 HGX (80GB)") == "H100-SXM");
  CHECK(canonical_gpu("NVIDIA H100 80GB HBM3") == "H100-SXM");
  CHECK(canonical_gpu("NVIDIA H100 PCIe") == "H100-PCIe");
  CHECK(canonical_gpu("NVIDIA H100 NVL") == "H100-NVL");
  CHECK(canonical_gpu("h100-sxm") == "H100-SXM");
  CHECK(canonical_gpu("NVIDIA H200") == "H200");
  CHECK(canonical_gpu("A100 80GB SXM4") == "A100-SXM-80GB");
  CHECK(canonical_gpu("NVIDIA A100-SXM4-40GB") == "A100-SXM-40GB");
  CHECK(canonical_gpu("NVIDIA A100 80GB PCIe") == "A100-PCIe-80GB");
  CHECK(canonical_gpu("A100 (40 GB)") == "A100-SXM-40GB");
  CHECK(canonical_gpu("Tesla V100-SXM2-16GB") == "V100-SXM2-16GB");
  CHECK(canonical_gpu("Tesla V100-PCIE-32GB") == "V100-PCIe-32GB");
  CHECK(canonical_gpu("Tesla T4") == "T4");
  CHECK(canonical_gpu("NVIDIA A10G") == "A10G");
  CHECK(canonical_gpu("NVIDIA GeForce RTX 4090") == "RTX-4090");
  CHECK(canonical_gpu("NVIDIA GeForce RTX 3090") == "RTX-3090");
  CHECK(canonical_gpu("NVIDIA RTX A6000") == "RTX-A6000");
  CHECK(canonical_gpu("NVIDIA L40S") == "L40S");
  CHECK(canonical_gpu("NVIDIA L4") == "L4");
  // Ambiguous or wrong: no answer rather than a guess.
  CHECK_FALSE(canonical_gpu("A100"));          // 40 or 80 GB?
  CHECK_FALSE(canonical_gpu("H100 (40 GB)"));  // no such H100
  CHECK_FALSE(canonical_gpu("RTX 6000"));      // Quadro RTX 6000 (24 GB) or RTX 6000 Ada (48 GB)?
  CHECK_FALSE(canonical_gpu("TPU v4"));
  CHECK_FALSE(canonical_gpu(""));
  CHECK(gpu_spec("H100 (80 GB)")->model == "H100-SXM");
  CHECK(gpu_spec("MI300X")->model == "MI300X");
  CHECK_FALSE(gpu_spec("MI250X"));  // not in the table
}

TEST_CASE("every GPU Type of the FSDL cloud catalog maps, or is listed as unmappable") {
  const auto csv = dl::test::read_file(dl::test::shared_path("data/fsdl_cloud-gpus.csv"));
  REQUIRE(!csv.empty());
  auto lines = dl::test::lines(csv);
  REQUIRE(lines.size() > 1);
  // Column "GPU Type" (the header names it; the file has no quoted commas in this column).
  auto split = [](const std::string& line) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    return cells;
  };
  auto header = split(lines[0]);
  size_t col = 0;
  while (col < header.size() && header[col] != "GPU Type") ++col;
  REQUIRE(col < header.size());
  // Names that deliberately map to nothing (none at present: every type in the catalog is
  // unambiguous once its memory size is read).
  const std::set<std::string> unmappable = {};
  std::set<std::string> types, mapped, unmapped;
  for (size_t i = 1; i < lines.size(); ++i) {
    auto cells = split(lines[i]);
    if (cells.size() <= col || cells[col].empty()) continue;
    types.insert(cells[col]);
  }
  CHECK(types.size() == 25);  // distinct non-empty "GPU Type" cells of the file, counted by Python's csv module
  std::string report;
  for (const auto& t : types) {
    auto c = canonical_gpu(t);
    if (c) {
      mapped.insert(t);
      CHECK(gpu_spec(*c));
      report += "  " + t + " -> " + *c + "\n";
    } else {
      unmapped.insert(t);
      CAPTURE(t);
      CHECK(unmappable.count(t) == 1);
    }
  }
  std::string un;
  for (const auto& t : unmappable) un += " '" + t + "'";
  MESSAGE("FSDL GPU types: ", types.size(), " (", mapped.size(), " mapped); unmappable on purpose:",
          un.empty() ? " none" : un, "\n", report);
  CHECK(mapped.size() == 25 - unmappable.size());
  // Spot checks of the mapping, including memory sizes that pick the variant.
  CHECK(canonical_gpu("A100 (80 GB)") == "A100-SXM-80GB");
  CHECK(canonical_gpu("V100 (32 GB)") == "V100-SXM2-32GB");
  CHECK(canonical_gpu("GH200 (96 GB)") == "GH200-96GB");
  CHECK(canonical_gpu("3080Ti (12 GB)") == "RTX-3080-Ti");
  CHECK(canonical_gpu("Quadro RTX 6000 (24 GB)") == "Quadro-RTX-6000");
  CHECK(canonical_gpu("RTX5000 (16 GB)") == "Quadro-RTX-5000");
  CHECK(canonical_gpu("RTX4000 (8 GB)") == "Quadro-RTX-4000");
  CHECK(canonical_gpu("A10") == "A10");
  CHECK(canonical_gpu("A4000 (16 GB)") == "RTX-A4000");
  CHECK(canonical_gpu("K80 (12 GB)") == "K80");
}

TEST_CASE("canonical_gpu: benchmark and serverless names (dl-cost)") {
  // Lambda's benchmark tables (../shared/data/lambda_pytorch-train-throughput-*.csv).
  CHECK(canonical_gpu("RTX 6000 Ada") == "RTX-6000-Ada");
  CHECK(canonical_gpu("RTX 6000 (48 GB)") == "RTX-6000-Ada");
  CHECK(canonical_gpu("Quadro RTX 8000") == "Quadro-RTX-8000");
  CHECK(canonical_gpu("H100 80GB PCIe Gen5") == "H100-PCIe");
  CHECK(canonical_gpu("A100 80GB SXM4") == "A100-SXM-80GB");
  CHECK(canonical_gpu("A100 40GB PCIe") == "A100-PCIe-40GB");
  CHECK(canonical_gpu("V100 16GB") == "V100-SXM2-16GB");
  CHECK(canonical_gpu("H200 140GB SXM") == "H200");
  CHECK(canonical_gpu("GH200 96GB") == "GH200-96GB");
  CHECK_FALSE(canonical_gpu("GH200 80GB"));  // no such GH200
  CHECK(canonical_gpu("B200 192GB") == "B200");  // the marketing size; HGX boards expose 180 GB
  CHECK_FALSE(canonical_gpu("B300 288GB"));    // not in the table
  CHECK_FALSE(canonical_gpu("RTX 6000"));    // still ambiguous without a size
  // Full Stack Deep Learning's serverless table.
  CHECK(canonical_gpu("Nvidia L4") == "L4");
  CHECK(canonical_gpu("Nvidia T4") == "T4");
  CHECK(canonical_gpu("L40 (48 GB)") == "L40");
  CHECK(canonical_gpu("A40") == "A40");
  CHECK_FALSE(canonical_gpu("A100 (20 GB)"));  // a MIG slice, not a GPU
  CHECK_FALSE(canonical_gpu("Nvidia A100"));   // 40 or 80 GB?
  auto ada = gpu_spec("RTX-6000-Ada");
  REQUIRE(ada);
  CHECK(ada->memory_bytes == 48e9);
  CHECK(ada->bf16_flops == 364.2e12);
  CHECK(gpu_spec("Quadro-RTX-8000")->memory_bytes == 48e9);
  CHECK_FALSE(gpu_spec("Quadro-RTX-8000")->peak_flops(dl::MathPrecision::bf16));
}

TEST_CASE("today's GPUs: H800, H20, B200, GB200, MI300X with datasheet peaks and a source URL") {
  struct Row {
    const char* name;       // as a driver or a cloud prints it
    const char* model;
    double bf16, fp8, mem, bw;
  };
  for (const Row& r : {Row{"NVIDIA H800", "H800", 989.4e12, 1979e12, 80e9, 3.35e12},
                       Row{"NVIDIA H20", "H20", 148e12, 296e12, 96e9, 4.0e12},
                       Row{"NVIDIA B200", "B200", 2250e12, 4500e12, 180e9, 7.7e12},
                       Row{"GB200 NVL72", "GB200", 2500e12, 5000e12, 186e9, 8.0e12},
                       Row{"AMD Instinct MI300X", "MI300X", 1307.4e12, 2614.9e12, 192e9, 5.3e12},
                       Row{"NVIDIA H200", "H200", 989.4e12, 1979e12, 141e9, 4.8e12},
                       Row{"NVIDIA L40S", "L40S", 362.05e12, 733e12, 48e9, 864e9},
                       Row{"NVIDIA L4", "L4", 121e12, 242.5e12, 24e9, 300e9}}) {
    CAPTURE(r.name);
    CHECK(canonical_gpu(r.name) == std::optional<std::string>(r.model));
    const GpuSpec g = find_gpu(r.name);
    CHECK(g.bf16_flops == doctest::Approx(r.bf16));
    CHECK(*g.peak_flops(dl::MathPrecision::fp8) == doctest::Approx(r.fp8));
    CHECK(g.memory_bytes == r.mem);
    CHECK(g.memory_bw == doctest::Approx(r.bw));
    CHECK(g.intra_node_busbw > 0);
    CHECK(dl::test::has(g.source, "https://"));
  }
  // H800: the H100's compute behind a narrower NVLink.
  CHECK(gpu_spec("H800")->intra_node_busbw < gpu_spec("H100-SXM")->intra_node_busbw);
}

TEST_CASE("FP8 is dense and twice the 16-bit peak wherever a GPU has it; none before Hopper and Ada") {
  size_t with_fp8 = 0;
  for (const auto& g : gpu_table()) {
    CAPTURE(g.model);
    if (g.arch == "Ampere" || g.arch == "Turing" || g.arch == "Volta" || g.arch == "Pascal" || g.arch == "Kepler") {
      CHECK(g.fp8_flops == 0);
      CHECK_FALSE(g.peak_flops(dl::MathPrecision::fp8));
      CHECK(dl::test::has(precision_refusal(g, dl::Precision::fp8), g.model + " (" + g.arch + ") has no FP8 tensor cores"));
    } else {
      ++with_fp8;
      CHECK(g.fp8_flops == doctest::Approx(2 * g.bf16_flops).epsilon(0.02));  // L40S: 733 vs 362.05
      CHECK(precision_refusal(g, dl::Precision::fp8).empty());
    }
  }
  CHECK(with_fp8 >= 17);
}

TEST_CASE("hardware_for_gpu: fp8 takes the FP8 peak, and a GPU without FP8 is a usage error naming it") {
  CHECK(hardware_for_gpu(*gpu_spec("H100-SXM"), dl::Precision::fp8).peak_flops == 1979e12);
  CHECK(hardware_for_gpu(*gpu_spec("MI300X"), dl::Precision::fp8).peak_flops == doctest::Approx(2614.9e12));
  try {
    hardware_for_gpu(*gpu_spec("A100-SXM-80GB"), dl::Precision::fp8);
    FAIL("A100 planned fp8");
  } catch (const dl::OptionError& e) {
    CHECK(e.kind() == dl::ErrorKind::usage);
    CHECK(dl::test::has(e.named({{"precision", "--precision"}}),
                        "A100-SXM-80GB (Ampere) has no FP8 tensor cores (FP8: B200, GB200, H100-SXM"));
    CHECK(dl::test::has(e.named({{"precision", "--precision"}}), "use --precision bf16"));
  }
  // The other precisions still fall back (V100 has no bf16).
  CHECK(hardware_for_gpu(*gpu_spec("V100-SXM2-32GB"), dl::Precision::bf16).peak_flops == 125e12);
}

TEST_CASE("fp8 memory: bf16 weights and gradients plus an FP8 copy (3 + 2 + 12 bytes per parameter)") {
  CHECK(parse_precision("fp8") == dl::Precision::fp8);
  const StateBytes b = state_bytes(dl::Precision::fp8);
  CHECK(b.params == 3);
  CHECK(b.grads == 2);
  CHECK(b.optimizer == 12);
  CHECK(activation_value_bytes(dl::Precision::fp8) == 2);
  CHECK_THROWS_AS(parse_precision("fp4"), dl::Error);
}

TEST_CASE("fabrics: presets, aliases and bandwidths per GPU; the default is plan::Hardware's 50 GB/s") {
  CHECK(find_fabric(std::string(kDefaultFabric)).bytes_per_s == Hardware{}.inter_node_bw);
  CHECK(find_fabric("IB-NDR").name == "ib-ndr");
  CHECK(find_fabric("ndr").name == "ib-ndr");
  CHECK(find_fabric("ib-hdr").bytes_per_s == 25e9);
  CHECK(find_fabric("omnipath").bytes_per_s == 6.25e9);
  CHECK(find_fabric("nvlink").bytes_per_s > find_fabric("ib-xdr").bytes_per_s);
  CHECK(find_fabric("ethernet").bytes_per_s < find_fabric("omnipath").bytes_per_s);
  CHECK(find_fabric("roce").bytes_per_s == 50e9);
  CHECK(find_fabric("25GB/s").bytes_per_s == 25e9);
  for (const auto& f : fabric_table()) {
    CHECK(f.bytes_per_s > 0);
    CHECK_FALSE(f.source.empty());
  }
  try {
    find_fabric("infiniband");
    FAIL("an unknown fabric was accepted");
  } catch (const dl::OptionError& e) {
    CHECK(dl::test::has(e.named({{"fabric", "--fabric"}}), "--fabric: unknown fabric 'infiniband'"));
    CHECK(dl::test::has(e.what(), "nvlink, ib-xdr, ib-ndr, ib-hdr, roce, omnipath, ethernet"));
  }
}
