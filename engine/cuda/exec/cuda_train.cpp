#include "engine/cuda/exec/cuda_train.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "engine/cuda/check.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/exec/cuda_rank_executor.h"
#include "engine/exec/data.h"
#include "engine/exec/rank_plan.h"
#include "plan/schedule.h"
#include "plan/units.h"

namespace shardscope::engine::cuda {

using exec::ExecError;

int64_t peak_other_device_bytes(const std::vector<profiler::MemoryRecord>& records,
                                const std::vector<CudaBacking::SegmentRecord>& segments) {
  std::set<std::pair<uint64_t, uint64_t>> allocator;  // (base, bytes)
  for (const CudaBacking::SegmentRecord& s : segments) allocator.emplace(s.base, s.bytes);
  std::map<uint64_t, uint64_t> live_other;  // address -> bytes, allocations seen
  int64_t current = 0, peak = 0;
  for (const profiler::MemoryRecord& r : records) {
    if (r.allocation) {
      if (allocator.count({r.address, r.bytes})) continue;
      live_other[r.address] = r.bytes;
      current += static_cast<int64_t>(r.bytes);
      peak = std::max(peak, current);
    } else {
      // Releases of allocator segments and of memory allocated before the
      // recording started are not in live_other.
      const auto it = live_other.find(r.address);
      if (it == live_other.end()) continue;
      current -= static_cast<int64_t>(it->second);
      live_other.erase(it);
    }
  }
  return peak;
}

namespace {

void refuse_unsupported(const CudaTrainConfig& config) {
  if (!config.base.save_dir.empty() || !config.base.load_path.empty())
    throw ExecError(
        "--save/--load: checkpoints are not supported on the CUDA backend yet (use --backend cpu)");
  if (config.cuda_graph)
    throw ExecError("--cuda-graph: not implemented (capturing the step as a CUDA graph)");
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  SS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

// `prebuilt`: this rank's plan, or null to build it once the device is
// known to exist.
CudaRankRun train(const CudaTrainConfig& config, const exec::RankPlan* prebuilt,
                  DeviceCommunicator& comm, const exec::TrainHooks& hooks) {
  CudaRankRun out;
  exec::RankRun& run = out.run;
  run.rank = comm.rank();
  bool aborted = false;
  try {
    // Before touching anything else: is there a device at all?
    const DeviceQuery q = query_devices();
    if (!q.ok || q.device_count == 0) throw ExecError("--backend cuda: " + q.message);
    if (config.device < 0 || config.device >= q.device_count)
      throw ExecError("--backend cuda: device " + std::to_string(config.device) +
                      " does not exist (" + std::to_string(q.device_count) +
                      " CUDA devices: " + q.message + ")");
    refuse_unsupported(config);
    if (!config.base.graph) throw ExecError("train_cuda_rank: config.base.graph is null");
    SS_CUDA_CHECK(cudaSetDevice(config.device));
    out.device_name = device_name(config.device);

    const plan::Graph& graph = *config.base.graph;
    std::optional<exec::RankPlan> built;
    if (!prebuilt)
      built = exec::build_rank_plan(graph, config.base.policy, config.base.world_size, comm.rank());
    const exec::RankPlan& rank_plan = prebuilt ? *prebuilt : *built;
    if (rank_plan.graph != &graph || rank_plan.rank() != comm.rank() ||
        rank_plan.world_size() != config.base.world_size)
      throw ExecError("train_cuda_rank: the plan is not this rank's (graph, rank, world)");
    const plan::UnitPlan& units = rank_plan.units;
    const plan::Schedule& schedule = rank_plan.schedule;
    const auto seed = static_cast<uint64_t>(config.base.policy.seed);
    const exec::DataSource data =
        config.base.data_file.empty()
            ? exec::DataSource(graph, seed)
            : exec::DataSource::from_text_file(graph, seed, config.base.data_file);

    // CUPTI first, so that the executor's own allocations (workspaces, cuBLAS)
    // are recorded too.
    std::unique_ptr<profiler::CuptiRecorder> recorder;
    if (config.profile) {
      profiler::CuptiConfig cupti;
      cupti.external_correlation = true;  // kernels named by the op that launched them
      recorder = profiler::CuptiRecorder::start(cupti);
    }
    CudaExecOptions options;
    options.device = config.device;
    options.recorder = recorder.get();
    options.attention_kernel = config.attention_kernel;
    options.deterministic_attention = config.deterministic_attention;
    CudaRankExecutor exec(graph, config.base.policy, units, schedule, comm, data, options);
    // From here on an error aborts the communicator before exec's destructor
    // runs: that destructor synchronises the device, which would hang on a
    // collective still waiting for a peer that failed too (ncclCommAbort and
    // the emulated abort release such waits).
    try {
      traces::Trace& trace = exec.trace();
      trace.meta.model = config.base.model_name;
      trace.meta.policy_json = plan::policy_to_json(config.base.policy).dump();
      trace.meta.world_size = config.base.world_size;
      trace.meta.hardware = out.device_name;
      trace.meta.tool_versions["communicator"] = communicator_kind_name(comm.kind());
      // Which attention kernel ran (its NVTX ranges name it too:
      // attention_forward_cudnn, attention_backward_cudnn).
      trace.meta.tool_versions["attention_kernel"] =
          std::string(attention_kernel_name(config.attention_kernel)) +
          (config.attention_kernel == AttentionKernel::cudnn && config.deterministic_attention
               ? " (deterministic backward)"
               : "");
      if (config.attention_kernel == AttentionKernel::cudnn)
        trace.meta.tool_versions["cudnn"] = cudnn_version_text();
      exec.init_weights(seed);

      for (int64_t step = 0; step < config.base.steps; ++step) {
        const exec::StepOutcome o = exec.run_step(step);
        const double loss = exec.world_mean(o.loss);  // mean over the global batch
        run.losses.push_back(loss);
        run.step_seconds.push_back(static_cast<double>(o.end_ns - o.start_ns) * 1e-9);
        out.host_syncs_per_step.push_back(exec.host_syncs_last_step());
        if (hooks.on_step && comm.rank() == 0)
          hooks.on_step(exec::StepReport{step, step, loss, run.step_seconds.back(), o.skipped});
      }
      if (hooks.gather_final_params) {
        auto params = exec.gather_full_params();
        if (comm.rank() == 0) run.params = std::move(params);
      }
      run.peak_allocated_bytes = exec.peak_allocated_bytes();
      run.persistent_bytes = exec.persistent_allocated_bytes();
      out.persistent_bytes = exec.persistent_allocated_bytes();
      out.peak_reserved_bytes = exec.peak_reserved_bytes();
      out.executor_device_bytes = exec.own_device_bytes();
      out.other_device_bytes = -1;
      if (recorder) {
        SS_CUDA_CHECK(cudaDeviceSynchronize());
        profiler::Recording rec = recorder->take();
        out.allocator_segments = exec.backing().segment_history();
        out.cupti_memory = std::move(rec.memory);
        rec.memory.clear();
        out.other_device_bytes = peak_other_device_bytes(out.cupti_memory, out.allocator_segments);
        out.cupti_dropped_records = rec.dropped_records;
        profiler::append_recording(rec, exec.trace_mapping(*recorder), trace, trace.ranks[0]);
      }
      // The last step's tokens per expert; after the recording, so that the
      // all-gather's scratch is not counted as the step's other memory.
      run.expert_tokens = exec.gather_expert_tokens();
      traces::sort_events(trace.ranks[0]);
      run.trace = std::move(trace);
    } catch (const std::exception& e) {
      comm.abort(e.what());
      aborted = true;
      throw;
    }
  } catch (const std::exception& e) {
    if (!aborted) comm.abort(e.what());
    throw;
  }
  return out;
}

}  // namespace

CudaRankRun train_cuda_rank(const CudaTrainConfig& config, const exec::RankPlan& rank_plan,
                            DeviceCommunicator& comm, const exec::TrainHooks& hooks) {
  return train(config, &rank_plan, comm, hooks);
}

CudaRankRun train_cuda_rank(const CudaTrainConfig& config, DeviceCommunicator& comm,
                            const exec::TrainHooks& hooks) {
  return train(config, nullptr, comm, hooks);
}

}  // namespace shardscope::engine::cuda
