// `shardscope run`: real sharded training on the CPU engine (engine/exec).
// Three ways to start ranks:
//  - default: this process is the launcher; it starts --nproc rank processes
//    of itself (engine/launch), each rendezvousing through the TCP store and
//    talking through the shared-memory communicator; rank 0 gathers the rank
//    traces through the store and the launcher prints what rank 0 wrote;
//  - under torchrun / srun / mpirun (RANK etc. set): this process is one rank;
//    rank 0 prints;
//  - --ranks-as-threads: every rank is a thread of this process.
#include <unistd.h>
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_inputs.h"
#include "engine/comm/shm_communicator.h"
#include "engine/device_info.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "traces/binary_format.h"
#include "traces/merge.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope run --model M [--policy P] [--set K=V]... [--backend cpu|cuda] [--nproc N]\n"
    "               [--steps S] [--data FILE] [--trace OUT] [--json] [--ranks-as-threads]\n\n"
    "  --backend cpu       CPU ranks (default); cuda is not built yet\n"
    "  --nproc N           ranks (default 2); each a process started by this launcher\n"
    "  --steps S           training steps (default 5)\n"
    "  --data FILE         train a byte-level model on a text file (default: seeded synthetic "
    "tokens)\n"
    "  --trace OUT         write the merged trace of every rank (native format)\n"
    "  --json              metrics JSON (source engine-cpu) with losses and tokens_per_s\n"
    "  --save DIR          checkpoint after the last step: DIR/step-N/ (sharded files + index,\n"
    "                      model.safetensors) and DIR/latest\n"
    "  --load PATH         start from a checkpoint (DIR, DIR/step-N or a .safetensors file), any\n"
    "                      world size or policy\n"
    "  --ranks-as-threads  run the ranks as threads of this process\n"
    "Under torchrun, srun or mpirun (RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK set)\n"
    "this process is one rank and rendezvouses at MASTER_ADDR:MASTER_PORT.";

constexpr size_t kChunk = size_t{3} << 20;  // store values stay under its 4 MiB message limit

struct RunSetup {
  engine::exec::TrainConfig config;
  PlanInputs in;
};

int64_t tokens_per_step(const PlanInputs& in, int world) {
  const int64_t t = in.graph.vocab_size > 0 ? plan::resolve_seq_len(in.policy, in.graph) : 1;
  return in.policy.batch_size * t * world * in.policy.grad_accum_steps;
}

// Metrics of the merged trace (median over steps 2..S, ARCHITECTURE.md) plus the run's figures.
nlohmann::json result_json(const traces::Trace& trace, const std::vector<double>& losses,
                           const std::vector<double>& step_seconds, int64_t tokens) {
  nlohmann::json j = traces::metrics_to_json(traces::compute_metrics(trace));
  j["losses"] = losses;
  std::vector<double> s(step_seconds.begin() + (step_seconds.size() > 1 ? 1 : 0),
                        step_seconds.end());
  std::sort(s.begin(), s.end());
  const double median = s.empty() ? 0 : s[s.size() / 2];
  j["tokens_per_s"] = median > 0 ? static_cast<double>(tokens) / median : 0.0;
  j["tokens_per_step"] = tokens;
  return j;
}

std::string summary_text(const nlohmann::json& j, int64_t persistent, int64_t peak) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "step time %.2f ms (median after the first step), %.0f tokens/s\n"
                "peak allocated %s per rank (persistent %s), peak reserved %s\n"
                "compute %.2f ms, communication %.2f ms, exposed %.2f ms, overlap %.1f%%\n",
                j.value("step_time_ms", 0.0), j.value("tokens_per_s", 0.0),
                human_bytes(static_cast<double>(peak)).c_str(),
                human_bytes(static_cast<double>(persistent)).c_str(),
                human_bytes(j.value("peak_reserved_bytes", 0.0)).c_str(),
                j.value("compute_ms", 0.0), j.value("comm_ms", 0.0),
                j.value("exposed_comm_ms", 0.0), 100 * j.value("overlap", 0.0));
  return buf;
}

