// The CUDA backend of engine/run: one rank of a launched world on GPU
// LOCAL_RANK with NCCL collectives, or rank R of an emulated world of N on
// GPU 0. Part of the CUDA module, libshardscope_cuda.so (engine/cuda_module.h),
// never of the `shardscope` executable: run_cuda_module.cpp calls it through
// the module, run_cuda_unavailable.cpp refuses it in builds without CUDA.
#include <cuda_runtime.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/cuda/check.h"
#include "engine/cuda/comm/emulated_communicator.h"
#include "engine/cuda/comm/nccl_communicator.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/exec/cuda_train.h"
#include "engine/device_info.h"
#include "engine/exec/rank_plan.h"
#include "engine/run/emulated_timing.h"
#include "engine/run/run_internal.h"

namespace shardscope::engine::run::detail {

namespace {

// run's --attention-kernel spelling (validated by the CLI) as the engine's enum.
cuda::AttentionKernel attention_kernel(const std::string& name) {
  if (name == "tensor-core") return cuda::AttentionKernel::tensor_core;
  if (name == "cudnn") return cuda::AttentionKernel::cudnn;
  if (name == "simt") return cuda::AttentionKernel::simt;
  throw std::invalid_argument("unknown attention kernel \"" + name + "\"");
}

cuda::CudaTrainConfig train_config(const RunRequest& request, int device) {
  cuda::CudaTrainConfig c;
  c.base.graph = request.graph;
  c.base.policy = request.policy;
  c.base.world_size = request.world_size;
  c.base.steps = request.steps;
  c.base.data_file = request.data_file;
  c.base.model_name = request.model_name;
  c.device = device;
  c.profile = request.cuda.profile;
  c.cuda_graph = request.cuda.cuda_graph;
  c.attention_kernel = attention_kernel(request.cuda.attention_kernel);
  c.deterministic_attention = request.cuda.deterministic_attention;
  return c;
}

// What every CUDA run reports besides the metrics.
BackendReport cuda_report(const cuda::CudaRankRun& r, const CudaOptions& opt,
                          const std::string& collectives) {
  BackendReport rep;
  rep.source = traces::Source::engine_cuda;
  rep.hardware = r.device_name;
  rep.extra["device"] = r.device_name;
  rep.extra["collectives"] = collectives;
  rep.extra["profiled"] = opt.profile;
  rep.extra["cuda_graph"] = opt.cuda_graph;
  rep.extra["attention_kernel"] = opt.attention_kernel;
  if (opt.attention_kernel == "cudnn")
    rep.extra["deterministic_attention"] = opt.deterministic_attention;
  rep.extra["allocator_peak_reserved_bytes"] = r.peak_reserved_bytes;  // rank 0's allocator
  if (opt.profile) {
    rep.extra["other_device_bytes"] = r.other_device_bytes;
    rep.extra["cupti_dropped_records"] = r.cupti_dropped_records;
  }
  rep.notes = "device " + r.device_name + ", collectives " + collectives +
              (opt.profile ? ", CUPTI recording" : "") + (opt.cuda_graph ? ", CUDA graph" : "") +
              ", attention kernel " + opt.attention_kernel +
              (opt.deterministic_attention ? " (deterministic backward)" : "") + "\n";
  return rep;
}

EmulatedCollective from_engine(cuda::CollectiveKind k) {
  switch (k) {
    case cuda::CollectiveKind::all_gather:
      return EmulatedCollective::all_gather;
    case cuda::CollectiveKind::reduce_scatter:
      return EmulatedCollective::reduce_scatter;
    case cuda::CollectiveKind::all_reduce:
      return EmulatedCollective::all_reduce;
    case cuda::CollectiveKind::broadcast:
      return EmulatedCollective::broadcast;
  }
  throw std::logic_error("unknown collective kind");
}

// Role::emulated: one process, GPU 0, collectives held for the hardware
// model's time and moving no data.
RunResult run_emulated(const RunRequest& request) {
  const CudaOptions& opt = request.cuda;
  const int world = opt.emulate_world;
  const cuda::CudaTrainConfig config = train_config(request, 0);
  SS_CUDA_CHECK(cudaSetDevice(config.device));
  const sim::HardwareModel hw = opt.hw;
  // This rank's plan, built once: the communicator's groups and the executor's schedule.
  const exec::RankPlan rank_plan =
      exec::build_rank_plan(*request.graph, request.policy, request.world, opt.emulate_rank);
  cuda::EmulatedCommunicator comm(
      opt.emulate_rank, world, rank_plan.groups,
      [hw](cuda::CollectiveKind kind, uint64_t bytes, const engine::comm::Group& group) {
        return emulated_collective_ns(hw, from_engine(kind), bytes, group.ranks);
      });
  // Global tokens of the modelled world: every emulated peer trains its own micro-batch.
  const int64_t tokens = plan::tokens_per_step(request.policy, *request.graph, world);
  cuda::CudaRankRun r =
      cuda::train_cuda_rank(config, rank_plan, comm, progress_hooks(request, tokens));
  BackendReport rep = cuda_report(r, opt, "emulated (" + hw.name + " collective model)");
  rep.extra["emulated"] = {{"world", world}, {"rank", opt.emulate_rank}, {"hw", hw.name}};
  rep.notes += "emulated rank " + std::to_string(opt.emulate_rank) + " of " +
               std::to_string(world) + ": collectives take " + hw.name +
               "'s modelled time and move no data (losses are not those of a " +
               std::to_string(world) + "-rank run)\n";
  traces::Trace trace = std::move(r.run.trace);
  trace.meta.clock_alignment = "one process (emulated peers)";
  return make_result(request, trace, r.run, tokens, rep);
}

// Role::rank: one rank of a launched world on GPU LOCAL_RANK, collectives
// through NCCL.
RunResult run_nccl_rank(const RunRequest& request) {
  const launch::RankEnv& env = *request.env;
  const CudaAvailability avail = cuda_devices();
  if (env.local_rank >= avail.device_count)
    throw std::runtime_error("LOCAL_RANK " + std::to_string(env.local_rank) + " (rank " +
                             std::to_string(env.rank) + ", started by " + env.source +
                             ") has no GPU: " + std::to_string(avail.device_count) +
                             " visible on this node; start one process per GPU");
  const int64_t tokens = plan::tokens_per_step(request.policy, *request.graph, env.world_size);
  return run_launched_rank(request, [&](launch::Rendezvous& rv) {
    const cuda::CudaTrainConfig config = train_config(request, env.local_rank);
    SS_CUDA_CHECK(cudaSetDevice(config.device));  // NCCL binds its communicators to it
    // This rank's plan, built once: the communicator's groups and the executor's schedule.
    const exec::RankPlan rank_plan =
        exec::build_rank_plan(*request.graph, request.policy, request.world, env.rank);
    cuda::NcclCommunicator comm(env.rank, env.world_size, rank_plan.groups, *rv.store,
                                request.timeout);
    cuda::CudaRankRun r =
        cuda::train_cuda_rank(config, rank_plan, comm, progress_hooks(request, tokens));
    RankOutcome out;
    out.report = cuda_report(r, request.cuda, cuda::NcclCommunicator::version());
    out.run = std::move(r.run);
    out.tokens_per_step = tokens;
    return out;
  });
}

}  // namespace

CudaAvailability cuda_devices() {
  CudaAvailability out;
  out.built = true;
  const cuda::DeviceQuery q = cuda::query_devices();
  out.usable = q.ok && q.device_count > 0;
  out.device_count = q.device_count;
  out.message = q.message;
  return out;
}

RunResult run_cuda_backend(const RunRequest& request) {
  // No device or driver: an error naming what the CUDA runtime reported,
  // before anything starts.
  const CudaAvailability avail = cuda_devices();
  if (!avail.built || !avail.usable) throw std::runtime_error("--backend cuda: " + avail.message);
  switch (request.role) {
    case Role::emulated:
      return run_emulated(request);
    case Role::rank:
      if (!request.env) throw std::invalid_argument("engine::run: Role::rank needs request.env");
      return run_nccl_rank(request);
    case Role::threads:
    case Role::launcher:
      break;
  }
  throw std::invalid_argument("engine::run: the CUDA backend runs no ranks as threads");
}

}  // namespace shardscope::engine::run::detail
