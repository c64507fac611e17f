// `shardscope run`: real sharded training on the CPU engine (engine/exec) or
// the CUDA engine (engine/cuda/exec). This file reads the flags into an
// engine::run::RunRequest and prints the RunResult (cli/run_output.h); the
// run itself (launching ranks, training, gathering traces to rank 0, the
// result) is engine/run (run.h). Three ways to start ranks:
//  - default: this process is the launcher; it starts --nproc rank processes
//    of itself (engine/launch), each rendezvousing through the TCP store and
//    talking through the shared-memory communicator (CPU) or NCCL (CUDA, one
//    process per GPU); rank 0 gathers the rank traces through the store and
//    the launcher prints rank 0's result;
//  - under torchrun / srun / mpirun (RANK etc. set): this process is one rank;
//    rank 0 prints;
//  - --ranks-as-threads (CPU): every rank is a thread of this process;
//    --emulate-world N --rank R (CUDA): this process is rank R of a modelled
//    world of N on one GPU.
// Exit codes (docs/engine.md, "Exit codes"): 2 for input errors (usage, the
// model, policy, --data, --load, a --save target, no CUDA device or driver);
// 1 for runtime failures (a collective or store timeout, a dead or aborted
// rank, a failed checkpoint save, a non-finite loss): engine::run::
// is_runtime_failure, mapped here; the launcher exits with its failed rank's
// code, 128 + N when a rank was killed by signal N or the launcher itself
// received SIGINT/SIGTERM (130, 143).
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "cli/plan_inputs.h"
#include "cli/run_cuda_options.h"
#include "cli/run_output.h"
#include "engine/device_info.h"
#include "engine/exec/data.h"
#include "engine/launch/launch.h"
#include "engine/run/run.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope run --model M [--policy P] [--set K=V]... [--backend cpu|cuda] [--nproc N]\n"
    "               [--steps S] [--data FILE] [--trace OUT] [--json] [--ranks-as-threads]\n"
    "               [--timeout S]\n"
    "               [--emulate-world N --rank R [--hw H]] [--profile] [--cuda-graph]\n"
    "               [--attention-kernel simt|tensor-core|cudnn [--deterministic-attention]]\n\n"
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
    "                      model.safetensors) and DIR/latest (cpu only); written into a\n"
    "                      staging directory and renamed into place, so a kill during the\n"
    "                      save leaves the previous checkpoint loadable\n"
    "  --load PATH         start from a checkpoint (DIR, DIR/step-N or a .safetensors file), any\n"
    "                      world size or policy (cpu only)\n"
    "  --ranks-as-threads  run the ranks as threads of this process (cpu only)\n"
    "  --timeout S         seconds one wait on a peer may last (rendezvous, attach, a\n"
    "                      collective or barrier) before the run fails naming the missing\n"
    "                      rank; default 60 on cpu, 120 on cuda, or SHARDSCOPE_TIMEOUT.\n"
    "                      Weight initialisation never waits: each rank makes its own shard\n"
    "exit codes: 0 done; 2 input error (flags, model, policy, --data, --load, --save target);\n"
    "  1 runtime failure (timeout, dead rank, save failed, non-finite loss: training stops at\n"
    "  the first NaN/inf loss, step and ranks named); 128+N a rank killed by signal N, or the\n"
    "  launcher interrupted (130 SIGINT, 143 SIGTERM)\n"
    "cuda only:\n"
    "  --emulate-world N   this process is one rank of a world of N on one GPU: real compute\n"
    "  --rank R            and memory, collectives held for the hardware model's time, moving\n"
    "                      no data (losses are not those of an N-rank run; docs/cuda.md)\n"
    "  --hw H              hardware model of the emulated collectives (default h100-sxm)\n"
    "  --profile           record the GPU's activity with CUPTI (kernels, copies, NCCL)\n"
    "  --cuda-graph        capture the step as a CUDA graph\n"
    "  --attention-kernel K  simt (default: fp32 math on the CUDA cores, every dtype),\n"
    "                      tensor-core (WMMA, bf16/f16 param dtype, head_dim a multiple of 16\n"
    "                      up to 128) or cudnn (cuDNN 9 fused flash attention, bf16/f16,\n"
    "                      head_dim a multiple of 8 up to 256, no partial rotary or softcap);\n"
    "                      refused otherwise\n"
    "  --deterministic-attention  with cudnn: cuDNN's deterministic backward\n"
    "Under torchrun, srun or mpirun (RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK set)\n"
    "this process is one rank (on GPU LOCAL_RANK with --backend cuda) and rendezvouses at\n"
    "MASTER_ADDR:MASTER_PORT.";

