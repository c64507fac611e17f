// Parts of `shardscope run` shared by the CPU and the CUDA backends: the
// figures of a step (tokens, progress line), what rank 0 prints (metrics JSON
// or a summary), one rank of a launched world (rendezvous, training, traces
// gathered through the store, rank 0 printing) and the launcher that starts
// this binary once per rank.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/plan_inputs.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"
#include "traces/trace.h"

namespace shardscope::cli {

// Global tokens of one step: batch x seq_len x world x grad_accum_steps
// (ARCHITECTURE.md "Data-parallel semantics"); 1 token per sample for models
// without a vocabulary (mlp).
int64_t tokens_per_step(const PlanInputs& in, int world);

// Rank 0's progress: one line per step on stderr; on a terminal, one line
// redrawn with a bar. `tokens` = global tokens of one step.
engine::exec::TrainHooks progress_hooks(int64_t steps, int64_t tokens);

// What a backend adds to rank 0's report besides the trace's metrics.
struct RunReport {
  traces::Source source = traces::Source::engine_cpu;  // set on the merged trace
  std::string hardware;  // trace metadata "hardware" (device name); "" = as recorded
  nlohmann::json extra = nlohmann::json::object();  // merged into the metrics JSON
  std::string summary_lines;  // printed before the summary (text output), each ending in '\n'
};

// Rank 0's outputs: writes --trace (the merged trace, its source and hardware
// set from `report`), and returns the metrics JSON (--json: metrics + losses,
// tokens_per_s, tokens_per_step and report.extra) or the summary text.
std::string finish_run(const Args& args, traces::Trace& merged, const engine::exec::RankRun& r0,
                       int64_t tokens, const RunReport& report);

// What one rank's training produced.
struct RankOutcome {
  engine::exec::RankRun run;
  RunReport report;
  int64_t tokens_per_step = 0;  // global tokens of one step (tokens_per_step())
};
// Trains this rank once the rendezvous is done (makes the communicator from
// rv.store, runs the steps). Throws on failure.
using RankTrainer = std::function<RankOutcome(engine::launch::Rendezvous& rv)>;

// One rank of a world started by shardscope's launcher, torchrun, srun or
// mpirun: rendezvous, train (an exception is left in the store under
// "error/<rank>" for the launcher, then rethrown), every rank's trace to rank 0
// through the store with its clock offset; rank 0 merges them and prints
// (or writes <--run-dir>/result.txt for the launcher). Returns 0.
int run_launched_rank(const Args& args, const engine::launch::RankEnv& env,
                      const RankTrainer& train);

// The launcher: starts this executable `world` times with the same arguments
// (argv[0] is the subcommand "run") plus --run-dir, each rank with RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT (engine/launch), and prints what
// rank 0 wrote. Returns the exit code (the failed rank's, with its message on
// stderr).
int launch_ranks(int argc, char** argv, int world);

}  // namespace shardscope::cli
