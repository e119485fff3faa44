// dl-bench: measure this machine (GEMM, memory copies, collectives, dl-train's step) and print
// rows every machine can compare (schema dlkit-bench/1; dl-cost --bench and dl-shard --bench read them).
#include <CLI/CLI.hpp>
#include <iostream>
#include <set>

#include "dl/device/build_info.hpp"
#include "dl/bench/all.hpp"
#include "dl/bench/collective.hpp"
#include "dl/bench/gemm.hpp"
#include "dl/bench/memory.hpp"
#include "dl/bench/output.hpp"
#include "dl/bench/train.hpp"
#include "dl/cli/app.hpp"
#include "dl/cli/command_line.hpp"
#include "dl/cli/units.hpp"
#include "dl/core/error.hpp"
#include "dl/core/option_error.hpp"
#include "dl/core/version.hpp"
#include "dl/dist/launch_env.hpp"
#include "dl/dist/launcher.hpp"
#include "dl/io/atomic_file.hpp"
#include "dl/plan/plan.hpp"

namespace {

struct Flags {
  std::string format = "table";
  std::string device = "cpu";
  dl::bench::CommonOptions common;
};

// --device cpu | cuda | auto.
dl::DeviceChoice parse_device(const std::string& flag) {
  if (auto d = dl::parse_choice<dl::DeviceChoice>(flag)) return *d;
  dl::throw_usage("--device ", flag, ": unknown device (use cpu, cuda or auto)");
}

// The common flags as the library's options, checked.
void apply_common(Flags& f) {
  dl::bench::apply_common(f.common);
  f.common.device = parse_device(f.device);
}

void add_common(CLI::App* sub, Flags& f, const std::string& repeat_names = "--repeat",
                const std::string& warmup_names = "--warmup") {
  sub->add_option("--format", f.format, "table | json | jsonl | csv | md (json is what dl-cost --bench reads)");
  sub->add_option(repeat_names, f.common.repeat, "Timed runs (the median is reported)");
  sub->add_option(warmup_names, f.common.warmup, "Untimed runs first");
  sub->add_option("--threads", f.common.threads, "CPU threads (OpenBLAS and dlkit's pool; 0 = all cores)");
  sub->add_option("--device", f.device, "cpu | cuda | auto (auto: the GPU when a CUDA build finds one)");
  sub->add_flag("-q,--quiet", f.common.quiet, "No progress logs on stderr");
}

// The flags of the library's options, for its errors (dl/core/option_error.hpp).
const dl::OptionNames kFlags = {
    {"min_bytes", "-b"}, {"max_bytes", "-e"}, {"factor", "-f"},          {"step_bytes", "-i"},
    {"type", "-d"},      {"redop", "-o"},     {"root", "-r"},            {"timeout_s", "--timeout"},
    {"dtype", "--dtype"}, {"bytes", "--bytes"}, {"device", "--device"}, {"steps", "--steps"},
    {"backend", "--backend"}, {"nproc", "--nproc-per-node"}, {"oversubscribe", "--oversubscribe"}, {"sizes", "--sizes"},
    {"repeat", "--repeat"}, {"warmup", "--warmup"}, {"threads", "--threads"}, {"nproc_per_node", "--nproc-per-node"}};

// After the rows: each wrong result on stderr, and exit 1 when there is one.
int exit_for(const dl::bench::Report& report) {
  for (const auto& f : report.failures) std::cerr << "dl-bench: wrong result: " << f << "\n";
  return report.failures.empty() ? dl::kExitOk : dl::kExitFailure;
}

// Prints the rows (and notes in human formats); a wrong result exits 1 after printing.
int emit(const dl::bench::Report& report, const std::string& format) {
  std::cout << dl::bench::render_report(report, dl::parse_output_format(format)) << std::flush;
  return exit_for(report);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dl-bench: measure this machine (GEMM, memory, collectives, a training step) in rows every machine can compare."};
  // A function, run by --version alone: it loads cuBLASLt and the driver to report their versions.
  app.set_version_flag("--version", [] { return "dl-bench " + dl::version_string() + "\n" + dl::device_build_info(); });
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  dl-bench gemm --sizes 512,1024,2048                  # FLOP/s and % of peak\n"
      "  dl-bench memory                                      # copy bandwidth (read + write)\n"
      "  dl-bench collective allreduce --nproc-per-node 2 -b 8 -e 128M -f 2   # nccl-tests' table\n"
      "  dl-bench train configs/addition.toml --steps 20      # tokens/s, MFU, step split\n"
      "  dl-bench all --format json > bench.json && dl-cost estimate big.toml --bench bench.json\n"
      "\n"
      "Exit codes: 0 ok, 1 a failure or a wrong result (rows are still printed), 2 bad usage or input.\n"
      "Methods (what is timed, FLOP and byte counts, busbw factors, peaks): docs/BENCH.md.");

