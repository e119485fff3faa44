#include <doctest/doctest.h>

#include <sys/stat.h>

#include <string>

#include "dl/core/error.hpp"
#include "dl/env/native.hpp"
#include "dl/env/process.hpp"
#include "dl/env/snapshot.hpp"
#include "support/support.hpp"

using namespace dl;

namespace {

void write_script(const std::filesystem::path& p, const std::string& body) {
  test::write_file(p, body);
  ::chmod(p.c_str(), 0755);
}

}  // namespace

TEST_CASE("probe output parsers") {
  OsRelease os = parse_os_release("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n");
  CHECK(os.id == "debian");
  CHECK(os.version_id == "12");
  CHECK(os.pretty_name == "Debian GNU/Linux 12 (bookworm)");

  CpuInfo cpu = parse_cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: sse avx2 avx sse\n\nprocessor\t: 1\nflags\t: zzz\n");
  CHECK(cpu.model == "AMD EPYC 9654");
  CHECK(cpu.flags == std::vector<std::string>{"avx", "avx2", "sse"});

  CHECK(parse_nvcc_version("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n") == "13.0.88");
  CHECK(parse_tool_version("c++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright\n") == "12.2.0");
  CHECK(parse_tool_version("cmake version 3.25.1\n\nCMake suite maintained\n") == "3.25.1");
  CHECK(parse_tool_version("Python 3.11.7\n") == "3.11.7");

  auto gpus = parse_nvidia_smi_csv("0, NVIDIA H100 80GB HBM3, 81559, 9.0, 580.95.05\n1, NVIDIA H100 80GB HBM3, 81559, 9.0, 580.95.05\n");
  REQUIRE(gpus.size() == 2);
  CHECK(gpus[0].name == "NVIDIA H100 80GB HBM3");
  CHECK(gpus[0].memory_mib == 81559);
  CHECK(gpus[0].compute_capability == "9.0");
  CHECK(gpus[1].driver == "580.95.05");
  auto old = parse_nvidia_smi_csv("0, Tesla V100-SXM2-16GB, 16160, 470.82.01\n");  // without compute_cap
  REQUIRE(old.size() == 1);
  CHECK(old[0].driver == "470.82.01");
  CHECK(old[0].compute_capability.empty());
  CHECK(parse_proc_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:48:45 UTC 2025\n") ==
        "580.95.05");

  auto pip = parse_pip_list_json(R"([{"name": "NumPy", "version": "1.24.2"}, {"name": "typing_extensions", "version": "4.5.0"}])");
  REQUIRE(pip.size() == 2);
  CHECK(pip[0] == std::make_pair(std::string("numpy"), std::string("1.24.2")));
  CHECK(pip[1].first == "typing-extensions");
  CHECK_THROWS_AS(parse_pip_list_json("not json"), Error);

  auto owners = parse_dpkg_search(
      "libopenblas0-pthread:amd64: /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so\n"
      "diversion by foo from: /usr/bin/x\nlibgloo0: /usr/lib/libgloo.so.0.5.0\n");
  CHECK(owners.size() == 2);
  CHECK(owners["/usr/lib/libgloo.so.0.5.0"] == "libgloo0");
  auto q = parse_dpkg_query("libssl3:amd64\tlibssl3\tamd64\t3.0.19-1~deb12u2\tii \nfoo\tfoo\tamd64\t\tun \n");
  REQUIRE(q.size() == 2);
  CHECK(q[0].binary_package == "libssl3:amd64");
  CHECK(q[0].installed);
  CHECK_FALSE(q[1].installed);

  CHECK(version_from_library_name("/usr/lib/libgloo.so.0.5.0") == "0.5.0");
  CHECK(version_from_library_name("/x/libopenblasp-r0.3.21.so") == "0.3.21");
  CHECK(version_from_library_name("/x/libcudart.so.13") == "13");
  CHECK(version_from_library_name("/x/libfoo.so").empty());
}

