// Checkpoints of a training run (engine/checkpoint formats):
//   DIR/step-<N>/shard-<q>-of-<n>.bin + index.json   sharded: each rank of the
//       first shard group writes its own shards, no communication; rank 0
//       writes the index from the layout every rank knows;
//   DIR/step-<N>/model.safetensors                    consolidated parameters
//       (Hugging Face names, loadable by safetensors / PyTorch), gathered over
//       the shard group as FULL_STATE_DICT does;
//   DIR/latest                                        "step-<N>", replaced
//       atomically by rank 0 after every rank finished.
// A save writes into DIR/.staging-step-<N> (engine/checkpoint/publish_dir.h):
// each rank writes and fsyncs its files, all ranks meet at a barrier, then rank
// 0 renames the staging directory into place (exchanging it with an earlier
// save of the same step, which is then removed) and rewrites `latest`. A run
// killed at any point of a save leaves the previous checkpoint loadable; the
// next save removes the leftover staging directory. Rank 0 holds
// DIR/.save-lock (flock) during the save: two runs saving into one DIR at once
// is an error.
// Optimizer state ("<param>.exp_avg", ".exp_avg_sq" or ".momentum_buffer")
// lives in the sharded files; metadata carries the step, optimizer steps and
// loss scale. Loading reads each rank's ranges from whichever files hold
// them, so any world size or policy can load any checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/comm/communicator.h"
#include "engine/exec/rank_executor.h"

namespace shardscope::engine::exec {

struct CheckpointState {
  int64_t steps_done = 0;  // training steps (global batches) consumed
};

// The step directory name of a checkpoint after `steps_done` steps: "step-%08lld".
std::string step_dir_name(int64_t steps_done);

// Before training: refuses a save target the save after `steps_done` steps
// would fail on (checkpoint::check_save_root: not a directory, parent missing,
// not writable, save lock held, DIR/step-N not a directory; steps_done < 0:
// not known yet, DIR/step-N not checked). Throws checkpoint::CheckpointError
// "--save: DIR...: ..." (an input error).
void check_save_target(const std::string& dir, int64_t steps_done);

// Collective over the world (barriers through the communicator).
void save_checkpoint(const std::string& dir, RankExecutor& exec, comm::Communicator& comm,
                     const plan::Graph& graph, const plan::Policy& policy,
                     const plan::UnitPlan& units, const CheckpointState& state);

// Loads parameters (and optimizer state and counters when the checkpoint has
// them) into this rank's shards. `path`: DIR (its latest), DIR/step-N, or a
// .safetensors file. Throws checkpoint::CheckpointError / ExecError naming the
// file or tensor.
CheckpointState load_checkpoint(const std::string& path, RankExecutor& exec,
                                const plan::Graph& graph, const plan::Policy& policy,
                                const plan::UnitPlan& units);

namespace testing {
// Fault injection: called by every rank at each point of a save, in order:
// "staging" (rank 0 created it), "shard" (this rank's shard file is written),
// "index", "consolidated" (rank 0's index / model.safetensors), "durable"
// (after the barrier), then rank 0 only: "published" (step directory in
// place), "latest" (rewritten), "done" (replaced directory removed).
// Process-wide; set while no save runs.
using SavePointHook = std::function<void(const char* point, int rank)>;
void set_save_point_hook(SavePointHook hook);
}  // namespace testing

}  // namespace shardscope::engine::exec