// --timeout, else SHARDSCOPE_TIMEOUT, else the backend's default: whole
// seconds in [1, 604800] (a week).
std::chrono::milliseconds peer_timeout(const Args& args, int default_seconds) {
  constexpr int64_t kMaxSeconds = 7 * 24 * 3600;
  if (args.has("timeout"))
    return std::chrono::seconds(args.get_int("timeout", default_seconds, 1, kMaxSeconds));
  const char* env = std::getenv("SHARDSCOPE_TIMEOUT");
  if (!env || !*env) return std::chrono::seconds(default_seconds);
  const std::string text = env;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < 1 || v > kMaxSeconds)
    throw UsageError("SHARDSCOPE_TIMEOUT: expected whole seconds in [1, " +
                     std::to_string(kMaxSeconds) + "], got '" + text.substr(0, 40) + "'");
  return std::chrono::seconds(v);
}

// The request of both backends: the plan inputs, the training flags, the
// progress line and how this process takes part (engine/run/run.h).
engine::run::RunRequest make_request(const Args& args, const PlanInputs& in, int world) {
  engine::run::RunRequest req;
  req.world_size = world;
  req.graph = &in.graph;
  req.policy = in.policy;
  req.world = in.world;
  req.model_name = args.require("model");
  req.data_file = args.get("data");
  // Checked here, before any rank starts (each rank would fail alone).
  if (!req.data_file.empty()) engine::exec::DataSource::check_text_file(in.graph, req.data_file);
  req.trace_path = args.get("trace");
  req.on_progress = print_progress;
  return req;
}

// This process's part: a rank of a launched world (env), or the launcher of
// `world` rank processes of this executable with the same arguments.
void set_launch_role(engine::run::RunRequest& req, const Args& args, int argc, char** argv,
                     const std::optional<engine::launch::RankEnv>& env) {
  if (env) {
    req.role = engine::run::Role::rank;
    req.env = env;
    req.handoff_dir = args.get("run-dir");
    return;
  }
  req.role = engine::run::Role::launcher;
  req.rank_args.assign(argv, argv + argc);  // argv[0] is "run"
}

// Runs this process's part and prints the result; a runtime failure escaping
// the engine exits 1 (an input error propagates: exit 2 in main).
int run_and_print(const engine::run::RunRequest& req, bool json) {
  try {
    return print_result(engine::run::run(req), json);
  } catch (const std::exception& e) {
    if (!engine::run::is_runtime_failure(e)) throw;
    std::fprintf(stderr, "shardscope run: error: %s\n", e.what());
    return 1;
  }
}

// The engines' allocators cannot grow a segment in place (CUDA's cuMemMap is
// not implemented, host memory cannot): allocator.expandable_segments is the
// simulator's only (docs/allocator.md), refused here before any rank starts.
void refuse_expandable_segments(const PlanInputs& in) {
  if (in.policy.expandable_segments)
    throw UsageError(
        "policy key allocator.expandable_segments = true: the engines' caching allocators "
        "cannot grow a segment in place (no cuMemMap backing); simulate and sweep model it");
}

