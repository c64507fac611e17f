// Op-level refinements of the cost model for GPUs whose step time is not
// FLOPs / peak (docs/simulator.md, "Op-level model"): the power-limited
// sustained clock, GEMM shape (wave quantization over the SMs, unaligned
// dimensions) and per-op-type fractions of HBM bandwidth for memory-bound
// graph ops, and the host time PyTorch eager spends issuing each op (host
// dispatch). Every default leaves the cost model exactly as without it.
// Hardware JSON key "op_level" (parsed and printed here, strictly: an unknown
// key is an error naming it).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/sdpa.h"

namespace shardscope::sim {

/// A linear op's GEMMs: output tiles of tile_m x tile_n elements spread over
/// sm_count SMs, one tile per SM per wave. A GEMM of T tiles runs
/// ceil(T / sm_count) waves; its wave efficiency is T / (waves x sm_count).
struct GemmShapeModel {
  int64_t sm_count = 0;  ///< 0: no wave quantization
  int64_t tile_m = 128;  ///< output rows per tile, >= 1
  int64_t tile_n = 256;  ///< output columns per tile, >= 1
  /// 16-bit GEMMs with in_features or out_features not a multiple of this
  /// (elements) run cuBLAS's align1 fallback kernels at the fractions below
  /// of peak instead of the efficiency curve. 0 (the default) for a fraction:
  /// not modelled.
  int64_t alignment_elements = 8;
  double unaligned_efficiency = 0;           ///< forward, in [0, 1]
  double unaligned_efficiency_backward = 0;  ///< input- and weight-gradient GEMMs, in [0, 1]

  /// Neither term applies (no SM count, no unaligned fraction).
  bool is_off() const {
    return sm_count == 0 && unaligned_efficiency == 0 && unaligned_efficiency_backward == 0;
  }
  void switch_off() {
    sm_count = 0;
    unaligned_efficiency = 0;
    unaligned_efficiency_backward = 0;
  }
};

struct OpLevelModel {
  /// Sustained tensor/CUDA-core clock under the SKU's power limit over the
  /// clock the datasheet peaks assume: multiplies every peak FLOP/s. (0, 1].
  double sustained_clock_fraction = 1.0;
  GemmShapeModel gemm;
  /// By efficiency key ("layernorm", "gelu.backward"; a backward key absent
  /// falls back to its forward type's): the fraction of HBM bandwidth at
  /// which the op's bytes move, t_memory = bytes / (HBM bw x fraction).
  /// Absent: 1. Each in (0, 1].
  std::map<std::string, double> memory_efficiency;
  /// Below fp32 compute, graph ops also move the bytes of the fp32 tensors
  /// and upcast temporaries the graph records of the implementation
  /// (plan::Precision): fp32 outputs and saved tensors at 4 bytes, non-compute
  /// temporaries written and read once (CostModel::upcast_bytes).
  bool upcast_bytes = false;
  /// Host dispatch: ns the issuing thread spends before it launches a
  /// schedule op (eager PyTorch: the module's Python and its kernel-free view
  /// ops, the dispatcher, cudaLaunchKernel; FSDP2's hooks), on top of
  /// HardwareModel::launch_overhead_ns. The device cannot start an op before
  /// its launch, so a step whose kernels are short becomes host-bound.
  /// Keys: a graph op's efficiency key ("linear" for forward and recompute,
  /// "linear.backward": no fallback to the forward's, autograd's C++ engine
  /// issues backward ops), "default" (forward and recompute graph ops of a
  /// type without an entry), or a schedule op kind ("cast_params"). Absent: 0.
  /// Each in [0, kMaxLatencyNs].
  std::map<std::string, int64_t> host_dispatch_ns;
  /// Added per parameter of the op's unit, by op kind: FSDP2's copy-in casts
  /// and copies each parameter (cast_params on the ag_copy_in stream); any
  /// other op, FSDP1's flat parameter included, counts one. [0, kMaxLatencyNs].
  std::map<std::string, int64_t> host_dispatch_per_param_ns;
  /// Attention by the fused SDPA kernel PyTorch runs (plan::Schedule::
  /// attention_kernels) and head_dim: the fraction of peak (x the sustained
  /// clock) at which the op's FLOPs run, as the plan counts them (causal
  /// 4 B T^2 H D forward, 2.5x that backward, the masked half included).
  /// Keys "<kernel>.hd<head_dim>" and "<kernel>.hd<head_dim>.backward",
  /// kernel flash, cudnn or efficient (attention_efficiency_key); a backward
  /// key does not fall back to the forward's. Absent: "attention"'s
  /// efficiency curve or scalar, as without it. Each in (0, 1].
  std::map<std::string, double> attention_efficiency;
  /// The math SDPA kernel (plan::SdpaKernel::math) costed as what it runs,
  /// instead of as a fused kernel: its batched GEMMs in fp32 (the inputs
  /// upcast below fp32), forward q k^T and p v, backward four, each
  /// 2 B H T^2 D FLOPs at "linear"'s fp32 efficiency; plus the fp32 T x T
  /// passes between them at HBM bandwidth x memory_efficiency_of("attention"
  /// or "attention.backward"): forward 6 (scores written, the mask added in
  /// place, softmax read and written, probabilities read), backward 7 (the
  /// probabilities' gradient written, softmax backward reading two and
  /// writing one, the scores' gradient read twice, the probabilities read
  /// once). Kernels run one after another: the terms add.
  bool math_attention = false;

