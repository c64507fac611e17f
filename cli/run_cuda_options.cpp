#include "cli/run_cuda_options.h"

#include <cstdint>

#include "cli/sim_flags.h"

namespace shardscope::cli {

std::string cuda_checkpoint_refusal() {
  return "--save/--load: checkpoints are not supported on the CUDA backend yet (use --backend "
         "cpu)";
}

std::optional<int> cuda_world_without_device(const Args& args, const CudaRunOptions& options,
                                             const std::optional<engine::launch::RankEnv>& env) {
  if (options.emulate_world > 0 && env && env->world_size > 1)
    throw UsageError("--emulate-world runs one process, but " + env->source +
                     " started a world of " + std::to_string(env->world_size) + " processes");
  if (options.emulate_world > 0) return options.emulate_world;
  if (env) return env->world_size;
  if (args.has("nproc")) return static_cast<int>(args.get_int("nproc", 1, 1, 1024));
  return std::nullopt;
}

CudaRunOptions cuda_run_options(const Args& args) {
  CudaRunOptions o;
  for (const char* flag : {"save", "load"})
    if (args.has(flag)) throw UsageError(cuda_checkpoint_refusal());
  if (args.has("ranks-as-threads"))
    throw UsageError("--ranks-as-threads: the CUDA backend runs one process per GPU");
  const bool emulate = args.has("emulate-world");
  if (args.has("rank") && !emulate)
    throw UsageError(
        "--rank needs --emulate-world N (emulated peers); real ranks take theirs "
        "from the launcher (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK)");
  if (emulate && !args.has("rank"))
    throw UsageError("--emulate-world needs --rank R: the rank this process plays");
  if (emulate && args.has("nproc"))
    throw UsageError("--nproc with --emulate-world: emulated peers run one process on one GPU");
  if (args.has("hw") && !emulate)
    throw UsageError(
        "--hw: on the CUDA backend the hardware is the real one; --hw sets the "
        "modelled collective times of --emulate-world only");
  // An emulated collective is a stream memory wait, which CUPTI does not
  // record: a profiled trace would show none of the modelled communication.
  if (emulate && args.has("profile"))
    throw UsageError(
        "--profile with --emulate-world: emulated collectives are stream waits that CUPTI does "
        "not record, so the trace would have no communication; drop --profile (the executor's "
        "own events time the emulated collectives)");
  o.profile = args.has("profile");
  o.cuda_graph = args.has("cuda-graph");
  const std::string attention = args.get("attention-kernel", "simt");
  if (attention != "simt" && attention != "tensor-core" && attention != "cudnn")
    throw UsageError("--attention-kernel \"" + attention +
                     "\": expected simt (fp32 math, every dtype), tensor-core (bf16/f16 "
                     "mixed precision, head_dim a multiple of 16 up to 128) or cudnn (cuDNN's "
                     "fused flash attention: bf16/f16, head_dim a multiple of 8 up to 256)");
  o.attention_kernel = attention;
  o.deterministic_attention = args.has("deterministic-attention");
  if (o.deterministic_attention && attention != "cudnn")
    throw UsageError(
        "--deterministic-attention selects cuDNN's deterministic backward: it needs "
        "--attention-kernel cudnn (got " +
        attention + ")");
  if (emulate) {
    o.emulate_world = static_cast<int>(args.get_int("emulate-world", 0, 1, 1 << 20));
    const int64_t rank = args.get_int("rank", 0, INT64_MIN, INT64_MAX);
    if (rank < 0 || rank >= o.emulate_world)
      throw UsageError("--rank " + std::to_string(rank) + " is outside [0, " +
                       std::to_string(o.emulate_world) + ") for --emulate-world " +
                       std::to_string(o.emulate_world));
    o.emulate_rank = static_cast<int>(rank);
    o.hw = hardware_flag(args);
  }
  return o;
}

// The tensor-core and cuDNN attention kernels take 16-bit operands only:
// refused before any device is touched (the executor also checks each
// attention op's head_dim, RoPE and strides when it is made).
void require_attention_kernel_fits(const PlanInputs& in, const CudaRunOptions& opt) {
  const plan::DType dt = in.policy.mixed_precision.param_dtype;
  if (opt.attention_kernel != "simt" && dt != plan::DType::bf16 && dt != plan::DType::f16)
    throw UsageError("--attention-kernel " + opt.attention_kernel +
                     " needs mixed_precision.param_dtype bf16 or fp16 (the policy's is fp32); "
                     "fp32 attention runs on --attention-kernel simt");
}

}  // namespace shardscope::cli
