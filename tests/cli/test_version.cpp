// `--version` of every tool (README: "--version with what the build includes"): exit 0, the
// tool's name and the project's version from CMakeLists.txt, then the build's libraries.
#include <doctest/doctest.h>

#include <regex>

#include "dl/backend/build_info.hpp"
#include "dl/core/version.hpp"
#include "dl/device/build_info.hpp"
#include "support/support.hpp"

using namespace dl::test;

TEST_CASE("--version of every tool names it, the project version and what the build includes") {
  // The version as the top-level CMakeLists.txt declares it: project(dlkit VERSION x.y.z ...).
  std::smatch m;
  const std::string cmake = read_file(source_path("CMakeLists.txt"));
  REQUIRE(std::regex_search(cmake, m, std::regex(R"(project\(dlkit VERSION ([0-9]+\.[0-9]+\.[0-9]+))")));
  const std::string version = m[1];
  // dl-train and dl-bench link the CUDA backend and describe it as it runs; the other tools do not
  // link it (they start on machines without CUDA's libraries) and say how it was built.
#ifdef DL_HAVE_CUDA
  const std::string cuda_linked = "CUDA backend: yes (nvcc ", cuda_unlinked = "CUDA backend: built (nvcc ";
#else
  const std::string cuda_linked = "CUDA backend: not built", cuda_unlinked = cuda_linked;
#endif
  for (const char* tool_name : {"dl-train", "dl-bench", "dl-shard", "dl-cost", "dl-envlock"}) {
    const std::string name = tool_name;
    CAPTURE(name);
    RunResult r = run(tool(name), {"--version"});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
    auto out = lines(r.out);
    REQUIRE(!out.empty());
    // "dl-train 0.1.0", with " (git 0ede55e)" when built from a git checkout.
    const std::string head = name + " " + version;
    CHECK((out[0] == head || out[0].rfind(head + " (git ", 0) == 0));
    CHECK(out[0] == name + " " + dl::version_string());
    // Then the build: BLAS, the CUDA backend, Gloo, the compiler.
    const bool links_device = name == "dl-train" || name == "dl-bench";
    const std::string described = links_device ? dl::device_build_info() : dl::build_info();
    CHECK(r.out.substr(out[0].size() + 1).rfind(described, 0) == 0);
    const std::string cuda = links_device ? cuda_linked : cuda_unlinked;
    for (const std::string& what : {std::string("BLAS: OpenBLAS "), cuda, std::string("Gloo: yes"), std::string("compiler: ")})
      CHECK(r.out.find("\n" + what) != std::string::npos);
  }
}

// The tools that never open a GPU link no CUDA library, so they start on a machine without one:
// dl-envlock is the tool that tells such a machine what it lacks (docs/ARCHITECTURE.md, Libraries).
TEST_CASE("dl-shard, dl-cost and dl-envlock link no CUDA library; dl-train and dl-bench link the backend's") {
  auto needed = [](const std::string& name) {
    RunResult r = run("/usr/bin/readelf", {"-d", tool(name)});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::string libs;
    for (const std::string& line : lines(r.out))
      if (line.find("(NEEDED)") != std::string::npos) libs += line.substr(line.find('[')) + " ";
    return libs;
  };
  const std::regex cuda(R"(\[lib(cudart|cublas|cublasLt|cudnn|nccl|cuda)\.so)");
  for (const char* name : {"dl-shard", "dl-cost", "dl-envlock"}) {
    const std::string libs = needed(name);
    CAPTURE(name);
    INFO(libs);
    CHECK(!std::regex_search(libs, cuda));
  }
#ifdef DL_HAVE_CUDA
  for (const char* name : {"dl-train", "dl-bench"}) {
    CAPTURE(name);
    CHECK(needed(name).find("[libcudart.so") != std::string::npos);
  }
#endif
}

TEST_CASE("help examples name files inside the repository, never ../shared") {
  // dl-cost's examples pointed --catalog at ../shared/data/fsdl_cloud-gpus.csv, beside the repository.
  const std::vector<std::vector<std::string>> helps = {
      {"dl-cost", "estimate", "--help"}, {"dl-cost", "offers", "--help"}, {"dl-train", "--help"},
      {"dl-train", "sweep", "--help"},   {"dl-shard", "--help"},          {"dl-bench", "--help"},
      {"dl-envlock", "--help"}};
  for (const auto& h : helps) {
    CAPTURE(h[0] + " " + h[1]);
    const RunResult r = run(tool(h[0]), std::vector<std::string>(h.begin() + 1, h.end()));
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("../") == std::string::npos);
  }
}
