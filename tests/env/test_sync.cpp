#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "dl/env/sync.hpp"

using namespace dl;

namespace {

Lock lock_for_sync() {
  Lock l;
  l.add({"cuda", "runtime"}, "13.0").set("library", "/usr/local/cuda-13.0/lib/libcudart.so.13");
  Component& nccl = l.add({"cuda", "nccl"}, "2.28.9");
  nccl.set("package", "libnccl2");
  nccl.set("package-version", "2.28.9-1+cuda13.0");
  l.add({"driver"}, "580.95.05").set("source", "nvidia-smi");
  Component& ob = l.add({"blas", "openblas"}, "0.3.21");
  ob.set("package", "libopenblas0-pthread:amd64");
  ob.set("package-version", "0.3.21+ds-4");
  l.add({"deb", "libopenblas-dev"}, "0.3.21+ds-4");      // already installed
  l.add({"deb", "libssl3"}, "3.0.19-1~deb12u2");         // installed is newer: downgrade
  l.add({"deb", "libgloo-dev"}, "0.0~git20220518.5b14351-3");  // not installed
  l.add({"deb", "gone"}, "none");
  l.add({"python", "/usr/bin/python3"}, "3.11.2").set("executable", "/usr/bin/python3");
  l.add({"python", "/usr/bin/python3", "packages", "numpy"}, "1.24.2");
  l.add({"python", "/usr/bin/python3", "packages", "torch"}, "2.1.0+cpu");
  return l;
}

const std::map<std::string, std::string> kInstalled = {
    {"libopenblas-dev", "0.3.21+ds-4"},
    {"libopenblas0-pthread:amd64", "0.3.21+ds-4"},
    {"libssl3", "3.0.22-1~deb12u2"},
};

}  // namespace

TEST_CASE("sync plan: pinned apt-get command, pip command, what cannot be installed") {
  Lock l = lock_for_sync();
  CHECK(sync_packages(l) == std::vector<std::string>{"libgloo-dev", "libnccl2", "libopenblas-dev", "libopenblas0-pthread:amd64", "libssl3"});
  SyncPlan p = plan_sync(l, kInstalled, false);
  CHECK(p.apt_argv == std::vector<std::string>{"apt-get", "install", "-y", "--allow-downgrades", "libnccl2=2.28.9-1+cuda13.0",
                                               "libssl3=3.0.19-1~deb12u2", "libgloo-dev=0.0~git20220518.5b14351-3"});
  CHECK(p.use_sudo);
  CHECK(p.command().front() == "sudo");
  REQUIRE(p.install.size() == 3);
  CHECK(p.install[1].component == "deb.libssl3");
  CHECK(p.install[1].detail == "installed 3.0.22-1~deb12u2");
  CHECK(p.install[2].detail == "not installed");
  REQUIRE(p.satisfied.size() == 2);
  CHECK(p.satisfied[0].component == "blas.openblas");
  CHECK(p.satisfied[1].component == "deb.libopenblas-dev");
  // The interpreter was not run (no installed versions given): every public version is proposed;
  // the local version 2.1.0+cpu is not on PyPI, so it is manual work.
  REQUIRE(p.pip.size() == 1);
  CHECK(p.pip[0].second == std::vector<std::string>{"/usr/bin/python3", "-m", "pip", "install", "numpy==1.24.2"});
  CHECK(p.pythons_not_run == std::vector<std::string>{"/usr/bin/python3"});
  REQUIRE(p.manual.size() == 4);
  CHECK(p.manual[0].component == "cuda.runtime");
  CHECK(p.manual[0].detail.find("install CUDA 13.0") == 0);
  CHECK(p.manual[1].component == "driver");
  CHECK(p.manual[1].detail.find("NVIDIA driver 580.95.05") != std::string::npos);
  CHECK(p.manual[2].component == "deb.gone");
  CHECK(p.manual[3].component == "python.\"/usr/bin/python3\".packages.torch");
  CHECK(p.manual[3].detail.find("a local version (+cpu): no public package index serves it; not compared") == 0);

  SyncPlan root = plan_sync(l, kInstalled, true);
  CHECK_FALSE(root.use_sudo);
  CHECK(root.command().front() == "apt-get");
}

