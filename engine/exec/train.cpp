#include "engine/exec/train.h"

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/shm_communicator.h"
#include "engine/cpu/ops.h"
#include "engine/exec/checkpointing.h"
#include "engine/exec/data.h"
#include "engine/exec/numerics_check.h"
#include "engine/exec/rank_executor.h"
#include "plan/schedule.h"
#include "plan/units.h"

namespace shardscope::engine::exec {

RankRun train_rank(const TrainConfig& config, const RankPlan& rank_plan, comm::Communicator& comm,
                   const TrainHooks& hooks) {
  if (rank_plan.graph != config.graph || rank_plan.rank() != comm.rank() ||
      rank_plan.world_size() != config.world_size)
    throw std::invalid_argument("train_rank: the plan is not this rank's (graph, rank, world)");
  const plan::Graph& graph = *config.graph;
  const plan::UnitPlan& units = rank_plan.units;
  const plan::Schedule& schedule = rank_plan.schedule;
  const auto seed = static_cast<uint64_t>(config.policy.seed);
  const DataSource data = config.data_file.empty()
                              ? DataSource(graph, seed)
                              : DataSource::from_text_file(graph, seed, config.data_file);
  cpu::set_blas_threads(1);

  RankRun run;
  run.rank = comm.rank();
  try {
    RankExecutor exec(graph, config.policy, units, schedule, comm, data);
    exec.trace().meta.model = config.model_name;
    exec.trace().meta.policy_json = plan::policy_to_json(config.policy).dump();
    exec.trace().meta.world_size = config.world_size;
    exec.trace().meta.hardware = "cpu";
    exec.init_weights(seed);
    int64_t first = 0;
    if (!config.load_path.empty())
      first = load_checkpoint(config.load_path, exec, graph, config.policy, units).steps_done;
    // Before the first step: a save target the save would fail on.
    if (!config.save_dir.empty()) check_save_target(config.save_dir, first + config.steps);
    for (int64_t step = first; step < first + config.steps; ++step) {
      const StepOutcome out = exec.run_step(step);
      float loss = static_cast<float>(out.loss);
      comm.all_reduce(0, &loss, 1, comm::ReduceOp::avg);  // mean over the global batch
      run.losses.push_back(loss);
      run.step_seconds.push_back(static_cast<double>(out.end_ns - out.start_ns) * 1e-9);
      if (hooks.on_step && comm.rank() == 0)
        hooks.on_step(StepReport{step, step - first, loss, run.step_seconds.back(), out.skipped});
      // Stops every rank alike at the first non-finite loss (numerics_check.h).
      check_step_numbers(StepNumbers{step - first, step, loss, out.loss, out.grad_norm,
                                     out.local_grad_norm_sq, out.skipped, &run.losses},
                         comm);
    }
    if (!config.save_dir.empty()) {
      try {
        save_checkpoint(config.save_dir, exec, comm, graph, config.policy, units,
                        CheckpointState{first + config.steps});
      } catch (const checkpoint::CheckpointError& e) {
        // The target was checked before the first step: what fails now is the
        // save itself (disk full, I/O, another run took the lock meanwhile).
        throw RuntimeFailure(std::string("checkpoint save failed: ") + e.what());
      }
    }
    if (hooks.gather_final_params) {
      auto params = exec.gather_full_params();
      if (comm.rank() == 0) run.params = std::move(params);
    }
    if (!exec.expert_tokens().empty()) {
      // Every rank's counts on every rank (the world group, 0).
      std::vector<int64_t> mine;
      for (const std::vector<int64_t>& c : exec.expert_tokens())
        mine.insert(mine.end(), c.begin(), c.end());
      std::vector<int64_t> all(mine.size() * static_cast<size_t>(config.world_size));
      comm.all_gather(0, mine.data(), all.data(), mine.size() * sizeof(int64_t));
      size_t at = 0;
      run.expert_tokens.resize(static_cast<size_t>(config.world_size));
      for (auto& rank : run.expert_tokens)
        for (const std::vector<int64_t>& c : exec.expert_tokens()) {
          rank.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                            all.begin() + static_cast<std::ptrdiff_t>(at + c.size()));
          at += c.size();
        }
    }
    run.peak_allocated_bytes = exec.peak_allocated_bytes();
    run.persistent_bytes = exec.persistent_allocated_bytes();
    run.trace = std::move(exec.trace());
  } catch (const std::exception& e) {
    comm.abort(e.what());
    throw;
  }
  return run;
}

RankRun train_rank(const TrainConfig& config, comm::Communicator& comm, const TrainHooks& hooks) {
  const RankPlan rank_plan =
      build_rank_plan(*config.graph, config.policy, config.world_size, comm.rank());
  return train_rank(config, rank_plan, comm, hooks);
}

std::vector<comm::Group> comm_groups(const plan::Graph& graph, const plan::Policy& policy,
                                     int world_size) {
  const plan::World world = plan::validate_policy(policy, graph, world_size);
  const plan::UnitPlan units = plan::build_units(graph, policy, world);
  const plan::Schedule s = plan::build_persistent_schedule(graph, policy, units, 0);
  std::vector<comm::Group> groups;
  for (const plan::ProcessGroup& g : s.groups) groups.push_back(comm::Group{g.name, g.ranks});
  return groups;
}

std::vector<RankRun> train_threads(const TrainConfig& config, const std::vector<RankPlan>& plans,
                                   const TrainHooks& hooks) {
  if (plans.size() != static_cast<size_t>(config.world_size))
    throw std::invalid_argument("train_threads: one plan per rank expected");
  comm::ThreadCommOptions comm_options;
  comm_options.timeout = config.comm_timeout;
  auto comms = comm::make_thread_communicators(config.world_size, plans[0].groups, comm_options);
  std::vector<RankRun> runs(static_cast<size_t>(config.world_size));
  std::vector<std::exception_ptr> errors(runs.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < runs.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        runs[r] = train_rank(config, plans[r], *comms[r], hooks);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return runs;
}

std::vector<RankRun> train_threads(const TrainConfig& config, const TrainHooks& hooks) {
  const plan::World world = plan::validate_policy(config.policy, *config.graph, config.world_size);
  std::vector<RankPlan> plans;
  plans.reserve(static_cast<size_t>(config.world_size));
  for (int r = 0; r < config.world_size; ++r)
    plans.push_back(build_rank_plan(*config.graph, config.policy, world, r));
  return train_threads(config, plans, hooks);
}

}  // namespace shardscope::engine::exec