  Flags gemm_f, mem_f, coll_f, train_f, all_f;

  auto* gemm = app.add_subcommand("gemm", "Achieved FLOP/s of C = A B and the share of the device's peak");
  std::string g_sizes, g_dtype = "fp32";
  gemm->add_option("--sizes", g_sizes, "Comma-separated N (N x N x N) or MxNxK (default CPU 512,1024,2048; GPU 1024,4096,8192; emulated GPU 64,128,256)");
  gemm->add_option("--dtype", g_dtype, "fp32 | tf32 | bf16 | fp16 (the CPU computes fp32)");
  add_common(gemm, gemm_f);
  gemm->footer("Example:\n  dl-bench gemm --sizes 1024,4096x4096x1024 --repeat 20 --format json");

  auto* memory = app.add_subcommand("memory", "Copy bandwidth: bytes read plus bytes written per second");
  std::string m_bytes;
  memory->add_option("--bytes", m_bytes, "Size of one copy (default CPU 256MiB, GPU 1GiB, emulated GPU 16MiB), e.g. 1GiB");
  add_common(memory, mem_f);
  memory->footer("Example:\n  dl-bench memory --bytes 1GiB --repeat 20");

  auto* coll = app.add_subcommand("collective", "nccl-tests-style sweep: time, algbw, busbw, #wrong (Gloo or NCCL)");
  std::string c_op, c_min = "8", c_max = "32M", c_type = "float", c_redop = "sum", c_backend, c_rows_file;
  int64_t c_factor = 2, c_step = 0;
  int c_nproc = 2, c_root = 0;
  bool c_oversubscribe = false;
  double c_timeout = 300;
  coll->add_option("op", c_op, "allreduce | allgather | reducescatter | broadcast | sendrecv")->required();
  coll->add_option("--nproc-per-node", c_nproc, "Ranks to start on this machine (each a process of dl-bench; at most one per CPU core)");
  dl::add_old_flag_name(coll, "--nproc", "--nproc-per-node", c_nproc);
  coll->add_flag("--oversubscribe", c_oversubscribe,
                 "Allow more Gloo ranks than CPU cores (as mpirun spells it); the times then include scheduling");
  coll->add_option("-b,--minbytes", c_min, "Smallest size (8, 1K, 128M: K/M/G are powers of 1024 as in nccl-tests)");
  coll->add_option("-e,--maxbytes", c_max, "Largest size");
  coll->add_option("-f,--stepfactor", c_factor, "Multiply the size by this each step");
  coll->add_option("-i,--stepbytes", c_step, "Add this many bytes each step (with -f 1)");
  coll->add_option("-d,--datatype", c_type, "float | double | int32 | int64");
  coll->add_option("-o,--op", c_redop, "Reduction: sum | max | min");
  coll->add_option("-r,--root", c_root, "Broadcast root rank");
  coll->add_option("--backend", c_backend,
                   "gloo (CPU memory) | nccl (GPU memory, one GPU per rank); default from --device: cpu gloo, cuda nccl, "
                   "auto nccl when each rank has a GPU");
  coll->add_option("--timeout", c_timeout, "Seconds any rank waits for the others before failing");
  coll->add_option("--rows-file", c_rows_file, "Write rank 0's rows as JSON lines to FILE instead of stdout")->group("");
  add_common(coll, coll_f, "-n,--repeat", "-w,--warmup");
  coll->footer("Examples:\n  dl-bench collective allreduce --nproc-per-node 2 -b 8 -e 128M -f 2\n"
               "  dl-bench collective broadcast --nproc-per-node 4 --oversubscribe -r 1 -e 64M --format csv   # 4 ranks on fewer cores\n"
               "  dl-bench collective allreduce --device cuda --nproc-per-node 8 -b 8 -e 8G -f 2   # NCCL, one rank per GPU");

