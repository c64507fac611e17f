// PyTorch's NVTX range names (emit_nvtx(record_shapes=True), getNvtxStr in
// torch/csrc/profiler/util.cpp), the dtype a kernel's name states, and the
// notes `report` and `calibrate` print for CUPTI profiles.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "traces/torch_nvtx.h"

using namespace shardscope::traces;

namespace {

TorchNvtxRange parsed(const std::string& text) {
  TorchNvtxRange r;
  std::string why;
  const TorchNvtxParse p = parse_torch_nvtx(text, &r, &why);
  INFO(text << ": " << why);
  REQUIRE(p == TorchNvtxParse::ok);
  return r;
}

std::string refused(const std::string& text) {
  TorchNvtxRange r;
  std::string why;
  REQUIRE(parse_torch_nvtx(text, &r, &why) == TorchNvtxParse::malformed);
  return why;
}

Trace inject_profile() {
  Trace t;
  t.meta.tool_versions["recorder"] = "shardscope-inject (CUPTI)";
  RankTrace& r = t.add_rank(0);
  const uint32_t lane = t.add_lane(r, "stream 7", LaneKind::compute, 7);
  add_event(r, lane, t.intern("ampere_bf16_s16816gemm_bf16_64x64_tn"), Category::compute, 0, 10);
  add_event(r, lane, t.intern("elementwise_kernel"), Category::compute, 20, 10);
  return t;
}

}  // namespace

TEST_CASE("torch nvtx: a forward op with seq, op_id, sizes and input_op_ids", "[traces][nvtx]") {
  const TorchNvtxRange r = parsed(
      "aten::mm, seq = 12, op_id = 345, sizes = [[8192, 768], [768, 2304]], input_op_ids = "
      "[(344,0), (0,-1)]");
  CHECK(r.name == "aten::mm");
  CHECK(r.seq == 12);
  CHECK(r.op_id == 345);
  CHECK(r.has_sizes);
  CHECK(r.sizes == std::vector<std::vector<int64_t>>{{8192, 768}, {768, 2304}});
}

TEST_CASE("torch nvtx: scalars and None are [], no seq reads -1, no sizes is not []",
          "[traces][nvtx]") {
  const TorchNvtxRange addmm =
      parsed("aten::addmm, op_id = 3, sizes = [[2304], [8192, 768], [768, 2304], [], []]");
  CHECK(addmm.seq == -1);
  CHECK(addmm.sizes == std::vector<std::vector<int64_t>>{{2304}, {8192, 768}, {768, 2304}, {}, {}});
  const TorchNvtxRange unshaped = parsed("aten::mm, seq = 1, op_id = 2");
  CHECK_FALSE(unshaped.has_sizes);
  CHECK(unshaped.sizes.empty());
  const TorchNvtxRange empty = parsed("aten::empty, op_id = 9, sizes = []");
  CHECK(empty.has_sizes);
  CHECK(empty.sizes.empty());
  // A record_function scope's name may hold ", ": the fields start at op_id.
  CHECK(parsed("FSDP::all_gather, step 2, op_id = 4").name == "FSDP::all_gather, step 2");
}

TEST_CASE("torch nvtx: other programs' ranges are not PyTorch's", "[traces][nvtx]") {
  TorchNvtxRange r;
  CHECK(parse_torch_nvtx("ProfilerStep#3", &r) == TorchNvtxParse::not_torch);
  CHECK(parse_torch_nvtx("my range, sizes = [[2]]", &r) == TorchNvtxParse::not_torch);
  CHECK(parse_torch_nvtx("", &r) == TorchNvtxParse::not_torch);
}

TEST_CASE("torch nvtx: truncated strings, nested brackets, huge numbers are refused",
          "[traces][nvtx]") {
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[2, 3], [3"),
             Catch::Contains("truncated: expected ',' or ']' in an input's sizes"));
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[2, 3], [3, 4]"), Catch::Contains("truncated"));
  CHECK_THAT(refused("aten::mm, op_id = "), Catch::Contains("truncated: expected op_id"));
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[[2]]]"), Catch::Contains("nested deeper"));
  // 2^62 is the largest value; 2^62 + 1 and 20 digits are refused, never wrapped.
  CHECK(parsed("aten::mm, op_id = 5, sizes = [[4611686018427387904]]").sizes[0][0] == int64_t{1}
                                                                                          << 62);
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[4611686018427387905]]"),
             Catch::Contains("a dimension exceeds 2^62"));
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[99999999999999999999]]"),
             Catch::Contains("exceeds 2^62"));
  CHECK_THAT(refused("aten::mm, seq = 99999999999999999999, op_id = 5"),
             Catch::Contains("seq exceeds 2^62"));
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[-1]]"),
             Catch::Contains("a dimension is not a decimal integer"));
  CHECK_THAT(refused("aten::mm, seq = x, op_id = 5"), Catch::Contains("seq is not"));
  CHECK_THAT(refused("aten::mm, op_id = 5, sizes = [[2]]x"),
             Catch::Contains("unexpected text after the fields"));
  CHECK_THAT(refused(", op_id = 5"), Catch::Contains("no op name"));
  std::string many = "aten::view, op_id = 1, sizes = [[";
  for (int i = 0; i < 65; ++i) many += (i ? ", " : "") + std::string("1");
  CHECK_THAT(refused(many + "]]"), Catch::Contains("more than 64 dimensions"));
  CHECK_THAT(refused("aten::mm, op_id = 5, input_op_ids = [(1,-2)]"),
             Catch::Contains("an output number is negative"));
}

