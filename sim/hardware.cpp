#include "sim/hardware.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

#include "plan/error.h"
#include "plan/json_input.h"

namespace shardscope::sim {

namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;
constexpr int64_t kGiB = int64_t{1} << 30;

std::map<std::string, double> gpu_efficiency() {
  // Matmul-heavy ops reach a fraction of the tensor-core peak; elementwise and
  // normalisation ops are bandwidth-bound and priced by the roofline's bytes.
  // The mixture-of-experts ops are too: the router's softmax over E experts,
  // the gather (dispatch) and weighted scatter-add (combine) of token rows and
  // the shared expert's sigmoid gate do a few FLOPs per element moved; the
  // experts' matmuls are `linear` ops, priced by their own FLOPs (and, with a
  // GEMM curve, at the efficiency of their size: a token balance that leaves
  // an expert few rows makes its GEMMs small and slow).
  return {{"default", 0.6},     {"linear", 0.7},        {"attention", 0.5},  {"embedding", 1.0},
          {"layernorm", 1.0},   {"rmsnorm", 1.0},       {"gelu", 1.0},       {"swiglu", 1.0},
          {"residual", 1.0},    {"cross_entropy", 1.0}, {"rope", 1.0},       {"relu", 1.0},
          {"scale", 1.0},       {"softcap", 1.0},       {"moe_router", 1.0}, {"moe_dispatch", 1.0},
          {"moe_combine", 1.0}, {"sigmoid_gate", 1.0}};
}

// Published op-level measurements (docs/simulator.md, "Hardware presets",
// lists each source). FLOPs as the plan counts them: a GEMM 2MNK, causal
// attention 4 B T^2 H D forward and 2.5x that backward, the masked half
// included (FlashAttention's benchmarks count causal at half, so their
// causal TFLOP/s are doubled here).

// H100 SXM, bf16/fp16: XLA's measured sm_90 GEMM table (square M = N = K of
// 256 ... 4096, bf16xbf16->bf16), TFLOP/s over 989.
std::vector<EfficiencyKnot> hopper_gemm() {
  return {{3.3554432e7, 6.45 / 989},
          {2.68435456e8, 40.72 / 989},
          {2.147483648e9, 236.30 / 989},
          {1.7179869184e10, 631.98 / 989},
          {1.37438953472e11, 783.33 / 989}};
}
// H100 SXM, FlashAttention-2 forward, head dim 128, causal, hidden 2048,
// batch 16k / T for T = 512 ... 16k (the FA3 paper's figure): 191, 260,
// 298, 319, 333, 335 TFLOP/s; FLOPs 4 (16384 / T) T^2 2048.
std::vector<EfficiencyKnot> hopper_attention_forward() {
  const double tflops[] = {191, 260, 298, 319, 333, 335};
  std::vector<EfficiencyKnot> k;
  for (int i = 0; i < 6; ++i) {
    const double t = 512.0 * (1 << i);
    k.push_back({4 * (16384 / t) * t * t * 2048, 2 * tflops[i] / 989});
  }
  return k;
}
// Its backward, derived from the forward above and FlashAttention-2's
// published forward+backward throughput on the same runs (README figure:
// 163, 221, 265, 294, 308, 328 TFLOP/s): backward = 2.5 / (3.5 / fwd_bwd -
// 1 / fwd), at 2.5x the forward FLOPs.
std::vector<EfficiencyKnot> hopper_attention_backward() {
  const double fwd[] = {191, 260, 298, 319, 333, 335};
  const double both[] = {163, 221, 265, 294, 308, 328};
  std::vector<EfficiencyKnot> k;
  for (int i = 0; i < 6; ++i) {
    const double t = 512.0 * (1 << i);
    const double bwd = 2.5 / (3.5 / both[i] - 1 / fwd[i]);
    k.push_back({2.5 * 4 * (16384 / t) * t * t * 2048, 2 * bwd / 989});
  }
  return k;
}
// A100 SXM 80GB, fp16 (bf16 has the same tensor-core peak): Azure's
// cuBLASLt GEMMs, square 1024 ... 16384, TFLOP/s over 312.
std::vector<EfficiencyKnot> ampere_gemm() {
  return {{2.147483648e9, 119.4 / 312},
          {1.7179869184e10, 221.8 / 312},
          {1.37438953472e11, 228.0 / 312},
          {1.099511627776e12, 253.7 / 312},
          {8.796093022208e12, 256.5 / 312}};
}

// nccl-tests all_reduce over 8 GPUs of one node (Azure's results, NVLS on
// H100/H200, ring on A100): t = latency + 2 S (n-1)/n / busbw fitted to the
// rows from 256 KiB to 8 GiB (relative least squares, as calibrate does).
// Two lines (NCCL's protocol changes with size), split where the rms
// relative residual is least: at 16 MiB on all three tables.
CollectiveFit all_reduce_8(int64_t small_latency_ns, double small_bus_bytes_per_s,
                           int64_t latency_ns, double bus_bytes_per_s) {
  CollectiveFit f;
  f.kind = plan::OpKind::all_reduce;
  f.ranks = 8;
  f.multi_node = false;
  f.latency_ns = latency_ns;
  f.bus_bytes_per_s = bus_bytes_per_s;
  f.small_max_bytes = int64_t{16} << 20;
  f.small_latency_ns = small_latency_ns;
  f.small_bus_bytes_per_s = small_bus_bytes_per_s;
  return f;
}

// GH100 op-level figures (docs/simulator.md, "Op-level model"), measured on
// the H200 (tests/recorded/h200/profile-torch-eager-b48, PyTorch 2.11 under
// CUPTI): h100-sxm and h200-sxm share them (same SMs and clocks); the
// memory fractions multiply each preset's own HBM bandwidth.
OpLevelModel hopper_op_level(int64_t sm_count) {
  OpLevelModel m;
  m.gemm.sm_count = sm_count;
  m.gemm.tile_m = 256;  // nvjet_sm90_tst_256x128 / 192x192: cuBLAS's usual Hopper tiles
  m.gemm.tile_n = 128;
  m.gemm.alignment_elements = 8;  // 16 bytes of bf16: cuBLAS's TMA / wgmma alignment
  // lm_head of GPT-2 (vocab 50257, odd): cutlass_75 ..._align1 kernels; forward
  // 37.74 ms for 2 x 49152 x 768 x 50257 FLOPs, backward 51.71 ms for twice that.
  m.gemm.unaligned_efficiency = 0.1016;
  m.gemm.unaligned_efficiency_backward = 0.1484;
  // Bytes each kernel moves / its time / 4.8 TB/s, B = 48, T = 1024.
  m.memory_efficiency = {{"gelu", 0.73},
                         {"gelu.backward", 0.83},
                         {"layernorm", 0.45},
                         {"layernorm.backward", 0.29},
                         {"residual", 0.94},
                         {"cross_entropy", 0.47},
                         {"cross_entropy.backward", 0.62}};
  // The fp32 logits of the loss (logits.float(), 4 bytes a logit) and
  // LayerNorm's fp32 statistics cost their bytes: the kernels run in fp32
  // (cunn_SoftMaxForward<4, float, ...>).
  m.upcast_bytes = true;
  return m;
}

HardwareModel h100() {
  HardwareModel h;
  h.name = "h100-sxm";
  h.peak_flops_fp32 = 67 * kTFLOPS;
  h.peak_flops_bf16 = 989 * kTFLOPS;
  h.peak_flops_fp16 = 989 * kTFLOPS;
  h.hbm_bytes_per_s = 3350 * kGB;
  h.memory_bytes = 80 * kGiB;
  // Ring all-gather / reduce-scatter bus bandwidth on 8 GPUs: ~370 GB/s of
  // the 450 GB/s line rate (NCCL maintainer, nccl-tests issue #212).
  h.nvlink_bus_bytes_per_s = 370 * kGB;
  h.nvlink_latency_ns = 1000;
  h.ib_bytes_per_s = 50 * kGB;  // 400 Gb/s ConnectX-7 per GPU
  h.ib_latency_ns = 3000;
  h.collective_latency_ns = 5000;
  h.pcie_bytes_per_s = 64 * kGB;  // PCIe Gen5 x16
  h.host_memory_bytes_per_s = 100 * kGB;
  h.efficiency = gpu_efficiency();
  for (plan::DType d : {plan::DType::bf16, plan::DType::f16}) {
    h.efficiency_curves[d]["linear"] = hopper_gemm();
    h.efficiency_curves[d]["attention"] = hopper_attention_forward();
    h.efficiency_curves[d]["attention.backward"] = hopper_attention_backward();
  }
  h.collectives = {all_reduce_8(37300, 336.9 * kGB, 76000, 470.1 * kGB)};
  h.launch_overhead_ns = 0;
  // Compute overlapped by NCCL collectives: 18.9% slower on average (GPT and
  // Llama layers on 4 x H100 / A100; arXiv 2507.03114).
  h.contention_factor = 1.189;
  h.gpus_per_node = 8;
  h.blas_workspace_bytes = 4096 * 8 * 1024;  // sm90 default (CublasHandlePool.cpp)
  h.blas_workspaces = 2;
  h.nccl_channels = 16;
  h.nccl_buffsize_bytes = 4 << 20;  // NCCL_BUFFSIZE default (src/init.cc DEFAULT_BUFFSIZE)
  h.op_level = hopper_op_level(132);
  return h;
}

// H100 PCIe (NVIDIA product brief PB-11133-001): 114 SMs, 80 GB HBM2e at
// 2.0 TB/s, 350 W; dense peaks 756 (bf16/fp16) and 51 (fp32) TFLOP/s; NVLink
// bridge 600 GB/s between pairs, PCIe Gen5 x16. The op-level figures are the
// H200's at 114 SMs; no published sustained clock under 350 W: fraction 1.
HardwareModel h100_pcie() {
  HardwareModel h = h100();
  h.name = "h100-pcie";
  h.peak_flops_fp32 = 51 * kTFLOPS;
  h.peak_flops_bf16 = 756 * kTFLOPS;
  h.peak_flops_fp16 = 756 * kTFLOPS;
  h.hbm_bytes_per_s = 2000 * kGB;
  h.memory_bytes = 80 * kGiB;
  h.op_level = hopper_op_level(114);
  return h;
}

HardwareModel h200() {
  HardwareModel h = h100();
  h.name = "h200-sxm";
  h.hbm_bytes_per_s = 4800 * kGB;
  h.memory_bytes = 141 * int64_t{1000000000};
  // 8 x H200: all-gather 361.4, reduce-scatter 362.9 GB/s busbw at 16 GiB
  // (stas00/ml-engineering, network/README.md).
  h.nvlink_bus_bytes_per_s = 362 * kGB;
  h.collectives = {all_reduce_8(29300, 306.0 * kGB, 71900, 473.2 * kGB)};
  return h;
}

HardwareModel a100() {
  HardwareModel h = h100();
  h.name = "a100-sxm";
  h.device = plan::DeviceFamily{true, 80};
  h.peak_flops_fp32 = 19.5 * kTFLOPS;
  h.peak_flops_bf16 = 312 * kTFLOPS;
  h.peak_flops_fp16 = 312 * kTFLOPS;
  h.hbm_bytes_per_s = 2039 * kGB;
  h.memory_bytes = 80 * kGiB;
  // Ring all-reduce busbw on 8 x A100 at 4-8 GiB: 231.6 (Azure), 232.5
  // (nccl-tests issue #175) GB/s; a ring all-gather / reduce-scatter moves
  // the same bytes per link.
  h.nvlink_bus_bytes_per_s = 231 * kGB;
  h.ib_bytes_per_s = 50 * kGB;    // 400 Gb/s per GPU (the cluster; DGX A100 ships 200)
  h.pcie_bytes_per_s = 32 * kGB;  // PCIe Gen4 x16
  // FlashAttention's A100 forward and backward are published only combined:
  // attention keeps the shared 0.5.
  h.efficiency_curves.clear();
  for (plan::DType d : {plan::DType::bf16, plan::DType::f16})
    h.efficiency_curves[d]["linear"] = ampere_gemm();
  h.collectives = {all_reduce_8(39500, 123.9 * kGB, 198600, 230.7 * kGB)};
  // Before Hopper: ":4096:2:16:8" (CublasHandlePool.cpp, parseChosenWorkspaceSize).
  h.blas_workspace_bytes = 4096 * 1024 * 2 + 16 * 1024 * 8;
  // A100 keeps the model it had: the op-level figures are GH100 measurements.
  h.contention_factor = 1.1;
  h.op_level = OpLevelModel{};
  return h;
}

HardwareModel cpu_local() {
  HardwareModel h;
  h.name = "cpu-local";
  h.device = plan::DeviceFamily{};
  h.peak_flops_fp32 = 1 * kTFLOPS;
  h.peak_flops_bf16 = 0.5 * kTFLOPS;
  h.peak_flops_fp16 = 0.5 * kTFLOPS;
  h.hbm_bytes_per_s = 50 * kGB;
  h.memory_bytes = 64 * kGiB;
  h.nvlink_bus_bytes_per_s = 10 * kGB;  // shared-memory transport between processes
  h.nvlink_latency_ns = 5000;
  h.ib_bytes_per_s = 1.25 * kGB;  // 10 Gb/s Ethernet
  h.ib_latency_ns = 50000;
  h.collective_latency_ns = 20000;
  h.pcie_bytes_per_s = 50 * kGB;  // host and device are the same memory
  h.host_memory_bytes_per_s = 50 * kGB;
  h.efficiency = {{"default", 0.5}};
  h.launch_overhead_ns = 0;
  h.contention_factor = 1.0;
  h.gpus_per_node = 8;
  return h;
}

template <typename T>
void read_field(const nlohmann::json& v, const std::string& key, const std::string& source,
                T* out) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Integers may be written as JSON integers or as integral numbers such as
    // 80e9; anything else (a fraction, out of range) is an error, never a
    // silent (undefined) conversion.
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      throw Error(source + ": hardware key '" + key + "' is out of range");
    if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          x > static_cast<int64_t>(std::numeric_limits<T>::max()))
        throw Error(source + ": hardware key '" + key + "' is out of range");
      *out = static_cast<T>(x);
      return;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // [min, max] of T as doubles; 2^63 itself is out of range for int64.
      const double lo = static_cast<double>(std::numeric_limits<T>::min());
      const double hi = -lo;
      if (!std::isfinite(d) || d != std::floor(d) || d < lo || d >= hi)
        throw Error(source + ": hardware key '" + key + "' must be an integer in range, got " +
                    v.dump());
      *out = static_cast<T>(d);
      return;
    }
    throw Error(source + ": hardware key '" + key + "' has the wrong type");
  } else {
    try {
      *out = v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(source + ": hardware key '" + key + "' has the wrong type");
    }
  }
}