  auto* train = app.add_subcommand("train", "dl-train's training step: tokens/s, samples/s, MFU, step split");
  std::string t_config, t_formula = "palm";
  std::vector<std::string> t_sets;
  int64_t t_steps = -1;
  train->add_option("config", t_config, "Training config (TOML), as for dl-train")->required();
  train->add_option("--set", t_sets, "Override a config key: --set model.n_layer=4 (repeatable)")->type_name("KEY=VALUE");
  train->add_option("--steps", t_steps, "Timed steps per run, after --warmup steps (default 10); --repeat runs (default 1), the median run reported");
  train->add_option("--flop-formula", t_formula, "palm (6N+12LHQT) | llmc (6N+6LDT) for MFU");
  add_common(train, train_f);
  train->footer("Examples:\n  dl-bench train configs/addition.toml --steps 20 --set train.batch_size=32\n"
                "  dl-bench train configs/addition.toml --repeat 3 --steps 5    # 3 runs, the median one");

  auto* all = app.add_subcommand("all", "The machine's card: every benchmark at short sizes");
  std::string a_config;
  all->add_option("config", a_config, "Training config for the train row (default: dl-train's built-in defaults)");
  add_common(all, all_f);
  all->footer("Example:\n  dl-bench all --format json > bench.json");

  // An unknown benchmark name is a usage error that lists the benchmarks (CLI11 alone would only
  // say the argument was not expected).
  static const std::set<std::string> kBenchmarks = {"gemm", "memory", "collective", "train", "all"};
  if (argc == 1 || (argv[1][0] != '-' && !kBenchmarks.count(argv[1]))) {
    const std::string name = argc > 1 ? argv[1] : "";
    return dl::run_tool("dl-bench", [&]() -> int {
      dl::throw_usage(name.empty() ? std::string("no benchmark given") : "unknown benchmark '" + name + "'",
                      dl::command_line_suggestion(app, argc, argv), " (use gemm, memory, collective, train or all; see dl-bench --help)");
    });
  }
  if (const auto code = dl::parse_command_line(app, argc, argv, "dl-bench")) return *code;

