// `shardscope run`: real sharded training on the CPU engine (engine/exec) or
// the CUDA engine (engine/cuda/exec, cli/run_cuda.h). Three ways to start ranks:
//  - default: this process is the launcher; it starts --nproc rank processes
//    of itself (engine/launch), each rendezvousing through the TCP store and
//    talking through the shared-memory communicator (CPU) or NCCL (CUDA, one
//    process per GPU); rank 0 gathers the rank traces through the store and
//    the launcher prints what rank 0 wrote;
//  - under torchrun / srun / mpirun (RANK etc. set): this process is one rank;
//    rank 0 prints;
//  - --ranks-as-threads (CPU): every rank is a thread of this process;
//    --emulate-world N --rank R (CUDA): this process is rank R of a modelled
//    world of N on one GPU.
// Errors, usage or environment (no CUDA device or driver), exit with status 2.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_inputs.h"
#include "cli/run_common.h"
#include "cli/run_cuda.h"
#include "engine/comm/shm_communicator.h"
#include "engine/device_info.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"
#include "traces/merge.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope run --model M [--policy P] [--set K=V]... [--backend cpu|cuda] [--nproc N]\n"
    "               [--steps S] [--data FILE] [--trace OUT] [--json] [--ranks-as-threads]\n"
    "               [--emulate-world N --rank R [--hw H]] [--profile] [--cuda-graph]\n"
    "               [--attention-kernel simt|tensor-core]\n\n"
    "  --backend cpu       CPU ranks (default)\n"
    "  --backend cuda      one process per GPU, collectives through NCCL\n"
    "  --nproc N           ranks (default 2 on cpu, every visible GPU on cuda); each a process\n"
    "                      started by this launcher\n"
    "  --steps S           training steps (default 5)\n"
    "  --data FILE         train a byte-level model on a text file (default: seeded synthetic "
    "tokens)\n"
    "  --trace OUT         write the merged trace of every rank (native format)\n"
    "  --json              metrics JSON (source engine-cpu / engine-cuda) with losses and\n"
    "                      tokens_per_s (global tokens per second)\n"
    "  --save DIR          checkpoint after the last step: DIR/step-N/ (sharded files + index,\n"
    "                      model.safetensors) and DIR/latest (cpu only)\n"
    "  --load PATH         start from a checkpoint (DIR, DIR/step-N or a .safetensors file), any\n"
    "                      world size or policy (cpu only)\n"
    "  --ranks-as-threads  run the ranks as threads of this process (cpu only)\n"
    "cuda only:\n"
    "  --emulate-world N   this process is one rank of a world of N on one GPU: real compute\n"
    "  --rank R            and memory, collectives held for the hardware model's time, moving\n"
    "                      no data (losses are not those of an N-rank run; docs/cuda.md)\n"
    "  --hw H              hardware model of the emulated collectives (default h100-sxm)\n"
    "  --profile           record the GPU's activity with CUPTI (kernels, copies, NCCL)\n"
    "  --cuda-graph        capture the step as a CUDA graph\n"
    "  --attention-kernel K  simt (default: fp32 math on the CUDA cores, every dtype) or\n"
    "                      tensor-core (WMMA, bf16/f16 param dtype, head_dim a multiple of 16\n"
    "                      up to 128; refused otherwise)\n"
    "Under torchrun, srun or mpirun (RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK set)\n"
    "this process is one rank (on GPU LOCAL_RANK with --backend cuda) and rendezvouses at\n"
    "MASTER_ADDR:MASTER_PORT.";

engine::exec::TrainConfig cpu_train_config(const Args& args, const PlanInputs& in, int world) {
  engine::exec::TrainConfig config;
  config.graph = &in.graph;
  config.policy = in.policy;
  config.world_size = world;
  config.steps = args.get_int("steps", 5, 1, 1000000);
  config.data_file = args.get("data");
  config.model_name = args.require("model");
  config.save_dir = args.get("save");
  config.load_path = args.get("load");
  return config;
}

// One CPU rank of a launched world, talking through shared memory.
int run_cpu_rank(const Args& args, const PlanInputs& in, const engine::exec::TrainConfig& config,
                 const engine::launch::RankEnv& env) {
  return run_launched_rank(args, env, [&](engine::launch::Rendezvous&) {
    using namespace std::chrono_literals;
    engine::comm::ShmOptions opt;
    opt.name = "/shardscope-" + env.run_id;
    opt.rank = env.rank;
    opt.world_size = env.world_size;
    opt.groups = engine::exec::comm_groups(in.graph, in.policy, env.world_size);
    opt.timeout = 60s;
    std::unique_ptr<engine::comm::Communicator> comm = engine::comm::open_shm_communicator(opt);
    RankOutcome out;
    out.tokens_per_step = tokens_per_step(in, env.world_size);
    out.run =
        engine::exec::train_rank(config, *comm, progress_hooks(config.steps, out.tokens_per_step));
    return out;
  });
}

int run_cpu(const Args& args, int argc, char** argv) {
  for (const char* flag : {"emulate-world", "rank", "profile", "cuda-graph", "attention-kernel"})
    if (args.has(flag)) throw UsageError(std::string("--") + flag + " needs --backend cuda");
  if (args.has("hw"))
    throw UsageError("--hw: the CPU backend measures; it takes no hardware model");

  const std::optional<engine::launch::RankEnv> env = engine::launch::detect_rank_env();
  const int world = env ? env->world_size : static_cast<int>(args.get_int("nproc", 2, 1, 64));
  PlanInputs in = load_plan_inputs(args, world);
  const engine::exec::TrainConfig config = cpu_train_config(args, in, world);
  const int64_t tokens = tokens_per_step(in, world);

  if (env) return run_cpu_rank(args, in, config, *env);

  if (args.has("ranks-as-threads")) {
    std::vector<engine::exec::RankRun> runs =
        engine::exec::train_threads(config, progress_hooks(config.steps, tokens));
    traces::Trace merged;
    merged.meta = runs[0].trace.meta;
    merged.meta.clock_alignment = "one process (ranks as threads)";
    for (const engine::exec::RankRun& r : runs) traces::merge_ranks(merged, r.trace);
    std::fputs(finish_run(args, merged, runs[0], tokens, RunReport{}).c_str(), stdout);
    return 0;
  }
  return launch_ranks(argc, argv, world);
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
                              {"cuda-graph", false},
                              {"attention-kernel"},
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
  if (backend == "cpu") return run_cpu(args, argc, argv);
  if (backend != "cuda") throw UsageError("--backend: expected cpu or cuda, got '" + backend + "'");
  // Flags first, then the model and policy when the world is known, in every
  // build: their errors do not depend on a device.
  const CudaRunOptions options = cuda_run_options(args);
  const std::optional<engine::launch::RankEnv> env = engine::launch::detect_rank_env();
  std::optional<PlanInputs> in;
  if (const std::optional<int> world = cuda_world_without_device(args, options, env)) {
    in = load_plan_inputs(args, *world);
    require_attention_kernel_fits(*in, options);
  }
#ifdef SHARDSCOPE_HAVE_CUDA
  return run_cuda(args, argc, argv, options, env, std::move(in));
#else
  throw UsageError("--backend cuda: " + engine::query_cuda().message);
#endif
}

}  // namespace shardscope::cli