CollectiveFit collective_fit_from_json(const nlohmann::json& v, const std::string& source,
                                       size_t index) {
  const std::string at = "collectives[" + std::to_string(index) + "]";
  if (!v.is_object()) throw Error(source + ": hardware key '" + at + "' must be an object");
  CollectiveFit f;
  bool have_kind = false, have_ranks = false, have_bw = false;
  for (const auto& [key, x] : v.items()) {
    const std::string field = at + "." + key;
    if (key == "kind") {
      std::string k;
      read_field(x, field, source, &k);
      if (k == "all_gather")
        f.kind = plan::OpKind::all_gather;
      else if (k == "reduce_scatter")
        f.kind = plan::OpKind::reduce_scatter;
      else if (k == "all_reduce")
        f.kind = plan::OpKind::all_reduce;
      else
        throw Error(source + ": hardware key '" + field +
                    "' must be all_gather, reduce_scatter or all_reduce, not '" + k + "'");
      have_kind = true;
    } else if (key == "ranks") {
      read_field(x, field, source, &f.ranks);
      have_ranks = true;
    } else if (key == "multi_node") {
      read_field(x, field, source, &f.multi_node);
    } else if (key == "latency_ns") {
      read_field(x, field, source, &f.latency_ns);
    } else if (key == "bus_bytes_per_s") {
      read_field(x, field, source, &f.bus_bytes_per_s);
      have_bw = true;
    } else if (key == "small") {
      if (!x.is_object())
        throw Error(source + ": hardware key '" + field +
                    "' must be an object {max_bytes, latency_ns, bus_bytes_per_s}");
      bool have_max = false, have_small_bw = false;
      for (const auto& [k, y] : x.items()) {
        const std::string sub = field + "." + k;
        if (k == "max_bytes") {
          read_field(y, sub, source, &f.small_max_bytes);
          have_max = true;
        } else if (k == "latency_ns") {
          read_field(y, sub, source, &f.small_latency_ns);
        } else if (k == "bus_bytes_per_s") {
          read_field(y, sub, source, &f.small_bus_bytes_per_s);
          have_small_bw = true;
        } else {
          throw Error(source + ": unknown hardware key '" + sub + "'");
        }
      }
      if (!have_max) throw Error(source + ": hardware key '" + field + ".max_bytes' is missing");
      if (!have_small_bw)
        throw Error(source + ": hardware key '" + field + ".bus_bytes_per_s' is missing");
    } else {
      throw Error(source + ": unknown hardware key '" + field + "'");
    }
  }
  if (!have_kind) throw Error(source + ": hardware key '" + at + ".kind' is missing");
  if (!have_ranks) throw Error(source + ": hardware key '" + at + ".ranks' is missing");
  if (!have_bw) throw Error(source + ": hardware key '" + at + ".bus_bytes_per_s' is missing");
  return f;
}

}  // namespace

