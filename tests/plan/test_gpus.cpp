// The GPU table and its name aliases, including every "GPU Type" of the Full Stack Deep Learning
// cloud GPU catalog (../shared/data/fsdl_cloud-gpus.csv).
#include <doctest/doctest.h>

#include <set>
#include <sstream>

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
  CHECK_FALSE(gpu_spec("MI300X"));
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
  CHECK_FALSE(canonical_gpu("B200 192GB"));  // not in the table
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
