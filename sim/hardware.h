// Hardware models: the figures the cost model turns FLOPs and bytes into time.
// Presets carry public datasheet numbers (docs/simulator.md lists the
// sources); any field can be overridden from a JSON file whose keys are
// checked strictly (an unknown key is an error naming it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/schedule.h"
#include "plan/sdpa.h"
#include "sim/hardware_fitted.h"
#include "sim/hardware_op_level.h"

namespace shardscope::sim {

/// Errors of the simulator library (bad hardware file, unknown preset, a
/// schedule that cannot be executed). The message names the field.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A fitted collective cost (from `calibrate`): for `kind` over exactly `ranks`
/// ranks spanning one node (multi_node false) or several (true),
///   t = latency_ns + f * S / bus_bytes_per_s * (n-1)/n,  f = 2 for all-reduce else 1
/// replacing the analytical model for that case (nccl-tests' busbw definition).
/// Small messages run another NCCL protocol (LL / LL128 below a size,
/// Simple above): with `small_max_bytes` > 0, a collective of S <=
/// small_max_bytes bytes (the full buffer) uses the small line instead.
struct CollectiveFit {
  plan::OpKind kind = plan::OpKind::all_gather;
  int64_t ranks = 0;
  bool multi_node = false;
  int64_t latency_ns = 0;
  double bus_bytes_per_s = 0;
  int64_t small_max_bytes = 0;  ///< 0: one line for every size
  int64_t small_latency_ns = 0;
  double small_bus_bytes_per_s = 0;
};

/// NCCL's algorithm choice for all-reduce (all-gather and reduce-scatter are
/// always ring, as in NCCL without NVLS/PAT). Tree applies only across nodes.
enum class CollectiveAlgorithm : uint8_t { ring, tree, automatic };
const char* collective_algorithm_name(CollectiveAlgorithm a);

/// One point of an efficiency curve: ops of `flops` FLOPs reach `efficiency`.
struct EfficiencyKnot {
  double flops = 0;
  double efficiency = 0;
};

/// An op without FLOPs (casts, copies, the optimizer, gradient accumulation)
/// on the device: dur = fixed_ns + bytes / (HBM bw x bandwidth_efficiency).
struct MemoryOpFit {
  int64_t fixed_ns = 0;               ///< >= 0
  double bandwidth_efficiency = 1.0;  ///< in (0, 1]
};

/// The largest latency or fixed overhead a hardware model may state (every
/// *_ns field): 1000 s, a million times a real one, so that sums of a few of
/// them cannot overflow int64 ns. Terms that multiply them (a ring's n - 1
/// hops) are bounded by the cost model like transfers (1e6 s per op), and
/// the simulator refuses a step whose clock would pass 2^63 ns.
inline constexpr int64_t kMaxLatencyNs = 1'000'000'000'000;

struct HardwareModel {
  std::string name;  ///< preset name or file it came from
  /// The device family (JSON "device": "cpu" or "sm_<major><minor>"): decides
  /// the attention kernel PyTorch runs (plan/sdpa.h). Presets: h100-sxm and
  /// h200-sxm sm_90, a100-sxm sm_80, cpu-local cpu.
  plan::DeviceFamily device{true, 90};
  /// Dense peak FLOP/s per compute dtype (no structured sparsity).
  double peak_flops_fp32 = 0;
  double peak_flops_bf16 = 0;
  double peak_flops_fp16 = 0;
  double hbm_bytes_per_s = 0;         ///< device memory bandwidth
  int64_t memory_bytes = 0;           ///< device memory capacity
  double nvlink_bus_bytes_per_s = 0;  ///< intra-node bus bandwidth (one direction)
  int64_t nvlink_latency_ns = 0;      ///< latency of one algorithm step (hop) inside a node
  double ib_bytes_per_s = 0;          ///< inter-node bandwidth per GPU (one direction)
  int64_t ib_latency_ns = 0;          ///< latency of one algorithm step across nodes
  int64_t collective_latency_ns = 0;  ///< fixed cost of every collective (launch, handshake)
  CollectiveAlgorithm all_reduce_algorithm = CollectiveAlgorithm::automatic;
  /// Fitted costs that replace the analytical model where they match.
  std::vector<CollectiveFit> collectives;
  double pcie_bytes_per_s = 0;         ///< host <-> device copies (one direction)
  double host_memory_bytes_per_s = 0;  ///< ops on the host stream (offloaded optimizer)
  /// Fraction of peak FLOP/s an op type reaches; key "default" for the rest.
  std::map<std::string, double> efficiency;
  /// Per compute dtype, fractions that replace `efficiency` for ops of that
  /// dtype (what calibrate fits: a bf16 trace says nothing about fp32 ops,
  /// whose kernels differ). JSON "dtype_efficiency": {"bf16": {"linear": 0.6}}.
  std::map<plan::DType, std::map<std::string, double>> dtype_efficiency;
  /// Per compute dtype and op type, efficiency as a function of the op's
  /// FLOPs: piecewise linear in log(FLOPs) between knots (ascending FLOPs,
  /// at least 2), constant above the last; below the first, the first
  /// segment continued, clamped to [e0 x FLOPs / f0, e0] (knot 0 = (f0, e0):
  /// never above e0, never slower than the knot's op). Replaces the scalar entries for
  /// ops of that dtype and type (what calibrate fits when the events span
  /// several sizes). JSON "efficiency_curves": {"bf16": {"linear":
  /// [[2.9e10, 0.62], [6.3e11, 0.13]]}}.
  std::map<plan::DType, std::map<std::string, std::vector<EfficiencyKnot>>> efficiency_curves;
  /// By op kind name (plan::op_kind_name: "grad_cast", "copy_out", ...): the
  /// cost of device ops without FLOPs; absent kinds cost bytes / HBM bw.
  /// JSON "memory_ops": {"grad_cast": {"fixed_ns": 20000,
  /// "bandwidth_efficiency": 0.4}}.
  std::map<std::string, MemoryOpFit> memory_ops;
  int64_t launch_overhead_ns = 0;  ///< host time per launch
  /// Device time between a non-collective device op becoming startable (its
  /// waits done, its stream free) and its start: the stream's own per-op
  /// cost outside any kernel (the CPU engine's thread hand-off, a GPU's
  /// kernel-to-kernel gap). Idle time, not compute. >= 0.
  int64_t op_dispatch_ns = 0;
  /// Launched ops not yet finished on the device beyond which a launch blocks
  /// the host (CUDA's pending-launch queue).
  int64_t launch_queue_depth = 1024;
  /// >= 1: a compute op that starts while a collective runs on the rank takes
  /// this many times longer (SM and memory bandwidth shared with NCCL).
  double contention_factor = 1.0;
  int64_t gpus_per_node = 8;
  /// cuBLAS / cuBLASLt workspace PyTorch allocates through its caching
  /// allocator per (cuBLAS handle, stream), at the first GEMM, and holds
  /// (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize and
  /// setWorkspaceForHandle; cuBLASLt shares the cuBLAS workspace, the
  /// "unified" default): 32 MiB on Hopper (4096 KiB x 8), 4096 KiB x 2 +
  /// 16 KiB x 8 = 8,519,680 B before it. Bytes per block; 0 = none.
  int64_t blas_workspace_bytes = 0;
  /// (handle, stream) pairs that run GEMMs in a step, each holding one
  /// workspace block: 2 under PyTorch (the forward on the main thread's
  /// handle, the backward on the autograd device thread's; one compute
  /// stream). >= 0.
  int64_t blas_workspaces = 0;
  /// NCCL's buffers, outside the caching allocator: channels per
  /// communicator (an estimate: NCCL picks them from the topology) and the
  /// SIMPLE protocol's buffer (NCCL_BUFFSIZE, 4 MiB by default; src/init.cc).
  /// 0 channels = no NCCL (cpu-local).
  int64_t nccl_channels = 0;
  int64_t nccl_buffsize_bytes = 0;
  /// Sustained clock, GEMM shape, memory-bound fractions (sim/hardware_op_level.h).
  OpLevelModel op_level;
  /// What calibrate fitted (sim/hardware_fitted.h); not calibrated for presets.
  FittedCosts fitted;

