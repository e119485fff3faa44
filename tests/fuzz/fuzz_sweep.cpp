// Sweep files: load_sweep (dl-train sweep, dl-cost's sweep estimate). Input: the sweep file's
// TOML text. Its `base = "..."` resolves against the sweep file's folder, a temporary folder
// holding base.toml (the addition config below), so seeds name base = "base.toml".
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dl/sweep/spec.hpp"
#include "fuzz.hpp"

namespace {

const char* kBaseConfig = R"([model]
type = "gpt"
n_layer = 2
n_head = 8
n_embd = 64
block_size = 12
vocab_size = 256
[data]
source = "synthetic:addition"
digits = 3
[optim]
lr = 3e-3
[train]
steps = 1000
batch_size = 256
eval_every = 200
)";

// The folder of the sweep file, made once per process and removed at exit.
const std::filesystem::path& sweep_folder() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fuzz_sweep.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    std::ofstream(std::filesystem::path(tmpl) / "base.toml") << kBaseConfig;
    static const std::string removed = tmpl;
    std::atexit([] { std::filesystem::remove_all(removed); });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(dl::fuzz::as_text(data, size));
  const std::filesystem::path file = sweep_folder() / "sweep.toml";
  dl::fuzz::expect_parse_or_usage_error([&] {
    const dl::sweep::SweepSpec spec = dl::sweep::load_sweep(file, text);
    // What the trial runner relies on without checking again: values to pick from, bounds in
    // order, and rungs that climb to max_steps.
    for (const dl::sweep::Param& p : spec.params) {
      if (p.categorical()) dl::fuzz::require(!p.values.empty(), "an accepted parameter has values");
      else dl::fuzz::require(p.min <= p.max, "an accepted distribution has min <= max");
      if (p.distribution == dl::sweep::Distribution::log_uniform)
        dl::fuzz::require(p.min > 0, "an accepted log_uniform has min > 0");
    }
    if (spec.asha) {
      const std::vector<int64_t> rungs = spec.asha->rungs();
      dl::fuzz::require(!rungs.empty() && rungs.back() == spec.asha->max_steps, "ASHA's rungs end at max_steps");
      for (size_t i = 1; i < rungs.size(); ++i) dl::fuzz::require(rungs[i - 1] < rungs[i], "ASHA's rungs climb");
    }
  });
  return 0;
}
