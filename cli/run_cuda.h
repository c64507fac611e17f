// `shardscope run --backend cuda`: the CUDA engine (engine/cuda/exec) behind
// the same launcher, worker and reporting paths as the CPU backend
// (cli/run_common.h). This header is CUDA-free: the flags are validated in
// every build (so that usage errors do not depend on a device); run_cuda()
// exists only in builds with CUDA (SHARDSCOPE_HAVE_CUDA).
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/plan_inputs.h"
#include "engine/launch/launch.h"
#include "sim/hardware.h"

namespace shardscope::cli {

// The CUDA-only flags of `run`, validated.
struct CudaRunOptions {
  bool profile = false;     // --profile: CUPTI recording
  bool cuda_graph = false;  // --cuda-graph: the step captured as a CUDA graph
  // --attention-kernel simt|tensor-core (engine/cuda/ops/ops.h AttentionKernel)
  bool attention_tensor_core = false;
  int emulate_world = 0;  // --emulate-world N (0: real ranks, one process per GPU)
  int emulate_rank = 0;   // --rank R, in [0, N)
  sim::HardwareModel hw;  // --hw (default h100-sxm): collective times of emulated peers
};

// Reads and checks the CUDA flags (UsageError naming the flag): --rank and
// --emulate-world go together, R in [0, N), no --nproc with --emulate-world,
// --hw only with --emulate-world (otherwise the hardware is the real one),
// no --save / --load (the CUDA engine does not checkpoint), no
// --ranks-as-threads (one process per GPU).
CudaRunOptions cuda_run_options(const Args& args);

// --attention-kernel tensor-core takes 16-bit operands only: UsageError
// naming mixed_precision.param_dtype when the policy's is fp32. Every build
// (a usage error does not depend on a device).
void require_attention_kernel_fits(const PlanInputs& in, const CudaRunOptions& options);

// The world size when it is known without asking the devices: --emulate-world
// N, a launcher's WORLD_SIZE (env), or --nproc; nullopt for the default
// (every visible GPU). UsageError for --emulate-world under a launcher that
// started several processes.
std::optional<int> cuda_world_without_device(const Args& args, const CudaRunOptions& options,
                                             const std::optional<engine::launch::RankEnv>& env);

// The refusal of --save / --load on the CUDA backend: the words of the
// driver's own refusal (engine/cuda/exec/cuda_train.cpp), said before any
// device is touched.
std::string cuda_checkpoint_refusal();

#ifdef SHARDSCOPE_HAVE_CUDA
// Runs the CUDA backend: checks the devices before starting anything (no
// device or driver: an error naming what the CUDA runtime reported), then
//  - --emulate-world N --rank R: this process is rank R of N on GPU 0;
//  - under torchrun / srun / mpirun (or shardscope's launcher): this process
//    is one rank on GPU LOCAL_RANK, collectives through NCCL;
//  - otherwise: launches --nproc ranks (default: every visible GPU).
// argv[0] is "run" (relaunched as is by the launcher). `env`: the launcher's
// variables (detect_rank_env); `in`: the plan inputs when the world was known
// before the device check (cuda_world_without_device), else loaded here.
int run_cuda(const Args& args, int argc, char** argv, const CudaRunOptions& options,
             const std::optional<engine::launch::RankEnv>& env, std::optional<PlanInputs> in);
#endif

}  // namespace shardscope::cli