const char* collective_algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::ring:
      return "ring";
    case CollectiveAlgorithm::tree:
      return "tree";
    case CollectiveAlgorithm::automatic:
      return "auto";
  }
  return "?";
}

const CollectiveFit* HardwareModel::collective_fit(plan::OpKind kind, int64_t ranks,
                                                   bool multi_node) const {
  for (const CollectiveFit& f : collectives)
    if (f.kind == kind && f.ranks == ranks && f.multi_node == multi_node) return &f;
  return nullptr;
}

double HardwareModel::peak_flops(plan::DType dtype) const {
  switch (dtype) {
    case plan::DType::f32:
      return peak_flops_fp32;
    case plan::DType::bf16:
      return peak_flops_bf16;
    case plan::DType::f16:
      return peak_flops_fp16;
    default:
      break;
  }
  throw Error(std::string("hardware: no compute peak for dtype ") + plan::dtype_name(dtype));
}

bool is_memory_op_kind(const std::string& name) {
  static const plan::OpKind kKinds[] = {
      plan::OpKind::cast_params, plan::OpKind::copy_out,        plan::OpKind::reshard_copy,
      plan::OpKind::grad_cast,   plan::OpKind::grad_accumulate, plan::OpKind::grad_norm,
      plan::OpKind::grad_scale,  plan::OpKind::inf_check,       plan::OpKind::optimizer};
  for (plan::OpKind k : kKinds)
    if (name == plan::op_kind_name(k)) return true;
  return false;
}