TEST_CASE("torch nvtx: backward nodes end in Backward and digits", "[traces][nvtx]") {
  CHECK(is_backward_node_name("MmBackward0"));
  CHECK(is_backward_node_name("ScaledDotProductFlashAttentionBackward0"));
  CHECK_FALSE(is_backward_node_name("aten::mm"));
  CHECK_FALSE(is_backward_node_name("MmBackward"));
  CHECK_FALSE(is_backward_node_name("Backward0"));
  CHECK_FALSE(is_backward_node_name("torch::autograd::AccumulateGrad"));
}

TEST_CASE("torch nvtx: the dtype a kernel name states, never a guess", "[traces][nvtx]") {
  CHECK(
      kernel_dtype("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
                   "execute_segment_k_off_kernel__5x_cublas") == KernelDtype::bf16);
  CHECK(kernel_dtype("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn") ==
        KernelDtype::fp16);
  CHECK(kernel_dtype("fmha_cutlassF_f16_aligned_64x64_rf_sm80") == KernelDtype::fp16);
  CHECK(kernel_dtype("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
                     "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, "
                     "cutlass::bfloat16_t> >, false, true>(Flash_fwd_params)") ==
        KernelDtype::bf16);
  CHECK(kernel_dtype("ampere_sgemm_128x64_tn") == KernelDtype::fp32);
  CHECK(kernel_dtype("sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128x32") ==
        KernelDtype::fp32);
  CHECK(kernel_dtype("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT") == KernelDtype::unknown);
  // Kernel names of a bf16 autocast run on the H200 (tests/recorded/h200/
  // profile-torch-eager-b48): cuBLAS's nvjet GEMMs and cuDNN's SDPA state no
  // dtype (cuDNN's "f16" is either 16-bit type); cuBLASLt's split-K reduction does.
  CHECK(kernel_dtype("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN") ==
        KernelDtype::unknown);
  CHECK(kernel_dtype("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_"
                     "4x1x1_cga1x1x1_kernel0_0") == KernelDtype::unknown);
  CHECK(kernel_dtype("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
                     "__nv_bfloat16, false>") == KernelDtype::bf16);
  CHECK(
      kernel_dtype("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_"
                   "align1>(cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_align1::Params)") ==
      KernelDtype::bf16);
  CHECK(kernel_dtype("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n") == KernelDtype::unknown);
  CHECK(kernel_dtype("convert_bf16_to_half_kernel") == KernelDtype::unknown);
  CHECK(kernel_dtype("void at::native::reduce_kernel<512, 1>") == KernelDtype::unknown);
  CHECK(std::string(kernel_dtype_input_type(KernelDtype::bf16)) == "c10::BFloat16");
  CHECK(std::string(kernel_dtype_input_type(KernelDtype::unknown)).empty());
}

TEST_CASE("torch nvtx notes: a CUPTI profile without --torch-shapes says how to get FLOPs",
          "[traces][nvtx]") {
  Trace t = inject_profile();
  const std::vector<std::string> notes = torch_nvtx_notes(t);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("none of the 2 compute kernels carries FLOPs") &&
                           Catch::Contains("profile --torch-shapes"));
  t.meta.tool_versions["recorder"] = "other";
  CHECK(torch_nvtx_notes(t).empty());
}

TEST_CASE("torch nvtx notes: counts and reasons of a --torch-shapes profile", "[traces][nvtx]") {
  Trace t = inject_profile();
  auto& tv = t.meta.tool_versions;
  tv["torch_nvtx.kernels"] = "10";
  tv["torch_nvtx.with_flops"] = "4";
  tv["torch_nvtx.outside_op_range"] = "2";
  tv["torch_nvtx.op_not_costed"] = "4";
  tv["torch_nvtx.dtype.bf16"] = "3";
  tv["torch_nvtx.dtype.unknown"] = "1";
  const std::vector<std::string> notes = torch_nvtx_notes(t);
  REQUIRE(notes.size() == 3);
  CHECK_THAT(notes[0], Catch::Contains("4 of 10 compute kernels got an op type and FLOPs") &&
                           Catch::Contains("bf16 3, unknown 1"));
  CHECK_THAT(notes[1], Catch::Contains("6 compute kernels have no FLOPs: 4 ran under ops") &&
                           Catch::Contains("; 2 were launched outside any PyTorch op range"));
  CHECK_THAT(notes[2], Catch::Contains("1 kernels with FLOPs have names that state no dtype"));
  std::string why;
  CHECK(torch_nvtx_compute_dtype(t, &why).empty());
  CHECK_THAT(why, Catch::Contains("no dtype for some") && Catch::Contains("bf16 3, unknown 1"));
  tv.erase("torch_nvtx.dtype.unknown");
  CHECK(torch_nvtx_compute_dtype(t, &why) == "bf16");
  CHECK(why.empty());
  tv["torch_nvtx.dtype.fp32"] = "1";
  CHECK(torch_nvtx_compute_dtype(t, &why).empty());
  CHECK_THAT(why, Catch::Contains("several dtypes"));
}
