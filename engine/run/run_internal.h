// Parts of engine/run shared by the CPU backend (run_cpu.cpp), the CUDA
// backend (run_cuda.cpp, in the CUDA module only) and the dispatcher (run.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/device_info.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"
#include "engine/run/run.h"
#include "traces/trace.h"

namespace shardscope::engine::run::detail {

// The POSIX shm name of a CPU run's communicator segment: "/shardscope-<run id>".
std::string shm_segment_name(const std::string& run_id);

// The training hooks of a request: rank 0's progress (on_progress), with
// `tokens` global tokens per step.
exec::TrainHooks progress_hooks(const RunRequest& request, int64_t tokens);

// What a backend adds to the result besides the trace's metrics.
struct BackendReport {
  traces::Source source = traces::Source::engine_cpu;  // set on the merged trace
  std::string hardware;  // trace metadata "hardware" (device name); "" = as recorded
  nlohmann::json extra = nlohmann::json::object();  // merged into the metrics JSON
  std::string notes;                                // RunResult::notes
};

// Rank 0's result from the merged trace: writes request.trace_path (the
// merged trace, its source and hardware set from `report`), computes the
// metrics and the run's figures (has_report set).
RunResult make_result(const RunRequest& request, traces::Trace& merged, const exec::RankRun& r0,
                      int64_t tokens, const BackendReport& report);

// Mixture of experts: the "moe_routing" object of the metrics JSON (null
// without routed layers): the routing mode, the stated token_balance, and per
// router op the tokens per expert of one rank's last step it assumes and
// what every rank measured (docs/models.md, "Mixture of experts").
nlohmann::json moe_routing_json(const plan::Graph& graph, const plan::Policy& policy,
                                const exec::RankRun& r0);

// What one rank's training produced.
struct RankOutcome {
  exec::RankRun run;
  BackendReport report;
  int64_t tokens_per_step = 0;
};
// Trains this rank once the rendezvous is done (makes the communicator from
// rv.store, runs the steps). Throws on failure.
using RankTrainer = std::function<RankOutcome(launch::Rendezvous& rv)>;

// Role::rank: rendezvous, train (an exception is left in the store under
// "error/<rank>" for the launcher, then rethrown), every rank's trace to
// rank 0 through the store with its clock offset; rank 0 merges them and
// makes the result (handed off to the launcher when request.handoff_dir is
// set). Every rank waits for the others before returning.
RunResult run_launched_rank(const RunRequest& request, const RankTrainer& train);

RunResult run_cpu(const RunRequest& request);
// The CUDA backend as the dispatcher calls it: through the CUDA module
// (run_cuda_module.cpp, engine/cuda_module.h); throws in builds without CUDA
// (run_cuda_unavailable.cpp) and CudaModuleError when the module cannot load.
RunResult run_cuda(const RunRequest& request);

// Inside the CUDA module (run_cuda.cpp, libshardscope_cuda.so) only: the
// backend itself and the devices the CUDA runtime sees.
RunResult run_cuda_backend(const RunRequest& request);
CudaAvailability cuda_devices();

}  // namespace shardscope::engine::run::detail