  return dl::dist::run_rank_tool("dl-bench", [&]() -> int {
    if (*gemm) {
      dl::parse_output_format(gemm_f.format);
      apply_common(gemm_f);
      dl::bench::GemmOptions o;
      o.dtype = dl::bench::parse_gemm_dtype(g_dtype);
      if (!g_sizes.empty()) o.sizes = dl::bench::parse_gemm_sizes(g_sizes);
      return emit(dl::bench::run_gemm(o, gemm_f.common), gemm_f.format);
    }
    if (*memory) {
      dl::parse_output_format(mem_f.format);
      apply_common(mem_f);
      dl::bench::MemoryOptions o;
      if (!m_bytes.empty()) o.bytes = dl::parse_size(m_bytes, "--bytes", true);
      return emit(dl::bench::run_memory(o, mem_f.common), mem_f.format);
    }
    if (*coll) {
      dl::parse_output_format(coll_f.format);
      dl::bench::CollectiveOptions o;
      o.op = dl::bench::parse_collective_op(c_op);
      coll_f.common.device = parse_device(coll_f.device);
      o.backend = c_backend.empty() ? dl::bench::default_collective_backend(coll_f.common.device, c_nproc)
                                    : dl::bench::parse_collective_backend(c_backend);
      o.min_bytes = static_cast<int64_t>(dl::parse_size(c_min, "-b", true));
      o.max_bytes = static_cast<int64_t>(dl::parse_size(c_max, "-e", true));
      o.factor = c_factor;
      o.step_bytes = c_step;
      o.type = c_type;
      o.redop = c_redop;
      o.root = c_root;
      o.timeout_s = c_timeout;
      const auto role = dl::dist::launch_role(c_nproc, 1, dl::dist::process_environment());
      // Ranks this process starts (or is one of): more than the cores only with --oversubscribe.
      std::string oversubscribed;
      if (role != dl::dist::LaunchRole::external_rank) {
        if (o.backend == dl::bench::CollectiveBackend::gloo) oversubscribed =
            dl::name_options(dl::bench::check_local_ranks(c_nproc, dl::bench::max_local_ranks(), c_oversubscribe), kFlags);
        else if (c_nproc < 1) dl::throw_usage("--nproc-per-node ", c_nproc, ": need at least 1 rank");
      }
      if (role == dl::dist::LaunchRole::single || role == dl::dist::LaunchRole::launcher) {
        if (!oversubscribed.empty()) dl::log_warn(oversubscribed);
        dl::bench::validate_collective(o, c_nproc);  // nccl: at most one rank per GPU
        if (role == dl::dist::LaunchRole::launcher) {
          dl::dist::LaunchOptions lo;
          lo.nproc_per_node = c_nproc;
          lo.args.assign(argv + 1, argv + argc);
          if (c_backend.empty()) lo.args.insert(lo.args.end(), {"--backend", std::string(o.backend.name())});  // ranks agree without re-deciding
          return dl::dist::launch_local_ranks(lo);
        }
      }
      apply_common(coll_f);
      int rank = 0;
      // Rank 0 prints each size's row as it finishes (nccl-tests' habit), through a pipe too.
      dl::bench::RowStream stream(std::cout, dl::parse_output_format(coll_f.format));
      dl::bench::RowSink on_row;
      if (c_rows_file.empty()) on_row = [&](const dl::bench::Row& row) { stream.add(row); };
      dl::bench::Report r = dl::bench::run_collective_rank(o, coll_f.common, &rank, on_row);
      if (!oversubscribed.empty()) r.notes.push_back(oversubscribed);
      if (rank != 0) return r.failures.empty() ? dl::kExitOk : dl::kExitFailure;
      if (!c_rows_file.empty()) {
        dl::write_output(dl::output_target(c_rows_file), dl::bench::render_report(r, dl::OutputFormat::jsonl));
        return r.failures.empty() ? dl::kExitOk : dl::kExitFailure;
      }
      stream.finish(r);
      return exit_for(r);
    }
    if (*train) {
      dl::parse_output_format(train_f.format);
      apply_common(train_f);
      dl::bench::TrainBenchOptions o;
      o.config_path = t_config;
      o.overrides = t_sets;
      o.steps = t_steps;
      o.formula = dl::plan::parse_flop_formula(t_formula);
      return emit(dl::bench::run_train_bench(o, train_f.common), train_f.format);
    }
    dl::parse_output_format(all_f.format);
    apply_common(all_f);
    dl::bench::AllOptions o;
    o.config_path = a_config;
    o.nproc = std::min(2, dl::bench::max_local_ranks());
    return emit(dl::bench::run_all(o, all_f.common), all_f.format);
  }, kFlags);
}