  /// Throws Error for a dtype without a compute peak (integers, f64).
  double peak_flops(plan::DType dtype) const;
  /// Efficiency keys are op types, or "TYPE.backward" for the backward ops of
  /// a type (efficiency_key): a backward key missing at every level below
  /// falls back to its forward type's, before "default".
  /// efficiency[type], else efficiency["default"], else 1.
  double efficiency_of(const std::string& op_type) const;
  /// dtype_efficiency[dtype][type], else efficiency_of(op_type).
  double efficiency_of(const std::string& op_type, plan::DType dtype) const;
  /// efficiency_curves[dtype][type] at `flops`, else efficiency_of(op_type, dtype).
  double efficiency_of(const std::string& op_type, plan::DType dtype, double flops) const;
  /// The curve, dtype or dtype-free value stored under exactly `key`, or none.
  std::optional<double> exact_efficiency(const std::string& key, plan::DType dtype,
                                         double flops) const;
  /// The fit for (kind, ranks, multi_node), or null.
  const CollectiveFit* collective_fit(plan::OpKind kind, int64_t ranks, bool multi_node) const;
  /// Throws Error naming the first field out of range (the *_ns fields:
  /// [0, kMaxLatencyNs], with the value and the limit).
  void validate() const;
};

/// Op kinds without FLOPs that memory_ops may name (plan::op_kind_name of
/// cast_params, copy_out, reshard_copy, grad_cast, grad_accumulate,
/// grad_norm, grad_scale, inf_check, optimizer).
bool is_memory_op_kind(const std::string& name);
/// A graph op type name (plan::op_type_name: linear, attention, ...).
bool is_graph_op_type(const std::string& name);
/// The efficiency key of a graph op type's forward (and recompute) ops, or
/// of its backward ops: "linear", "linear.backward" (a backward kernel is
/// another kernel: FlashAttention publishes the two throughputs separately,
/// and the CPU engine's backward ops differ from their forward per FLOP).
std::string efficiency_key(const std::string& op_type, bool backward);
/// A graph op type, or one with ".backward".
bool is_efficiency_key(const std::string& name);
/// The op type a graph op is costed as (efficiency, host dispatch): its own;
/// an aten op's kind chooses one (gemm: "linear", attention: "attention",
/// memory: "aten").
const char* cost_op_type(const plan::Op& op);

std::vector<std::string>
hardware_presets();  ///< h100-sxm, h200-sxm, a100-sxm, h100-pcie, cpu-local
bool is_hardware_preset(const std::string& name);
/// Throws Error for an unknown name.
HardwareModel hardware_preset(const std::string& name);

nlohmann::json hardware_to_json(const HardwareModel& hw);
/// Starts from the preset named by "base" (default h100-sxm) and overrides
/// every other key given; an unknown key throws Error naming it.
/// `efficiency`, `dtype_efficiency` and `efficiency_curves` entries are merged
/// into the base's maps (a curve replaces the base's curve of its type).
HardwareModel hardware_from_json(const nlohmann::json& doc, const std::string& source = "json");
/// A preset name or a hardware JSON file path. Throws Error.
HardwareModel load_hardware(const std::string& spec);

}  // namespace shardscope::sim
