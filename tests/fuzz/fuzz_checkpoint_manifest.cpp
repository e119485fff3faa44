// Sharded-checkpoint manifests (trainer_state.json): parse_checkpoint_manifest, then what a
// CheckpointReader derives from an accepted manifest without opening its files.
#include <nlohmann/json.hpp>

#include "dl/checkpoint/format.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dl::fuzz::expect_parse_or_usage_error([&] {
    nlohmann::json m = dl::parse_checkpoint_manifest(dl::fuzz::as_text(data, size), "fuzz/trainer_state.json");
    for (const auto& [name, info] : m["files"].items()) {
      const std::string joined = (std::filesystem::path("/ck") / name).lexically_normal().string();
      dl::fuzz::require(joined.rfind("/ck/", 0) == 0 && joined.size() > 4, "a listed file stays inside the folder");
    }
    dl::CheckpointReader r("/nonexistent-fuzz-checkpoint", std::move(m));
    (void)r.layout();
    (void)r.state();
    (void)r.optimizer_name();
    (void)r.optimizer_steps();
    for (const auto& name : r.names("param")) {
      (void)r.shape(name);
      (void)r.dtype(name);
      try {
        (void)r.read(name);  // opens a file under a folder that does not exist: a usage error
      } catch (const dl::Error&) {
      }
    }
  });
  return 0;
}
