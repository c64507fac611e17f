// The CPU backend of engine/run: a rank of a launched world talking through
// shared memory, or every rank as a thread of this process.
#include <chrono>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/comm/shm_communicator.h"
#include "engine/exec/rank_plan.h"
#include "engine/run/run_internal.h"
#include "traces/merge.h"

namespace shardscope::engine::run::detail {

namespace {

exec::TrainConfig train_config(const RunRequest& request) {
  exec::TrainConfig config;
  config.graph = request.graph;
  config.policy = request.policy;
  config.world_size = request.world_size;
  config.steps = request.steps;
  config.data_file = request.data_file;
  config.model_name = request.model_name;
  config.save_dir = request.save_dir;
  config.load_path = request.load_path;
  config.comm_timeout = request.timeout;
  return config;
}

// One CPU rank of a launched world, talking through shared memory.
RunResult run_rank(const RunRequest& request) {
  const exec::TrainConfig config = train_config(request);
  const launch::RankEnv& env = *request.env;
  return run_launched_rank(request, [&](launch::Rendezvous&) {
    using namespace std::chrono_literals;
    // This rank's plan, built once: the communicator's groups and the executor's schedule.
    const exec::RankPlan rank_plan =
        exec::build_rank_plan(*request.graph, request.policy, request.world, env.rank);
    engine::comm::ShmOptions opt;
    opt.name = shm_segment_name(env.run_id);
    opt.rank = env.rank;
    opt.world_size = env.world_size;
    opt.groups = rank_plan.groups;
    opt.timeout = request.timeout;
    std::unique_ptr<engine::comm::Communicator> comm = engine::comm::open_shm_communicator(opt);
    RankOutcome out;
    out.tokens_per_step = plan::tokens_per_step(request.policy, *request.graph, env.world_size);
    out.run =
        exec::train_rank(config, rank_plan, *comm, progress_hooks(request, out.tokens_per_step));
    return out;
  });
}

// Every rank as a thread of this process.
RunResult run_threads(const RunRequest& request) {
  const exec::TrainConfig config = train_config(request);
  const int64_t tokens = plan::tokens_per_step(request.policy, *request.graph, request.world_size);
  // Every rank's plan, built once each.
  std::vector<exec::RankPlan> plans;
  plans.reserve(static_cast<size_t>(request.world_size));
  for (int r = 0; r < request.world_size; ++r)
    plans.push_back(exec::build_rank_plan(*request.graph, request.policy, request.world, r));
  std::vector<exec::RankRun> runs;
  try {
    runs = exec::train_threads(config, plans, progress_hooks(request, tokens));
  } catch (const exec::NumericsError& e) {
    return numerics_failure(request, e);  // every rank stopped at the same step
  }
  traces::Trace merged;
  merged.meta = runs[0].trace.meta;
  merged.meta.clock_alignment = "one process (ranks as threads)";
  for (const exec::RankRun& r : runs) traces::merge_ranks(merged, r.trace);
  return make_result(request, merged, runs[0], tokens, BackendReport{});
}

}  // namespace

std::string shm_segment_name(const std::string& run_id) {
  return "/shardscope-" + run_id;
}

RunResult run_cpu(const RunRequest& request) {
  switch (request.role) {
    case Role::rank:
      if (!request.env) throw std::invalid_argument("engine::run: Role::rank needs request.env");
      return run_rank(request);
    case Role::threads:
      return run_threads(request);
    case Role::launcher:
    case Role::emulated:
      break;
  }
  throw std::invalid_argument("engine::run: the CPU backend has no emulated ranks");
}

}  // namespace shardscope::engine::run::detail