TEST_CASE("nccl_built_for: a Debian version, or a wheel's dist-info next to the library") {
  CHECK(nccl_built_for("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "2.28.9-1+cuda13.0") == "13.0");
  test::TempDir dir("nccl");
  std::filesystem::create_directories(dir / "site-packages/nvidia/nccl/lib");
  std::filesystem::create_directories(dir / "site-packages/nvidia_nccl_cu12-2.21.5.dist-info");
  test::write_file(dir / "site-packages/nvidia/nccl/lib/libnccl.so.2", "x");
  CHECK(nccl_built_for((dir / "site-packages/nvidia/nccl/lib/libnccl.so.2").string(), "") == "12");
  std::filesystem::create_directories(dir / "bare/lib");
  CHECK(nccl_built_for((dir / "bare/lib/libnccl.so.2").string(), "").empty());
}

TEST_CASE("snapshot: a Python interpreter's packages through pip's JSON (a fake interpreter)") {
  test::TempDir dir("py");
  auto py = dir / "python";
  write_script(py,
               "#!/bin/sh\n"
               "if [ \"$1\" = --version ]; then echo 'Python 3.11.7'; exit 0; fi\n"
               "if [ \"$1 $2 $3\" = '-m pip list' ]; then\n"
               "  echo '[{\"name\": \"Zeta_Pkg\", \"version\": \"2.0\"}, {\"name\": \"numpy\", \"version\": \"1.24.2\"}]'; exit 0\n"
               "fi\nexit 9\n");
  auto broken = dir / "broken";
  write_script(broken, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Python 3.9.2'; exit 0; fi\necho 'No module named pip' >&2; exit 1\n");
  SnapshotOptions o;
  o.probe_stack = false;
  o.hash_libraries = false;
  o.pythons = {py.string(), broken.string(), (dir / "missing").string()};
  o.probe_timeout_s = 5;
  Lock l = take_snapshot(o);
  const Component* interp = l.find_path({"python", py.string()});
  REQUIRE(interp);
  CHECK(interp->version == "3.11.7");
  CHECK(interp->field_text("executable") == py.string());
  CHECK(l.find_path({"python", py.string(), "packages", "numpy"})->version == "1.24.2");
  CHECK(l.find_path({"python", py.string(), "packages", "zeta-pkg"})->version == "2.0");
  CHECK(l.probe("python:" + py.string()) == "ok");
  CHECK(l.find_path({"python", broken.string()})->version == "3.9.2");
  CHECK(l.probe("python:" + broken.string()) == "failed: " + broken.string() + " -m pip list exit code 1: No module named pip");
  CHECK(l.find_path({"python", (dir / "missing").string()})->version == "none");
  CHECK(l.probe("python:" + (dir / "missing").string()).find("not found") == 0);
  CHECK(l.find("cuda.runtime") == nullptr);  // probe_stack = false
  CHECK(compute_content_hash(l) == l.header.content_hash);

  // Which of the lock's interpreters run is the caller's choice, by name: none of those it was
  // not given, each it was.
  CHECK(snapshot_options_for(l, {"python3"}).pythons.empty());
  SnapshotOptions again = snapshot_options_for(l, o.pythons);
  CHECK(again.pythons == o.pythons);
  CHECK(again.python_runs.empty());
  CHECK_FALSE(again.hash_libraries);
}

TEST_CASE("same_interpreter: by name, or the same file once PATH is searched; nothing runs") {
  const std::string sh = find_program("sh");
  REQUIRE_FALSE(sh.empty());
  CHECK(same_interpreter("/opt/venv/bin/python", "/opt/venv/bin/python"));
  CHECK(same_interpreter(sh, "sh"));  // the lock's path is where PATH finds the program
  CHECK(same_interpreter("sh", sh));
  CHECK_FALSE(same_interpreter("/opt/venv/bin/python", "sh"));
  CHECK_FALSE(same_interpreter("/tmp/dlkit-no-such/python", "python3"));
}

TEST_CASE("loaded libraries are real files of this process") {
  auto libs = loaded_library_paths();
  REQUIRE_FALSE(libs.empty());
  bool libc = false;
  for (const auto& p : libs) {
    CHECK(std::filesystem::is_regular_file(p));
    CHECK(p.front() == '/');
    if (p.find("libc.so") != std::string::npos) libc = true;
  }
  CHECK(libc);
}
