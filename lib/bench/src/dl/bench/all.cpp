#include "dl/bench/all.hpp"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dl/bench/gemm.hpp"
#include "dl/bench/memory.hpp"
#include "dl/bench/output.hpp"
#include "dl/bench/train.hpp"
#include "dl/cli/app.hpp"
#include "dl/core/error.hpp"
#include "dl/dist/launcher.hpp"

namespace dl::bench {

namespace fs = std::filesystem;

namespace {

Report collective_job(const AllOptions& o, const CommonOptions& c) {
  std::string tmpl = (fs::temp_directory_path() / "dlkit-bench-all-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw_runtime("cannot create a temporary folder under ", fs::temp_directory_path().string());
  const fs::path dir = tmpl, rows_file = dir / "collective.jsonl";
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  dist::LaunchOptions lo;
  lo.nproc_per_node = o.nproc;
  lo.args = {"collective", "allreduce", "--nproc-per-node", std::to_string(o.nproc), "-b", "8", "-e", "4M", "-f", "4",
             "--rows-file", rows_file.string(), "--device", std::string(c.device.name())};
  if (c.repeat > 0) lo.args.insert(lo.args.end(), {"--repeat", std::to_string(c.repeat)});
  if (c.warmup >= 0) lo.args.insert(lo.args.end(), {"--warmup", std::to_string(c.warmup)});
  if (c.quiet) lo.args.push_back("-q");
  // Logged like the other stages; rank 0 then logs each size as it finishes.
  log_info(str("collective: allreduce over ", o.nproc, " ranks, 8 B to 4 MiB"));
  const int code = dist::launch_local_ranks(lo);
  if (code != 0) throw Error(code == kExitUsage ? ErrorKind::usage : ErrorKind::runtime,
                             str("all: the all-reduce ranks failed (exit ", code, "); see their messages above"));
  std::ifstream f(rows_file);
  std::stringstream ss;
  ss << f.rdbuf();
  Report r;
  r.rows = parse_rows(ss.str(), OutputFormat::jsonl, rows_file.string());
  for (const Row& row : r.rows)
    for (const char* k : {"oop_wrong", "ip_wrong"})
      if (row.value(k, int64_t{0}) != 0)
        r.failures.push_back(str("allreduce at ", row.value("size", int64_t{0}), " bytes: ", row.value(k, int64_t{0}),
                                 " wrong elements (", k, ")"));
  r.notes.push_back(str("collective: allreduce over ", o.nproc, " ranks (Gloo), busbw = algbw x 2(n-1)/n"));
  return r;
}

}  // namespace

Report run_all(const AllOptions& o, const CommonOptions& c) {
  select_device(c.device);
  Report all;
  GemmOptions g;
  g.sizes = {{512, 512, 512}, {1024, 1024, 1024}};
  all.append(run_gemm(g, c));
  MemoryOptions m;
  m.bytes = 64.0 * 1024 * 1024;
  all.append(run_memory(m, c));
  all.append(collective_job(o, c));
  // Training last: the trainer keeps SIGINT for itself (a clean stop) once it has run.
  TrainBenchOptions t;
  t.config_path = o.config_path;
  if (c.repeat <= 0) t.steps = 5;
  all.append(run_train_bench(t, c));
  return all;
}

}  // namespace dl::bench
