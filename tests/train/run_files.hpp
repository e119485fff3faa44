// What a dl-train run directory holds, read back by the end-to-end tests (test_dl_train,
// test_disk_faults): losses, checkpoints, leftover files.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/support.hpp"

namespace dl::test {

// Training losses by step from a metrics file or --json stdout.
inline std::map<int64_t, double> losses_of(const std::string& jsonl) {
  std::map<int64_t, double> out;
  for (const auto& line : lines(jsonl)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// Files directly under dir, recursively, as relative paths (to prove nothing partial was left).
inline std::vector<std::string> tree(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

inline bool has_temp_files(const fs::path& dir) {
  for (const auto& f : tree(dir))
    if (f.find(".tmp") != std::string::npos) return true;
  return false;
}

// Steps of the checkpoints under RUN/checkpoints (folders step_NNNNNNNN), ascending.
inline std::vector<int64_t> checkpoint_steps(const fs::path& run_dir) {
  std::vector<int64_t> out;
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) == 0) out.push_back(std::stoll(name.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

}  // namespace dl::test
