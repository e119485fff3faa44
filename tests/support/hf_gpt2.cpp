#include "support/hf_gpt2.hpp"

#include <doctest/doctest.h>

#include "support/support.hpp"

namespace dl::test {

const char* hf_test_text() {
  return "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
         "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
         "was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything "
         "before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the "
         "other way. ";
}

namespace {

// Runs tests/scripts/<script> --many on the folders; the losses it prints.
std::vector<double> write_hf_folders(const char* script,
                                     const std::vector<std::pair<fs::path, nlohmann::json>>& folders) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& [dir, spec] : folders) {
    fs::create_directories(dir);
    const fs::path text = dir / "text.txt";
    std::string body;
    for (int i = 0; i < 8; ++i) body += hf_test_text();
    write_file(text, body);
    nlohmann::json s = spec;
    s["text"] = text.string();
    jobs.push_back({dir.string(), s});
  }
  RunResult r = run(torch_python(), {source_path(std::string("tests/scripts/") + script).string(), "--many", jobs.dump()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<double> losses;
  for (const auto& l : nlohmann::json::parse(r.out)) losses.push_back(l["loss"].get<double>());
  REQUIRE(losses.size() == folders.size());
  return losses;
}

}  // namespace

std::vector<double> write_hf_gpt2s(const std::vector<std::pair<fs::path, nlohmann::json>>& folders) {
  return write_hf_folders("hf_gpt2.py", folders);
}

std::vector<double> write_hf_llamas(const std::vector<std::pair<fs::path, nlohmann::json>>& folders) {
  return write_hf_folders("hf_llama.py", folders);
}

std::vector<double> hf_llama_folder_losses(const std::vector<std::pair<fs::path, fs::path>>& folders, int windows) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& [folder, data] : folders) jobs.push_back({folder.string(), data.string()});
  RunResult r = run(torch_python(), {source_path("tests/scripts/hf_llama.py").string(), "--loss", jobs.dump(),
                                     std::to_string(windows)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<double> losses;
  for (const auto& l : nlohmann::json::parse(r.out)) losses.push_back(l["loss"].get<double>());
  REQUIRE(losses.size() == folders.size());
  return losses;
}

double write_hf_gpt2(const fs::path& dir, nlohmann::json spec) { return write_hf_gpt2s({{dir, std::move(spec)}}).front(); }

}  // namespace dl::test