TEST_CASE("sync plan: nothing to do, and the renderings") {
  Lock l;
  l.add({"deb", "libopenblas-dev"}, "0.3.21+ds-4");
  SyncPlan none = plan_sync(l, kInstalled, false);
  CHECK(none.apt_argv.empty());
  CHECK(none.command().empty());
  CHECK(render_sync_plan(none, "env.lock", EnvFormat::table) ==
        "# dl-envlock sync plan for env.lock\n# Debian packages: 0 to install or change, 1 already at the locked version\n");

  SyncPlan p = plan_sync(lock_for_sync(), kInstalled, true);
  std::string t = render_sync_plan(p, "env.lock", EnvFormat::table);
  CHECK(t.find("\napt-get install -y --allow-downgrades libnccl2=2.28.9-1+cuda13.0 'libssl3=3.0.19-1~deb12u2' "
               "'libgloo-dev=0.0~git20220518.5b14351-3'\n") != std::string::npos);
  CHECK(t.find("# Python packages of /usr/bin/python3 (dl-envlock prints this command but never runs it):\n"
               "/usr/bin/python3 -m pip install numpy==1.24.2\n") != std::string::npos);
  CHECK(t.find("# /usr/bin/python3: installed packages not read") != std::string::npos);
  CHECK(t.find("# Cannot install (do these by hand):\n#   cuda.runtime 13.0: ") != std::string::npos);
  auto j = nlohmann::json::parse(render_sync_plan(p, "env.lock", EnvFormat::json));
  CHECK(j["apt_command"].size() == 7);
  CHECK(j["apt_command"][4] == "libnccl2=2.28.9-1+cuda13.0");
  CHECK(j["manual"].size() == 4);
  CHECK(j["pythons_not_run"][0] == "/usr/bin/python3");
  CHECK(j["pip_commands"][0]["interpreter"] == "/usr/bin/python3");
  std::string toml = render_sync_plan(p, "env.lock", EnvFormat::toml);
  CHECK(toml.find("apt-command = [\"apt-get\", \"install\", \"-y\", \"--allow-downgrades\",") != std::string::npos);
  CHECK(toml.find("[[manual]]\ncomponent = \"driver\"") != std::string::npos);
  // The rows every tool offers (dl-envlock refused csv, jsonl and md).
  std::string csv = render_sync_plan(p, "env.lock", EnvFormat::csv);
  CHECK(csv.rfind("action,component,version,detail\n", 0) == 0);
  CHECK(csv.find("\nmanual,driver,580.95.05,") != std::string::npos);
  CHECK(csv.find("\npip-command,/usr/bin/python3,,/usr/bin/python3 -m pip install numpy==1.24.2\n") != std::string::npos);
  CHECK(csv.find("\napt-command,deb,,apt-get install -y --allow-downgrades libnccl2=2.28.9-1+cuda13.0") != std::string::npos);
  const auto rows = test::lines(render_sync_plan(p, "env.lock", EnvFormat::jsonl));
  CHECK(rows.size() == p.install.size() + p.satisfied.size() + p.pip_install.size() + p.pip_satisfied.size() +
                           p.manual.size() + 2);  // + apt and pip commands
  CHECK(nlohmann::json::parse(rows.front())["action"] == "install");
  CHECK(render_sync_plan(p, "env.lock", EnvFormat::md).rfind("| action | component | version | detail |\n", 0) == 0);
}

TEST_CASE("sync plan: Python packages at their locked version are left out; local versions are manual work") {
  Lock l;
  const std::string py = "/opt/py/bin/python3";
  l.add({"python", py}, "3.11.2").set("executable", py);
  l.add({"python", py, "packages", "numpy"}, "1.24.2");                // installed as 1.24.2.0: the same (PEP 440)
  l.add({"python", py, "packages", "scipy"}, "1.10.0");                // installed 1.9.0
  l.add({"python", py, "packages", "requests"}, "2.31.0");             // not installed
  l.add({"python", py, "packages", "torch"}, "1.13.0a0+gitunknown");   // installed, the same local build
  l.add({"python", py, "packages", "mylib"}, "0.1+local.2");           // a local build that differs
  const PythonInstalled have = {{py, {{"numpy", "1.24.2.0"}, {"scipy", "1.9.0"}, {"torch", "1.13.0a0+gitunknown"},
                                      {"mylib", "0.1"}}}};
  SyncPlan p = plan_sync(l, {}, true, "env.lock", have);
  REQUIRE(p.pip.size() == 1);
  CHECK(p.pip[0].second == std::vector<std::string>{py, "-m", "pip", "install", "scipy==1.10.0", "requests==2.31.0"});
  REQUIRE(p.pip_install.size() == 2);
  CHECK(p.pip_install[0].detail == "installed 1.9.0");
  CHECK(p.pip_install[1].detail == "not installed");
  REQUIRE(p.pip_satisfied.size() == 2);
  CHECK(p.pip_satisfied[0].component == "python.\"" + py + "\".packages.numpy");
  CHECK(p.pip_satisfied[1].component == "python.\"" + py + "\".packages.torch");
  CHECK(p.pythons_not_run.empty());
  REQUIRE(p.manual.size() == 1);
  CHECK(p.manual[0].component == "python.\"" + py + "\".packages.mylib");
  CHECK(p.manual[0].detail.find("a local version (+local.2): no public package index serves it; installed 0.1;") == 0);
  const std::string t = render_sync_plan(p, "env.lock", EnvFormat::table);
  CHECK(t.find("# Python packages: 2 to install or change, 2 already at the locked version\n") != std::string::npos);
  CHECK(t.find("torch") == std::string::npos);
  CHECK(t.find("installed packages not read") == std::string::npos);

  // Everything already there: no pip command at all.
  SyncPlan none = plan_sync(l, {}, true, "env.lock",
                            {{py, {{"numpy", "1.24.2"}, {"scipy", "1.10.0"}, {"requests", "2.31.0"},
                                   {"torch", "1.13.0a0+gitunknown"}, {"mylib", "0.1+local.2"}}}});
  CHECK(none.pip.empty());
  CHECK(none.manual.empty());
  CHECK(none.pip_satisfied.size() == 5);
  CHECK(render_sync_plan(none, "env.lock", EnvFormat::table).find("pip install") == std::string::npos);
}