// One line per step; on a terminal, one line redrawn with a progress bar.
void progress(const engine::exec::StepReport& r, int64_t steps, int64_t tokens) {
  const double tps = r.seconds > 0 ? static_cast<double>(tokens) / r.seconds : 0.0;
  if (isatty(STDERR_FILENO)) {
    const int width = 24;
    const auto filled = static_cast<int>(width * (r.index + 1) / std::max<int64_t>(steps, 1));
    std::string bar(static_cast<size_t>(std::min(filled, width)), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] step %" PRId64 "/%" PRId64 "  loss %.5f  %.0f tokens/s%s",
                 bar.c_str(), r.index + 1, steps, r.loss, tps, r.skipped ? " (skipped)" : "");
    if (r.index + 1 >= steps) std::fputc('\n', stderr);
    return;
  }
  std::fprintf(stderr, "step %" PRId64 "/%" PRId64 "  loss %.5f  %.1f ms  %.0f tokens/s%s\n",
               r.index + 1, steps, r.loss, r.seconds * 1e3, tps,
               r.skipped ? "  (overflow: step skipped)" : "");
}

// Writes the outputs rank 0 owns: the trace file and the JSON / summary text.
std::string finish(const Args& args, const traces::Trace& merged, const engine::exec::RankRun& r0,
                   int64_t tokens) {
  if (args.has("trace")) traces::save_trace(merged, args.get("trace"));
  const nlohmann::json j = result_json(merged, r0.losses, r0.step_seconds, tokens);
  if (args.has("json")) return j.dump(2) + "\n";
  return summary_text(j, r0.persistent_bytes, r0.peak_allocated_bytes);
}

