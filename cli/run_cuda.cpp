// The CUDA backend of `shardscope run` (cli/run_cuda.h). Built only with CUDA.
#include "cli/run_cuda.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "cli/emulated_timing.h"
#include "cli/plan_inputs.h"
#include "cli/run_common.h"
#include "engine/cuda/check.h"
#include "engine/cuda/comm/emulated_communicator.h"
#include "engine/cuda/comm/nccl_communicator.h"
#include "engine/cuda/exec/cuda_train.h"
#include "engine/device_info.h"
#include "engine/exec/train.h"
#include "engine/launch/launch.h"

namespace shardscope::cli {

namespace {

namespace cuda = engine::cuda;

// Bounds NCCL's rendezvous through the store and every store wait of a rank.
constexpr std::chrono::milliseconds kCommTimeout{120000};

cuda::CudaTrainConfig train_config(const Args& args, const PlanInputs& in,
                                   const CudaRunOptions& opt, int world, int device) {
  cuda::CudaTrainConfig c;
  c.base.graph = &in.graph;
  c.base.policy = in.policy;
  c.base.world_size = world;
  c.base.steps = args.get_int("steps", 5, 1, 1000000);
  c.base.data_file = args.get("data");
  c.base.model_name = args.require("model");
  c.device = device;
  c.profile = opt.profile;
  c.cuda_graph = opt.cuda_graph;
  c.attention_kernel =
      opt.attention_tensor_core ? cuda::AttentionKernel::tensor_core : cuda::AttentionKernel::simt;
  return c;
}

// What every CUDA run reports besides the metrics.
RunReport cuda_report(const cuda::CudaRankRun& r, const CudaRunOptions& opt,
                      const std::string& collectives) {
  RunReport rep;
  rep.source = traces::Source::engine_cuda;
  rep.hardware = r.device_name;
  rep.extra["device"] = r.device_name;
  rep.extra["collectives"] = collectives;
  rep.extra["profiled"] = opt.profile;
  rep.extra["cuda_graph"] = opt.cuda_graph;
  rep.extra["attention_kernel"] = opt.attention_tensor_core ? "tensor-core" : "simt";
  rep.extra["allocator_peak_reserved_bytes"] = r.peak_reserved_bytes;  // rank 0's allocator
  if (opt.profile) {
    rep.extra["other_device_bytes"] = r.other_device_bytes;
    rep.extra["cupti_dropped_records"] = r.cupti_dropped_records;
  }
  rep.summary_lines = "device " + r.device_name + ", collectives " + collectives +
                      (opt.profile ? ", CUPTI recording" : "") +
                      (opt.cuda_graph ? ", CUDA graph" : "") + ", attention kernel " +
                      (opt.attention_tensor_core ? "tensor-core" : "simt") + "\n";
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

// --emulate-world N --rank R: one process, GPU 0, collectives held for the
// hardware model's time and moving no data.
int run_emulated(const Args& args, const PlanInputs& in, const CudaRunOptions& opt) {
  const int world = opt.emulate_world;
  const cuda::CudaTrainConfig config = train_config(args, in, opt, world, 0);
  SS_CUDA_CHECK(cudaSetDevice(config.device));
  const sim::HardwareModel hw = opt.hw;
  cuda::EmulatedCommunicator comm(
      opt.emulate_rank, world, engine::exec::comm_groups(in.graph, in.policy, world),
      [hw](cuda::CollectiveKind kind, uint64_t bytes, const engine::comm::Group& group) {
        return emulated_collective_ns(hw, from_engine(kind), bytes, group.ranks);
      });
  // Global tokens of the modelled world: every emulated peer trains its own micro-batch.
  const int64_t tokens = tokens_per_step(in, world);
  cuda::CudaRankRun r =
      cuda::train_cuda_rank(config, comm, progress_hooks(config.base.steps, tokens));
  RunReport rep = cuda_report(r, opt, "emulated (" + hw.name + " collective model)");
  rep.extra["emulated"] = {{"world", world}, {"rank", opt.emulate_rank}, {"hw", hw.name}};
  rep.summary_lines += "emulated rank " + std::to_string(opt.emulate_rank) + " of " +
                       std::to_string(world) + ": collectives take " + hw.name +
                       "'s modelled time and move no data (losses are not those of a " +
                       std::to_string(world) + "-rank run)\n";
  traces::Trace trace = std::move(r.run.trace);
  trace.meta.clock_alignment = "one process (emulated peers)";
  std::fputs(finish_run(args, trace, r.run, tokens, rep).c_str(), stdout);
  return 0;
}

// One rank of a launched world on GPU LOCAL_RANK, collectives through NCCL.
int run_nccl_rank(const Args& args, const PlanInputs& in, const CudaRunOptions& opt,
                  const engine::launch::RankEnv& env, int device_count) {
  if (env.local_rank >= device_count)
    throw std::runtime_error("LOCAL_RANK " + std::to_string(env.local_rank) + " (rank " +
                             std::to_string(env.rank) + ", started by " + env.source +
                             ") has no GPU: " + std::to_string(device_count) +
                             " visible on this node; start one process per GPU");
  const int64_t tokens = tokens_per_step(in, env.world_size);
  return run_launched_rank(args, env, [&](engine::launch::Rendezvous& rv) {
    const cuda::CudaTrainConfig config =
        train_config(args, in, opt, env.world_size, env.local_rank);
    SS_CUDA_CHECK(cudaSetDevice(config.device));  // NCCL binds its communicators to it
    cuda::NcclCommunicator comm(env.rank, env.world_size,
                                engine::exec::comm_groups(in.graph, in.policy, env.world_size),
                                *rv.store, kCommTimeout);
    cuda::CudaRankRun r =
        cuda::train_cuda_rank(config, comm, progress_hooks(config.base.steps, tokens));
    RankOutcome out;
    out.report = cuda_report(r, opt, cuda::NcclCommunicator::version());
    out.run = std::move(r.run);
    out.tokens_per_step = tokens;
    return out;
  });
}

}  // namespace

int run_cuda(const Args& args, int argc, char** argv, const CudaRunOptions& opt,
             const std::optional<engine::launch::RankEnv>& env, std::optional<PlanInputs> in) {
  const engine::CudaAvailability cuda = engine::query_cuda();
  if (!cuda.built || !cuda.usable) throw std::runtime_error("--backend cuda: " + cuda.message);
  if (opt.emulate_world > 0) return run_emulated(args, *in, opt);
  if (env) return run_nccl_rank(args, *in, opt, *env, cuda.device_count);

  const int world = in ? static_cast<int>(in->world.world_size) : cuda.device_count;
  if (world > cuda.device_count)
    throw UsageError("--nproc " + std::to_string(world) + ": one process per GPU, and " +
                     std::to_string(cuda.device_count) + " are visible (" + cuda.message +
                     "); on one GPU, --emulate-world N --rank R models larger worlds");
  if (!in) in = load_plan_inputs(args, world);
  require_attention_kernel_fits(*in, opt);
  return launch_ranks(argc, argv, world);
}

}  // namespace shardscope::cli