  bool is_default() const {
    return sustained_clock_fraction == 1.0 && gemm.is_off() && memory_efficiency.empty() &&
           !upcast_bytes && host_dispatch_ns.empty() && host_dispatch_per_param_ns.empty() &&
           attention_efficiency.empty() && !math_attention;
  }
  /// attention_efficiency of (kernel, head_dim, direction); 0 when absent.
  double attention_efficiency_of(plan::SdpaKernel kernel, int64_t head_dim, bool backward) const;
  /// memory_efficiency for `key` ("TYPE" or "TYPE.backward"), else 1.
  double memory_efficiency_of(const std::string& key) const;
  /// Host ns before launching an op of `key` (an efficiency key or op kind
  /// name; `forward_graph_op`: a forward or recompute graph op, which falls
  /// back to "default") whose unit has `params` parameters (1 unless the
  /// per-parameter term applies): host_dispatch_ns[key] (or the default) +
  /// params x host_dispatch_per_param_ns[key].
  int64_t host_dispatch_ns_of(const std::string& key, bool forward_graph_op, int64_t params) const;
};

/// "<kernel>.hd<head_dim>" (+ ".backward"): an attention_efficiency key.
std::string attention_efficiency_key(plan::SdpaKernel kernel, int64_t head_dim, bool backward);

/// tiles / (ceil(tiles / sm_count) x sm_count) for an m x n output; 1 when
/// the model has no SM count or a dimension is not positive.
double gemm_wave_efficiency(const GemmShapeModel& gemm, double m, double n);

/// The unaligned fraction for a 16-bit linear of these features and
/// direction, or 0 when it does not apply (aligned, not 16-bit, not modelled).
double gemm_unaligned_efficiency(const GemmShapeModel& gemm, plan::DType dtype, int64_t in_features,
                                 int64_t out_features, bool backward);

nlohmann::json op_level_to_json(const OpLevelModel& m);
/// Reads `v` (the value of key "op_level") over `*m`: keys given replace
/// the base's (attention_efficiency as a whole: {} clears it),
/// memory_efficiency entries merge. Throws Error naming the key.
void op_level_from_json(const nlohmann::json& v, const std::string& source, OpLevelModel* m);
/// Throws Error naming the first field out of range, with its value.
void validate_op_level(const OpLevelModel& m, const std::string& hardware_name);

}  // namespace shardscope::sim
