// Training driver of the CPU engine: runs S steps of one rank (its plan, its
// executor, its communicator) and returns what the rank recorded. Ranks run
// as processes (engine/run: launcher + shared-memory communicator) or, for
// tests and the demo, as threads of one process sharing nothing but the
// communicator (train_threads).
#pragma once

#include <chrono>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/exec/rank_plan.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "traces/trace.h"

namespace shardscope::engine::exec {

struct TrainConfig {
  const plan::Graph* graph = nullptr;
  plan::Policy policy;
  int world_size = 1;
  int64_t steps = 1;
  std::string data_file;  // empty: synthetic data
  std::string model_name;
  std::string save_dir;  // non-empty: checkpoint after the last step (checkpointing.h)
  std::string
      load_path;  // non-empty: start from this checkpoint (its step count and data position)
  // Longest wait on a peer (ranks as threads, train_threads): the
  // communicator's timeout.
  std::chrono::milliseconds comm_timeout{60'000};
};

struct StepReport {
  int64_t step = 0;   // global step (data position), counting loaded steps
  int64_t index = 0;  // 0-based step of this run
  double loss = 0;    // mean over the global batch (all-reduced over the world)
  double seconds = 0;
  bool skipped = false;
};
using StepCallback = std::function<void(const StepReport&)>;

struct RankRun {
  int rank = 0;
  std::vector<double> losses;  // global mean loss per step
  std::vector<double> step_seconds;
  int64_t peak_allocated_bytes = 0;
  int64_t persistent_bytes = 0;
  traces::Trace trace;                     // this rank's recording (its own clock)
  std::vector<std::vector<float>> params;  // final full parameters (rank 0 only, when asked)
  // Mixture of experts: [rank][router op, graph order][expert] tokens each
  // expert got in the last step's forward passes (all micro-steps), every
  // rank's, gathered on every rank (RankExecutor::expert_tokens). Empty
  // without routed layers.
  std::vector<std::vector<std::vector<int64_t>>> expert_tokens;
};

struct TrainHooks {
  StepCallback on_step;              // rank 0 only
  bool gather_final_params = false;  // rank 0 receives every parameter in full (tests)
};

// Runs the steps on this rank with its plan (built once by the caller:
// build_rank_plan for config.graph, config.policy, config.world_size and
// comm.rank(); rank_plan.groups are the communicator's). Throws on any error
// (after aborting the communicator so that peers fail fast).
RankRun train_rank(const TrainConfig& config, const RankPlan& rank_plan, comm::Communicator& comm,
                   const TrainHooks& hooks);
// The same, building this rank's plan first.
RankRun train_rank(const TrainConfig& config, comm::Communicator& comm, const TrainHooks& hooks);

// The communicator groups of a run, for callers without a RankPlan: the
// schedule's process groups (identical on every rank), in the schedule's order.
std::vector<comm::Group> comm_groups(const plan::Graph& graph, const plan::Policy& policy,
                                     int world_size);

// All ranks as threads of this process, rank r with plans[r] (build_rank_plan,
// one per rank of config.world_size); returns them by rank.
std::vector<RankRun> train_threads(const TrainConfig& config, const std::vector<RankPlan>& plans,
                                   const TrainHooks& hooks);
// The same, building every rank's plan first (once each).
std::vector<RankRun> train_threads(const TrainConfig& config, const TrainHooks& hooks);

}  // namespace shardscope::engine::exec
