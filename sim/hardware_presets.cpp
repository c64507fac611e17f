// The hardware presets (h100-sxm, h200-sxm, a100-sxm, h100-pcie, cpu-local):
// public datasheet and measured figures, each cited beside it and in
// docs/simulator.md. JSON reading and writing are sim/hardware_json.cpp;
// lookups and validation sim/hardware.cpp.
#include "sim/hardware.h"

#include <cstdint>

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
  // an expert few rows makes its GEMMs small and slow). An exported graph's
  // aten ops of kind memory (sim::cost_op_type: "aten") are elementwise,
  // reductions and copies: bandwidth-bound as well.
  return {{"default", 0.6},     {"linear", 0.7},        {"attention", 0.5},  {"embedding", 1.0},
          {"layernorm", 1.0},   {"rmsnorm", 1.0},       {"gelu", 1.0},       {"swiglu", 1.0},
          {"residual", 1.0},    {"cross_entropy", 1.0}, {"rope", 1.0},       {"relu", 1.0},
          {"scale", 1.0},       {"softcap", 1.0},       {"moe_router", 1.0}, {"moe_dispatch", 1.0},
          {"moe_combine", 1.0}, {"sigmoid_gate", 1.0},  {"aten", 1.0}};
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
  // Host dispatch, ns before each launch: the host-bound forward of
  // tests/recorded/h200/profile-torch-fsdp2-b8 (B = 8), medians over its 36
  // block forwards of the start-to-start interval of kernels that waited for
  // their launch (docs/simulator.md, "Host dispatch"). The host is the
  // recording machine's CPU under PyTorch 2.11; backward ops (device-bound
  // there) have no figure.
  //   layernorm: ln_2 after the residual add;
  //   linear: mean of c_attn after ln_1 (60.3 us), c_proj after attention
  //     (72.5) and c_fc after ln_2 (31.5);
  //   attention: after c_attn (the qkv split, views, cuDNN SDPA's dispatch);
  //   residual: the add after attention's c_proj;
  //   default, other forward types: one elementwise op, as the residual add
  //     (GELU's interval is device-bound: at most 63.7 us);
  //   cast_params, FSDP2 per unit: the previous unit's post-forward and this
  //     unit's pre-forward up to its first op (189.8 + 543.8 - 31.3 us),
  //     less the per-parameter copy-in below (12 x 28.7 us).
  m.host_dispatch_ns = {{"layernorm", 31'300}, {"linear", 54'800},  {"attention", 114'500},
                        {"residual", 23'700},  {"default", 23'700}, {"cast_params", 357'900}};
  // FSDP2's copy-in: a cast and a copy per parameter (bfloat16_copy_kernel,
  // Memcpy DtoD), 28.7 us apart per parameter.
  m.host_dispatch_per_param_ns = {{"cast_params", 28'700}};
  // Attention by the SDPA kernel PyTorch picks (plan/sdpa.h: cuDNN on sm_90
  // for fp16/bf16): the eager profile's cuDNN kernels at head_dim 64, B = 48,
  // H = 12, T = 1024, per layer, FLOPs as the plan counts them (4 B T^2 H D =
  // 1.546e11 forward, 2.5x backward) over 989 TFLOP/s. Forward
  // (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_*): 230.41 us, 671
  // TFLOP/s; backward (compute_dot_do_o 82.86 + flash_bprop 618.96 +
  // convert_dq_to_16bits 66.10 us): 767.92 us, 503 TFLOP/s. Other kernels
  // and head dims keep the FlashAttention-2 curves above.
  m.attention_efficiency = {{"cudnn.hd64", 0.6785}, {"cudnn.hd64.backward", 0.5090}};
  // The math fallback (fp32 with grouped KV heads on sm_90) as its fp32 GEMMs
  // and T x T passes, not at a fused kernel's rate.
  m.math_attention = true;
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

}  // namespace

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

}  // namespace shardscope::sim