int run_cpu(const Args& args, int argc, char** argv) {
  for (const char* flag : {"emulate-world", "rank", "profile", "cuda-graph", "attention-kernel",
                           "deterministic-attention"})
    if (args.has(flag)) throw UsageError(std::string("--") + flag + " needs --backend cuda");
  if (args.has("hw"))
    throw UsageError("--hw: the CPU backend measures; it takes no hardware model");

  const std::optional<engine::launch::RankEnv> env = engine::launch::detect_rank_env();
  const int world = env ? env->world_size : static_cast<int>(args.get_int("nproc", 2, 1, 64));
  PlanInputs in = load_plan_inputs(args, world);
  refuse_expandable_segments(in);
  engine::run::RunRequest req = make_request(args, in, world);
  req.backend = engine::run::Backend::cpu;
  req.timeout = peer_timeout(args, 60);
  req.steps = args.get_int("steps", 5, 1, 1000000);
  req.save_dir = args.get("save");
  req.load_path = args.get("load");
  set_launch_role(req, args, argc, argv, env);
  if (!env && args.has("ranks-as-threads")) req.role = engine::run::Role::threads;
  return run_and_print(req, args.has("json"));
}

// --backend cuda: flags first, then the model and policy when the world is
// known, in every build (their errors do not depend on a device); then the
// devices.
int run_cuda(const Args& args, int argc, char** argv) {
  const CudaRunOptions options = cuda_run_options(args);
  const std::optional<engine::launch::RankEnv> env = engine::launch::detect_rank_env();
  std::optional<PlanInputs> in;
  if (const std::optional<int> world = cuda_world_without_device(args, options, env)) {
    in = load_plan_inputs(args, *world);
    refuse_expandable_segments(*in);
    require_attention_kernel_fits(*in, options);
  }
  const engine::CudaAvailability cuda = engine::query_cuda();
  if (!cuda.built) throw UsageError("--backend cuda: " + cuda.message);
  if (!cuda.usable) throw std::runtime_error("--backend cuda: " + cuda.message);

  if (!env && options.emulate_world == 0) {
    // The launcher: one process per GPU (default: every visible GPU).
    const int world = in ? static_cast<int>(in->world.world_size) : cuda.device_count;
    if (world > cuda.device_count)
      throw UsageError("--nproc " + std::to_string(world) + ": one process per GPU, and " +
                       std::to_string(cuda.device_count) + " are visible (" + cuda.message +
                       "); on one GPU, --emulate-world N --rank R models larger worlds");
    if (!in) in = load_plan_inputs(args, world);
    refuse_expandable_segments(*in);
    require_attention_kernel_fits(*in, options);
  }
  engine::run::RunRequest req = make_request(args, *in, static_cast<int>(in->world.world_size));
  req.backend = engine::run::Backend::cuda;
  req.timeout = peer_timeout(args, 120);
  req.cuda = options;
  if (options.emulate_world > 0) {
    req.role = engine::run::Role::emulated;
    req.steps = args.get_int("steps", 5, 1, 1000000);
  } else {
    set_launch_role(req, args, argc, argv, env);
    // A rank takes a bad --steps as its training error, after the rendezvous,
    // so that the launcher names it (the launcher itself does not read it).
    if (env) {
      try {
        req.steps = args.get_int("steps", 5, 1, 1000000);
      } catch (const UsageError&) {
        req.rank_error = std::current_exception();
      }
    }
  }
  return run_and_print(req, args.has("json"));
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
                              {"deterministic-attention", false},
                              {"trace"},
                              {"json", false},
                              {"save"},
                              {"load"},
                              {"ranks-as-threads", false},
                              {"timeout"},
                              {"run-dir"}}),
            false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  check_output_flag(args, "trace");
  const std::string backend = args.get("backend", "cpu");
  if (backend == "cpu") return run_cpu(args, argc, argv);
  if (backend != "cuda") throw UsageError("--backend: expected cpu or cuda, got '" + backend + "'");
  return run_cuda(args, argc, argv);
}

}  // namespace shardscope::cli