int run_worker(const Args& args, const PlanInputs& in, engine::exec::TrainConfig config,
               const engine::launch::RankEnv& env) {
  using namespace std::chrono_literals;
  engine::launch::Rendezvous rv = engine::launch::rendezvous(env, 60s);
  engine::comm::ShmOptions opt;
  opt.name = "/shardscope-" + env.run_id;
  opt.rank = env.rank;
  opt.world_size = env.world_size;
  opt.groups = engine::exec::comm_groups(in.graph, in.policy, env.world_size);
  opt.timeout = 60s;
  std::unique_ptr<engine::comm::Communicator> comm;
  try {
    comm = engine::comm::open_shm_communicator(opt);
  } catch (const std::exception& e) {
    rv.store->set("error/" + std::to_string(env.rank), e.what());
    throw;
  }
  const int64_t tokens = tokens_per_step(in, env.world_size);
  engine::exec::TrainHooks hooks;
  hooks.on_step = [&](const engine::exec::StepReport& r) { progress(r, config.steps, tokens); };
  engine::exec::RankRun run;
  try {
    run = engine::exec::train_rank(config, *comm, hooks);
  } catch (const std::exception& e) {
    rv.store->set("error/" + std::to_string(env.rank), e.what());
    throw;
  }
  // Rank traces to rank 0 through the store, with each rank's clock offset.
  const std::string bytes = traces::trace_to_binary(run.trace);
  const std::string me = std::to_string(env.rank);
  const size_t chunks = (bytes.size() + kChunk - 1) / kChunk;
  for (size_t i = 0; i < chunks; ++i)
    rv.store->set("trace/" + me + "/" + std::to_string(i), bytes.substr(i * kChunk, kChunk));
  rv.store->set("trace/" + me + "/chunks", std::to_string(chunks));
  rv.store->set("offset/" + me, std::to_string(rv.store->clock_offset_ns()));
  if (env.rank == 0) {
    traces::Trace merged;
    merged.meta = run.trace.meta;
    merged.meta.clock_alignment = "tcp store (min-RTT offset to rank 0's store clock)";
    for (int r = 0; r < env.world_size; ++r) {
      const std::string k = std::to_string(r);
      const size_t n = std::stoul(rv.store->get("trace/" + k + "/chunks"));
      std::string data;
      for (size_t i = 0; i < n; ++i) data += rv.store->get("trace/" + k + "/" + std::to_string(i));
      const traces::Trace t = traces::read_trace_binary(data.data(), data.size(), "rank " + k);
      traces::merge_ranks(merged, t, std::stoll(rv.store->get("offset/" + k)));
    }
    const std::string text = finish(args, merged, run, tokens);
    if (args.has("run-dir")) {
      std::ofstream(args.get("run-dir") + "/result.txt") << text;
    } else {
      std::fputs(text.c_str(), stdout);
    }
  }
  rv.store->barrier("done");  // rank 0's server stays up until every rank has read
  return 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Args args(argc, argv,
            plan_input_flags({{"backend"},
                              {"nproc"},
                              {"steps"},
                              {"hw"},
                              {"emulate-world"},
                              {"rank"},
                              {"data"},
                              {"profile", false},
                              {"trace"},
                              {"json", false},
                              {"save"},
                              {"load"},
                              {"ranks-as-threads", false},
                              {"run-dir"}}),
            false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  const std::string backend = args.get("backend", "cpu");
  if (backend == "cuda") {
    const engine::CudaAvailability cuda = engine::query_cuda();
    throw UsageError("--backend cuda: the CUDA engine is not implemented yet (" + cuda.message +
                     ")");
  }
  if (backend != "cpu") throw UsageError("--backend: expected cpu or cuda, got '" + backend + "'");
  if (args.has("emulate-world") || args.has("rank") || args.has("profile"))
    throw UsageError("--emulate-world, --rank and --profile need --backend cuda");
  if (args.has("hw"))
    throw UsageError("--hw: the CPU backend measures; it takes no hardware model");

  const std::optional<engine::launch::RankEnv> env = engine::launch::detect_rank_env();
  const int world = env ? env->world_size : static_cast<int>(args.get_int("nproc", 2, 1, 64));
  PlanInputs in = load_plan_inputs(args, world);
  engine::exec::TrainConfig config;
  config.graph = &in.graph;
  config.policy = in.policy;
  config.world_size = world;
  config.steps = args.get_int("steps", 5, 1, 1000000);
  config.data_file = args.get("data");
  config.model_name = args.require("model");
  config.save_dir = args.get("save");
  config.load_path = args.get("load");
  const int64_t tokens = tokens_per_step(in, world);

  if (env) return run_worker(args, in, config, *env);

  if (args.has("ranks-as-threads")) {
    engine::exec::TrainHooks hooks;
    hooks.on_step = [&](const engine::exec::StepReport& r) { progress(r, config.steps, tokens); };
    std::vector<engine::exec::RankRun> runs = engine::exec::train_threads(config, hooks);
    traces::Trace merged;
    merged.meta = runs[0].trace.meta;
    merged.meta.clock_alignment = "one process (ranks as threads)";
    for (const engine::exec::RankRun& r : runs) traces::merge_ranks(merged, r.trace);
    std::fputs(finish(args, merged, runs[0], tokens).c_str(), stdout);
    return 0;
  }

  // Launcher: this binary again, once per rank, writing rank 0's output to a run dir.
  char dir_template[] = "/tmp/shardscope-run-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) throw std::runtime_error("cannot create a run directory in /tmp");
  engine::launch::LaunchOptions lo;
  lo.nproc = world;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  self[n] = '\0';
  lo.argv.push_back(self);
  for (int i = 0; i < argc; ++i) lo.argv.push_back(argv[i]);  // argv[0] is "run"
  lo.argv.push_back("--run-dir");
  lo.argv.push_back(dir);
  const engine::launch::LaunchResult res = engine::launch::launch(lo);
  const std::string result_file = std::string(dir) + "/result.txt";
  if (res.exit_code != 0) {
    std::remove(result_file.c_str());
    rmdir(dir);
    std::fprintf(stderr, "error: %s\n", res.message.c_str());
    return res.exit_code;
  }
  std::ifstream result(result_file);
  std::stringstream ss;
  ss << result.rdbuf();
  std::fputs(ss.str().c_str(), stdout);
  std::remove(result_file.c_str());
  rmdir(dir);
  return 0;
}

}  // namespace shardscope::cli
