// `shardscope run` as a library call: a typed RunRequest in, a typed
// RunResult out. The CLI (cli/cmd_run.cpp) parses the flags into a request
// and prints the result; everything in between is here:
//  - Role::launcher: start world_size rank processes of this executable
//    (engine/launch), wait for them, and return rank 0's result;
//  - Role::rank: one rank of a world started by the launcher, torchrun, srun
//    or mpirun: rendezvous through the TCP store, build this rank's plan once
//    (exec::RankPlan), train (shared-memory communicator on the CPU, NCCL on
//    CUDA), send the rank's trace and clock offset to rank 0 through the
//    store; rank 0 merges them and makes the result;
//  - Role::threads (CPU): every rank a thread of this process;
//  - Role::emulated (CUDA): this process is rank R of a modelled world of N on
//    one GPU (engine/run/emulated_timing.h).
//
// The hand-off from rank 0 to the launcher is a file: the launcher process
// serves the TCP store only while its ranks run (engine/launch launch() keeps
// no values once they are gone), and rank 0's result has to outlive rank 0.
// The launcher makes a private directory (mkdtemp), passes it to the ranks
// as `--run-dir DIR` after rank_args, rank 0 writes DIR/result.json (the
// RunResult, to_json below), the launcher reads it back and removes both.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/exec/exec_error.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "sim/hardware.h"
#include "traces/trace.h"

namespace shardscope::engine::run {

enum class Backend : uint8_t { cpu, cuda };

// How this process takes part in the run (see the top of this file).
enum class Role : uint8_t { launcher, rank, threads, emulated };

// The CUDA backend's options (`run --backend cuda`).
struct CudaOptions {
  bool profile = false;     // CUPTI recording
  bool cuda_graph = false;  // the step captured as a CUDA graph
  // engine/cuda/ops/ops.h AttentionKernel, as run's --attention-kernel spells
  // it: "simt", "tensor-core" or "cudnn"
  std::string attention_kernel = "simt";
  bool deterministic_attention = false;  // cudnn only: cuDNN's deterministic backward
  int emulate_world = 0;                 // Role::emulated: N (0: real ranks, one process per GPU)
  int emulate_rank = 0;                  // Role::emulated: R, in [0, N)
  sim::HardwareModel hw;                 // Role::emulated: collective times of the emulated peers
};

// Rank 0's progress after each step.
struct StepProgress {
  exec::StepReport step;
  int64_t steps = 0;            // steps of this run
  int64_t tokens_per_step = 0;  // global tokens of one step (plan::tokens_per_step)
};
using ProgressCallback = std::function<void(const StepProgress&)>;

struct RunRequest {
  Backend backend = Backend::cpu;
  Role role = Role::launcher;
  int world_size = 1;
  // The model and the policy, validated for world_size (plan::validate_policy's
  // world). Not needed by Role::launcher: its ranks load their own.
  const plan::Graph* graph = nullptr;
  plan::Policy policy;
  plan::World world;
  std::string model_name;
  int64_t steps = 5;
  std::string data_file;   // empty: seeded synthetic tokens
  std::string save_dir;    // CPU: checkpoint after the last step
  std::string load_path;   // CPU: start from a checkpoint
  std::string trace_path;  // non-empty: the merged trace of every rank is written here
  // Longest wait on a peer (the rendezvous, the shared-memory attach, one
  // collective or barrier; NCCL's watchdog on cuda) before the run fails
  // naming the missing rank. Weight initialisation is local (each rank
  // generates its own shard) and never waits on a peer.
  std::chrono::milliseconds timeout{60'000};
  CudaOptions cuda;
  ProgressCallback on_progress;  // rank 0 (or the one process) only; may be empty

  // Role::rank: this process's rank (engine/launch detect_rank_env).
  std::optional<launch::RankEnv> env;
  // Role::rank: an error of the caller's (a flag it reads late) that this
  // rank raises as its training error, after the rendezvous, so that the
  // launcher names it as any rank's error; null: none.
  std::exception_ptr rank_error;
  // Role::rank under shardscope's launcher: the directory rank 0 leaves its
  // result in (`--run-dir`); empty otherwise (rank 0 returns it).
  std::string handoff_dir;
  // Role::launcher: the command line of one rank, without the executable
  // (this process's /proc/self/exe): the subcommand and its arguments. The
  // launcher adds `--run-dir DIR`.
  std::vector<std::string> rank_args;
};

struct RunResult {
  // Launcher: a rank failed; its exit code (non-zero) and message. Nothing
  // else is set.
  int exit_code = 0;
  std::string error;

  // False when another process reports the run: ranks other than 0, and
  // rank 0 under shardscope's launcher (the launcher returns its result).
  bool has_report = false;

  // The metrics JSON of `run --json`: the merged trace's metrics
  // (traces::metrics_to_json, source engine-cpu / engine-cuda), "losses",
  // "tokens_per_s" (global tokens per second, median step after the first),
  // "tokens_per_step" and the backend's own keys (CUDA: "device",
  // "collectives", ...).
  nlohmann::json metrics = nlohmann::json::object();
  std::vector<double> losses;        // global mean loss per step
  int64_t tokens_per_step = 0;       // global tokens of one step
  double tokens_per_s = 0;           // as in metrics
  int64_t persistent_bytes = 0;      // rank 0's allocated bytes before the first step
  int64_t peak_allocated_bytes = 0;  // rank 0's peak
  // What the backend says about the run besides the metrics, one line each
  // ending in '\n' (CUDA: device, collectives, kernels; emulated peers).
  std::string notes;

  // A run stopped by a non-finite loss or gradient norm (exit_code 1): the
  // document `run --json` prints instead of the metrics (numerics_failure_json;
  // docs/engine.md, "Numerics"); null otherwise. has_report says whether this
  // process prints it.
  nlohmann::json failure;
};

// Runs this process's part of the run. Throws on errors of this process
// (a rank's error is also left in the store for the launcher); a launcher
// returns a failed rank's exit code and message in the result instead, and
// a run stopped by a non-finite loss (CPU) returns numerics_failure's result
// in every role (rank 0's report handed to the launcher).
// Backend::cuda in a build without CUDA throws std::runtime_error.
RunResult run(const RunRequest& request);

// The result of a run stopped by a non-finite value on every rank: exit_code
// 1, the error, `failure` = {"source", "world_size", "error": {"kind":
// "numerics", "message", "quantity", "value" ("nan" | "inf" | "-inf"),
// "step", "global_step", "ranks"}, "losses" (the finite losses of the steps
// before), "tokens_per_step"}: no number is null.
RunResult numerics_failure(const RunRequest& request, const exec::NumericsError& error);

// Whether an error escaping run() is a runtime failure (`shardscope run`
// exits 1: a collective or store timeout, a dead or aborted peer, a failed
// checkpoint save, a non-finite loss) rather than an input error (exit 2):
// comm::CommError, launch::LaunchError, exec::RuntimeFailure.
bool is_runtime_failure(const std::exception& error);

// The result as rank 0 hands it to the launcher, and back.
nlohmann::json to_json(const RunResult& result);
RunResult result_from_json(const nlohmann::json& j);

}  // namespace shardscope::engine::run