bool is_graph_op_type(const std::string& name) {
  try {
    (void)plan::parse_op_type(name, "");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {
constexpr std::string_view kBackwardSuffix = ".backward";
bool has_backward_suffix(const std::string& key) {
  return key.size() > kBackwardSuffix.size() &&
         key.compare(key.size() - kBackwardSuffix.size(), kBackwardSuffix.size(),
                     kBackwardSuffix) == 0;
}
}  // namespace

std::string efficiency_key(const std::string& op_type, bool backward) {
  return backward ? op_type + std::string(kBackwardSuffix) : op_type;
}

bool is_efficiency_key(const std::string& name) {
  if (has_backward_suffix(name))
    return is_graph_op_type(name.substr(0, name.size() - kBackwardSuffix.size()));
  return is_graph_op_type(name);
}

std::optional<double> HardwareModel::exact_efficiency(const std::string& key, plan::DType dtype,
                                                      double flops) const {
  const auto c = efficiency_curves.find(dtype);
  if (c != efficiency_curves.end()) {
    const auto it = c->second.find(key);
    if (it != c->second.end() && !it->second.empty()) {
      const std::vector<EfficiencyKnot>& k = it->second;
      if (!(flops > k.front().flops)) {
        // Below the smallest knot: the first segment's log-linear slope
        // continued (small GEMMs lose efficiency as in the measured range),
        // never above the first knot's efficiency and never so low that
        // the smaller op would take longer than the knot's.
        const EfficiencyKnot& a = k[0];
        const EfficiencyKnot& b = k[1];
        const double slope = (b.efficiency - a.efficiency) / std::log(b.flops / a.flops);
        const double e = a.efficiency + slope * std::log(flops / a.flops);
        return std::min(a.efficiency, std::max(e, a.efficiency * flops / a.flops));
      }
      if (!(flops < k.back().flops)) return k.back().efficiency;
      size_t i = 1;
      while (k[i].flops < flops) ++i;  // k[i - 1].flops < flops <= k[i].flops
      const double t = std::log(flops / k[i - 1].flops) / std::log(k[i].flops / k[i - 1].flops);
      return k[i - 1].efficiency + t * (k[i].efficiency - k[i - 1].efficiency);
    }
  }
  const auto d = dtype_efficiency.find(dtype);
  if (d != dtype_efficiency.end()) {
    const auto it = d->second.find(key);
    if (it != d->second.end()) return it->second;
  }
  const auto it = efficiency.find(key);
  if (it != efficiency.end()) return it->second;
  return std::nullopt;
}

double HardwareModel::efficiency_of(const std::string& op_type) const {
  auto it = efficiency.find(op_type);
  if (it != efficiency.end()) return it->second;
  if (has_backward_suffix(op_type)) {
    it = efficiency.find(op_type.substr(0, op_type.size() - kBackwardSuffix.size()));
    if (it != efficiency.end()) return it->second;
  }
  it = efficiency.find("default");
  return it != efficiency.end() ? it->second : 1.0;
}

double HardwareModel::efficiency_of(const std::string& op_type, plan::DType dtype) const {
  const auto d = dtype_efficiency.find(dtype);
  if (d != dtype_efficiency.end()) {
    auto it = d->second.find(op_type);
    if (it != d->second.end()) return it->second;
    if (has_backward_suffix(op_type) && !efficiency.count(op_type)) {
      it = d->second.find(op_type.substr(0, op_type.size() - kBackwardSuffix.size()));
      if (it != d->second.end()) return it->second;
    }
  }
  return efficiency_of(op_type);
}

double HardwareModel::efficiency_of(const std::string& op_type, plan::DType dtype,
                                    double flops) const {
  if (const auto e = exact_efficiency(op_type, dtype, flops)) return *e;
  if (has_backward_suffix(op_type)) {
    const std::string forward = op_type.substr(0, op_type.size() - kBackwardSuffix.size());
    if (const auto e = exact_efficiency(forward, dtype, flops)) return *e;
  }
  return efficiency_of(op_type, dtype);
}

void HardwareModel::validate() const {
  auto positive = [&](double v, const char* field) {
    if (!(v > 0) || !std::isfinite(v))
      throw Error("hardware '" + name + "': " + field + " must be > 0");
  };
  positive(peak_flops_fp32, "peak_flops_fp32");
  positive(peak_flops_bf16, "peak_flops_bf16");
  positive(peak_flops_fp16, "peak_flops_fp16");
  positive(hbm_bytes_per_s, "hbm_bytes_per_s");
  positive(static_cast<double>(memory_bytes), "memory_bytes");
  positive(nvlink_bus_bytes_per_s, "nvlink_bus_bytes_per_s");
  positive(ib_bytes_per_s, "ib_bytes_per_s");
  positive(pcie_bytes_per_s, "pcie_bytes_per_s");
  positive(host_memory_bytes_per_s, "host_memory_bytes_per_s");
  positive(static_cast<double>(gpus_per_node), "gpus_per_node");
  const auto non_negative = [&](int64_t v, const char* field) {
    if (v < 0)
      throw Error("hardware '" + name + "': " + field + " must be >= 0, not " + std::to_string(v));
  };
  non_negative(blas_workspace_bytes, "blas_workspace_bytes");
  non_negative(blas_workspaces, "blas_workspaces");
  non_negative(nccl_channels, "nccl_channels");
  non_negative(nccl_buffsize_bytes, "nccl_buffsize_bytes");
  // Every latency and fixed overhead in [0, kMaxLatencyNs]: named with its
  // value and the limit (2^63-1 ns passed and overflowed the step's clock).
  const auto latency = [&](int64_t v, const std::string& field) {
    if (v < 0) throw Error("hardware '" + name + "': " + field + " must be >= 0");
    if (v > kMaxLatencyNs)
      throw Error("hardware '" + name + "': " + field + " = " + std::to_string(v) +
                  " exceeds the limit " + std::to_string(kMaxLatencyNs) +
                  " ns (1000 s; real latencies and overheads are microseconds, and a step of "
                  "millions of ops must stay within the int64 nanosecond clock)");
  };
  latency(nvlink_latency_ns, "nvlink_latency_ns");
  latency(ib_latency_ns, "ib_latency_ns");
  latency(collective_latency_ns, "collective_latency_ns");
  latency(launch_overhead_ns, "launch_overhead_ns");
  latency(op_dispatch_ns, "op_dispatch_ns");
  validate_op_level(op_level, name);
  if (launch_queue_depth < 1)
    throw Error("hardware '" + name + "': launch_queue_depth must be >= 1");
  for (size_t i = 0; i < collectives.size(); ++i) {
    const CollectiveFit& f = collectives[i];
    const std::string at = "hardware '" + name + "': collectives[" + std::to_string(i) + "].";
    if (!plan::is_collective(f.kind)) throw Error(at + "kind is not a collective");
    if (f.ranks < 2) throw Error(at + "ranks must be >= 2");
    const std::string index = "collectives[" + std::to_string(i) + "].";
    latency(f.latency_ns, index + "latency_ns");
    if (!(f.bus_bytes_per_s > 0) || !std::isfinite(f.bus_bytes_per_s))
      throw Error(at + "bus_bytes_per_s must be > 0");
    if (f.small_max_bytes < 0) throw Error(at + "small.max_bytes must be >= 0");
    if (f.small_max_bytes > 0) {
      latency(f.small_latency_ns, index + "small.latency_ns");
      if (!(f.small_bus_bytes_per_s > 0) || !std::isfinite(f.small_bus_bytes_per_s))
        throw Error(at + "small.bus_bytes_per_s must be > 0");
    }
    for (size_t j = 0; j < i; ++j)
      if (collectives[j].kind == f.kind && collectives[j].ranks == f.ranks &&
          collectives[j].multi_node == f.multi_node)
        throw Error(at + "duplicates collectives[" + std::to_string(j) + "]");
  }
  if (!(contention_factor >= 1.0) || !std::isfinite(contention_factor))
    throw Error("hardware '" + name + "': contention_factor must be >= 1");
  for (const auto& [type, e] : efficiency)
    if (!(e > 0 && e <= 1.0))
      throw Error("hardware '" + name + "': efficiency." + type + " must be in (0, 1]");
  for (const auto& [kind, fit] : memory_ops) {
    latency(fit.fixed_ns, "memory_ops." + kind + ".fixed_ns");
    if (!(fit.bandwidth_efficiency > 0 && fit.bandwidth_efficiency <= 1.0))
      throw Error("hardware '" + name + "': memory_ops." + kind +
                  ".bandwidth_efficiency must be in (0, 1]");
  }
  for (const auto& [dtype, curves] : efficiency_curves) {
    (void)peak_flops(dtype);  // a dtype without a compute peak has no efficiency
    for (const auto& [type, knots] : curves) {
      const std::string at =
          "hardware '" + name + "': efficiency_curves." + plan::dtype_name(dtype) + "." + type;
      if (knots.size() < 2) throw Error(at + " needs at least 2 knots");
      for (size_t i = 0; i < knots.size(); ++i) {
        if (!(knots[i].flops > 0) || !std::isfinite(knots[i].flops))
          throw Error(at + "[" + std::to_string(i) + "]: FLOPs must be > 0");
        if (i > 0 && !(knots[i].flops > knots[i - 1].flops))
          throw Error(at + "[" + std::to_string(i) + "]: FLOPs must ascend");
        if (!(knots[i].efficiency > 0 && knots[i].efficiency <= 1.0))
          throw Error(at + "[" + std::to_string(i) + "]: efficiency must be in (0, 1]");
      }
    }
  }
  for (const auto& [dtype, map] : dtype_efficiency) {
    (void)peak_flops(dtype);  // a dtype without a compute peak has no efficiency
    for (const auto& [type, e] : map)
      if (!(e > 0 && e <= 1.0))
        throw Error("hardware '" + name + "': dtype_efficiency." + plan::dtype_name(dtype) + "." +
                    type + " must be in (0, 1]");
  }
}

std::vector<std::string> hardware_presets() {
  return {"h100-sxm", "h200-sxm", "a100-sxm", "h100-pcie", "cpu-local"};
}

bool is_hardware_preset(const std::string& name) {
  for (const std::string& p : hardware_presets())
    if (p == name) return true;
  return false;
}

HardwareModel hardware_preset(const std::string& name) {
  if (name == "h100-sxm") return h100();
  if (name == "h200-sxm") return h200();
  if (name == "a100-sxm") return a100();
  if (name == "h100-pcie") return h100_pcie();
  if (name == "cpu-local") return cpu_local();
  throw Error("unknown hardware preset '" + name +
              "' (h100-sxm, h200-sxm, a100-sxm, h100-pcie, cpu-local, or a hardware JSON file)");
}

namespace {
// "device": "cpu" | "sm_<major><minor>" (plan::parse_device_family).
plan::DeviceFamily read_device(const nlohmann::json& v, const std::string& source) {
  std::string text;
  read_field(v, "device", source, &text);
  try {
    return plan::parse_device_family(text, "hardware key 'device'");
  } catch (const plan::Error& e) {
    throw Error(source + ": " + e.what());
  }
}
}  // namespace

nlohmann::json hardware_to_json(const HardwareModel& hw) {
  nlohmann::json j;
  j["name"] = hw.name;
  j["device"] = plan::device_family_name(hw.device);
  j["peak_flops_fp32"] = hw.peak_flops_fp32;
  j["peak_flops_bf16"] = hw.peak_flops_bf16;
  j["peak_flops_fp16"] = hw.peak_flops_fp16;
  j["hbm_bytes_per_s"] = hw.hbm_bytes_per_s;
  j["memory_bytes"] = hw.memory_bytes;
  j["nvlink_bus_bytes_per_s"] = hw.nvlink_bus_bytes_per_s;
  j["nvlink_latency_ns"] = hw.nvlink_latency_ns;
  j["ib_bytes_per_s"] = hw.ib_bytes_per_s;
  j["ib_latency_ns"] = hw.ib_latency_ns;
  j["collective_latency_ns"] = hw.collective_latency_ns;
  j["all_reduce_algorithm"] = collective_algorithm_name(hw.all_reduce_algorithm);
  nlohmann::json fits = nlohmann::json::array();
  for (const CollectiveFit& f : hw.collectives) {
    nlohmann::json fit = {{"kind", plan::op_kind_name(f.kind)},
                          {"ranks", f.ranks},
                          {"multi_node", f.multi_node},
                          {"latency_ns", f.latency_ns},
                          {"bus_bytes_per_s", f.bus_bytes_per_s}};
    if (f.small_max_bytes > 0)
      fit["small"] = {{"max_bytes", f.small_max_bytes},
                      {"latency_ns", f.small_latency_ns},
                      {"bus_bytes_per_s", f.small_bus_bytes_per_s}};
    fits.push_back(fit);
  }
  j["collectives"] = fits;
  j["pcie_bytes_per_s"] = hw.pcie_bytes_per_s;
  j["host_memory_bytes_per_s"] = hw.host_memory_bytes_per_s;
  j["efficiency"] = hw.efficiency;
  if (!hw.dtype_efficiency.empty()) {
    nlohmann::json by_dtype = nlohmann::json::object();
    for (const auto& [dtype, map] : hw.dtype_efficiency) by_dtype[plan::dtype_name(dtype)] = map;
    j["dtype_efficiency"] = by_dtype;
  }
  if (!hw.memory_ops.empty()) {
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [kind, fit] : hw.memory_ops)
      ops[kind] = {{"fixed_ns", fit.fixed_ns}, {"bandwidth_efficiency", fit.bandwidth_efficiency}};
    j["memory_ops"] = ops;
  }
  if (!hw.efficiency_curves.empty()) {
    nlohmann::json curves = nlohmann::json::object();
    for (const auto& [dtype, map] : hw.efficiency_curves)
      for (const auto& [type, knots] : map) {
        nlohmann::json points = nlohmann::json::array();
        for (const EfficiencyKnot& k : knots) points.push_back({k.flops, k.efficiency});
        curves[plan::dtype_name(dtype)][type] = points;
      }
    j["efficiency_curves"] = curves;
  }
  j["launch_overhead_ns"] = hw.launch_overhead_ns;
  j["op_dispatch_ns"] = hw.op_dispatch_ns;
  j["launch_queue_depth"] = hw.launch_queue_depth;
  j["contention_factor"] = hw.contention_factor;
  j["gpus_per_node"] = hw.gpus_per_node;
  j["blas_workspace_bytes"] = hw.blas_workspace_bytes;
  j["blas_workspaces"] = hw.blas_workspaces;
  j["nccl_channels"] = hw.nccl_channels;
  j["nccl_buffsize_bytes"] = hw.nccl_buffsize_bytes;
  j["op_level"] = op_level_to_json(hw.op_level);
  if (hw.fitted.calibrated) j["fitted"] = fitted_to_json(hw.fitted);
  return j;
}

namespace {
// An efficiency key must be a graph op type (or "default" where allowed):
// a misspelt type would otherwise be kept and never used.
void check_op_type_key(const std::string& type, const std::string& source, const std::string& field,
                       bool allow_default) {
  if (is_efficiency_key(type) || (allow_default && type == "default")) return;
  throw Error(source + ": hardware key '" + field + "': '" + type +
              "' is not an op type (embedding, linear, layernorm, rmsnorm, attention, gelu, "
              "swiglu, residual, cross_entropy, rope, relu, each optionally with '.backward'" +
              (allow_default ? ", or default" : "") + ")");
}

plan::DType dtype_field(const std::string& name, const std::string& source,
                        const std::string& field) {
  try {
    return plan::parse_dtype(name, source + ": " + field);
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

// `doc` under `key` is {dtype: {op type: value}}: checks both levels (dtype
// names, graph op types, objects) and calls fn(dtype, type, value, "key.dtype.type").
template <typename Fn>
void for_each_dtype_type(const nlohmann::json& doc, const std::string& key,
                         const std::string& source, Fn fn) {
  if (!doc.is_object()) throw Error(source + ": hardware key '" + key + "' must be an object");
  for (const auto& [dtype_name, map] : doc.items()) {
    const std::string field = key + "." + dtype_name;
    const plan::DType dtype = dtype_field(dtype_name, source, field);
    if (!map.is_object()) throw Error(source + ": hardware key '" + field + "' must be an object");
    for (const auto& [type, value] : map.items()) {
      const std::string at = field + "." + type;
      check_op_type_key(type, source, at, false);
      fn(dtype, type, value, at);
    }
  }
}
}  // namespace

HardwareModel hardware_from_json(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object()) throw Error(source + ": a hardware document must be a JSON object");
  std::string base = "h100-sxm";
  if (doc.contains("base")) read_field(doc.at("base"), "base", source, &base);
  HardwareModel h = hardware_preset(base);
  h.name = source;
  // An efficiency the document sets for a type (in `efficiency`, or in
  // `dtype_efficiency` for one dtype) replaces the base's curves for that
  // type and its backward: a preset's published curve would otherwise take
  // precedence over it. Curves the document gives itself are read afterwards. Malformed
  // entries are left to the main loop, which names them.
  const auto drop_base_curves = [&](const nlohmann::json& map, std::optional<plan::DType> dtype) {
    if (!map.is_object()) return;
    for (const auto& [type, value] : map.items()) {
      (void)value;
      for (auto& [d, curves] : h.efficiency_curves)
        if (!dtype || d == *dtype) {
          curves.erase(type);
          // "attention" covers its backward ops too, unless given apart.
          if (!map.contains(efficiency_key(type, true))) curves.erase(efficiency_key(type, true));
        }
    }
  };
  if (const auto e = doc.find("efficiency"); e != doc.end()) drop_base_curves(*e, std::nullopt);
  if (const auto e = doc.find("dtype_efficiency"); e != doc.end() && e->is_object())
    for (const auto& [dtype_name, map] : e->items()) {
      plan::DType d;
      try {
        d = plan::parse_dtype(dtype_name, source);
      } catch (const std::exception&) {
        continue;
      }
      drop_base_curves(map, d);
    }
  for (const auto& [key, v] : doc.items()) {
    if (key == "base") continue;
    if (key == "name")
      read_field(v, key, source, &h.name);
    else if (key == "device")
      h.device = read_device(v, source);
    else if (key == "peak_flops_fp32")
      read_field(v, key, source, &h.peak_flops_fp32);
    else if (key == "peak_flops_bf16")
      read_field(v, key, source, &h.peak_flops_bf16);
    else if (key == "peak_flops_fp16")
      read_field(v, key, source, &h.peak_flops_fp16);
    else if (key == "hbm_bytes_per_s")
      read_field(v, key, source, &h.hbm_bytes_per_s);
    else if (key == "memory_bytes")
      read_field(v, key, source, &h.memory_bytes);
    else if (key == "nvlink_bus_bytes_per_s")
      read_field(v, key, source, &h.nvlink_bus_bytes_per_s);
    else if (key == "nvlink_latency_ns")
      read_field(v, key, source, &h.nvlink_latency_ns);
    else if (key == "ib_bytes_per_s")
      read_field(v, key, source, &h.ib_bytes_per_s);
    else if (key == "ib_latency_ns")
      read_field(v, key, source, &h.ib_latency_ns);
    else if (key == "pcie_bytes_per_s")
      read_field(v, key, source, &h.pcie_bytes_per_s);
    else if (key == "host_memory_bytes_per_s")
      read_field(v, key, source, &h.host_memory_bytes_per_s);
    else if (key == "launch_overhead_ns")
      read_field(v, key, source, &h.launch_overhead_ns);
    else if (key == "op_dispatch_ns")
      read_field(v, key, source, &h.op_dispatch_ns);
    else if (key == "launch_queue_depth")
      read_field(v, key, source, &h.launch_queue_depth);
    else if (key == "collective_latency_ns")
      read_field(v, key, source, &h.collective_latency_ns);
    else if (key == "all_reduce_algorithm") {
      std::string a;
      read_field(v, key, source, &a);
      if (a == "ring")
        h.all_reduce_algorithm = CollectiveAlgorithm::ring;
      else if (a == "tree")
        h.all_reduce_algorithm = CollectiveAlgorithm::tree;
      else if (a == "auto")
        h.all_reduce_algorithm = CollectiveAlgorithm::automatic;
      else
        throw Error(source +
                    ": hardware key 'all_reduce_algorithm' must be ring, tree or auto, not '" + a +
                    "'");
    } else if (key == "collectives") {
      // Replaces the base's list: a calibration describes one cluster.
      if (!v.is_array()) throw Error(source + ": hardware key 'collectives' must be an array");
      h.collectives.clear();
      for (size_t i = 0; i < v.size(); ++i)
        h.collectives.push_back(collective_fit_from_json(v[i], source, i));
    } else if (key == "contention_factor")
      read_field(v, key, source, &h.contention_factor);
    else if (key == "gpus_per_node")
      read_field(v, key, source, &h.gpus_per_node);
    else if (key == "blas_workspace_bytes")
      read_field(v, key, source, &h.blas_workspace_bytes);
    else if (key == "blas_workspaces")
      read_field(v, key, source, &h.blas_workspaces);
    else if (key == "nccl_channels")
      read_field(v, key, source, &h.nccl_channels);
    else if (key == "nccl_buffsize_bytes")
      read_field(v, key, source, &h.nccl_buffsize_bytes);
    else if (key == "efficiency") {
      if (!v.is_object()) throw Error(source + ": hardware key 'efficiency' must be an object");
      for (const auto& [type, e] : v.items()) {
        check_op_type_key(type, source, "efficiency." + type, true);
        double value = 0;
        read_field(e, "efficiency." + type, source, &value);
        h.efficiency[type] = value;
      }
    } else if (key == "memory_ops") {
      if (!v.is_object()) throw Error(source + ": hardware key 'memory_ops' must be an object");
      for (const auto& [kind, fit] : v.items()) {
        const std::string field = "memory_ops." + kind;
        if (!is_memory_op_kind(kind))
          throw Error(source + ": hardware key '" + field + "': '" + kind +
                      "' is not an op kind without FLOPs (cast_params, copy_out, reshard_copy, "
                      "grad_cast, grad_accumulate, grad_norm, grad_scale, inf_check, optimizer)");
        if (!fit.is_object())
          throw Error(source + ": hardware key '" + field + "' must be an object");
        MemoryOpFit m;
        for (const auto& [k, x] : fit.items()) {
          if (k == "fixed_ns")
            read_field(x, field + ".fixed_ns", source, &m.fixed_ns);
          else if (k == "bandwidth_efficiency")
            read_field(x, field + ".bandwidth_efficiency", source, &m.bandwidth_efficiency);
          else
            throw Error(source + ": unknown hardware key '" + field + "." + k + "'");
        }
        h.memory_ops[kind] = m;
      }
    } else if (key == "efficiency_curves") {
      for_each_dtype_type(
          v, key, source,
          [&](plan::DType dtype, const std::string& type, const nlohmann::json& points,
              const std::string& at) {
            if (!points.is_array())
              throw Error(source + ": hardware key '" + at +
                          "' must be an array of [FLOPs, efficiency]");
            std::vector<EfficiencyKnot> knots;
            for (size_t i = 0; i < points.size(); ++i) {
              const std::string item = at + "[" + std::to_string(i) + "]";
              if (!points[i].is_array() || points[i].size() != 2)
                throw Error(source + ": hardware key '" + item + "' must be [FLOPs, efficiency]");
              EfficiencyKnot k;
              read_field(points[i][0], item + "[0]", source, &k.flops);
              read_field(points[i][1], item + "[1]", source, &k.efficiency);
              knots.push_back(k);
            }
            h.efficiency_curves[dtype][type] = knots;
          });
    } else if (key == "op_level") {
      op_level_from_json(v, source, &h.op_level);
    } else if (key == "fitted") {
      h.fitted = fitted_from_json(v, source);
    } else if (key == "dtype_efficiency") {
      for_each_dtype_type(v, key, source,
                          [&](plan::DType dtype, const std::string& type, const nlohmann::json& e,
                              const std::string& at) {
                            read_field(e, at, source, &h.dtype_efficiency[dtype][type]);
                          });
    } else {
      throw Error(source + ": unknown hardware key '" + key + "'");
    }
  }
  h.validate();
  return h;
}

HardwareModel load_hardware(const std::string& spec) {
  if (is_hardware_preset(spec)) return hardware_preset(spec);
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    throw Error(
        "hardware '" + spec +
        "' is neither a preset (h100-sxm, h200-sxm, a100-sxm, h100-pcie, cpu-local) nor a readable "
        "file");
  nlohmann::json doc;
  try {
    doc = plan::load_json_input(spec, "hardware");
  } catch (const plan::Error& e) {
    throw Error(e.what());
  }
  return hardware_from_json(doc, spec);
}

}  // namespace shardscope::sim
