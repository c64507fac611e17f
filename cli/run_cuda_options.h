// The flags of `shardscope run --backend cuda`, validated in every build (so
// that usage errors do not depend on a device) into engine/run's
// CudaOptions. The CUDA backend itself is engine/run (run_cuda.cpp).
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/plan_inputs.h"
#include "engine/launch/launch.h"
#include "engine/run/run.h"

namespace shardscope::cli {

using CudaRunOptions = engine::run::CudaOptions;

// Reads and checks the CUDA flags (UsageError naming the flag): --rank and
// --emulate-world go together, R in [0, N), no --nproc with --emulate-world,
// --hw only with --emulate-world (otherwise the hardware is the real one),
// no --save / --load (the CUDA engine does not checkpoint), no
// --ranks-as-threads (one process per GPU).
CudaRunOptions cuda_run_options(const Args& args);

// --attention-kernel tensor-core / cudnn take 16-bit operands only: UsageError
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

}  // namespace shardscope::cli
