// FLOPs and bytes from recorded op shapes. Inputs are laid out as PyTorch's
// profiler writes them (record_shapes=True; the conv and attention records
// were taken from torch 2.9.1 CPU profiles, the mm / addmm / matmul /
// linear ones from Holistic Trace Analysis' test traces, a100-sendrecv-rank0
// and mtia-rank0). Every FLOP count below was also checked
// against torch.utils.flop_counter.FlopCounterMode (torch 2.9.1, meta
// tensors) except where a comment says torch differs and why.
#include <catch2/catch.hpp>

#include "traces/op_cost.h"

using namespace shardscope::traces;

namespace {

using Dims = std::vector<std::vector<int64_t>>;
using Strings = std::vector<std::string>;

// The cost, requiring it to be known.
OpCost known(std::string_view op, const Dims& dims, const Strings& types,
             const Strings& concrete = {}) {
  const OpCost c = op_cost(op, dims, types, concrete);
  REQUIRE(c.known);
  return c;
}

bool unknown(std::string_view op, const Dims& dims, const Strings& types,
             const Strings& concrete = {}) {
  const OpCost c = op_cost(op, dims, types, concrete);
  return !c.known && c.flops == 0 && c.bytes == 0;
}

}  // namespace

TEST_CASE("op cost: element sizes of the profiler's dtype names", "[op_cost]") {
  CHECK(dtype_size("float") == 4);
  CHECK(dtype_size("double") == 8);
  CHECK(dtype_size("c10::Half") == 2);
  CHECK(dtype_size("c10::BFloat16") == 2);
  CHECK(dtype_size("long int") == 8);
  CHECK(dtype_size("int") == 4);
  CHECK(dtype_size("bool") == 1);
  CHECK(dtype_size("c10::Float8_e4m3fn") == 1);
  CHECK(dtype_size("c10::complex<float>") == 8);
  CHECK(dtype_size("Scalar") == 0);
  CHECK(dtype_size("ScalarList") == 0);
  CHECK(dtype_size("") == 0);
  CHECK(dtype_size("c10::qint8") == 0);
}

TEST_CASE("op cost: mm, its out= form, and a real record", "[op_cost]") {
  // [64,128] @ [128,32]: 2 * 64 * 32 * 128 = 524,288 FLOPs;
  // (64*128 + 128*32 + 64*32) * 4 = (8192 + 4096 + 2048) * 4 = 57,344 bytes.
  OpCost c = known("aten::mm", {{64, 128}, {128, 32}}, {"float", "float"});
  CHECK(c.flops == 524288);
  CHECK(c.bytes == 57344);
  CHECK(std::string(c.op_type) == "linear");  // the graph op type it computes
  // out= [64,32] (mtia-rank0 records it as a third input): written, not read.
  c = known("aten::mm", {{64, 128}, {128, 32}, {64, 32}}, {"float", "float", "float"});
  CHECK(c.flops == 524288);
  CHECK(c.bytes == 57344);
  // a100-sendrecv-rank0: [2,2048] @ [2048,1]: 2*2*1*2048 = 8,192 FLOPs,
  // (4096 + 2048 + 2) * 4 = 24,584 bytes.
  c = known("aten::mm", {{2, 2048}, {2048, 1}}, {"float", "float"});
  CHECK(c.flops == 8192);
  CHECK(c.bytes == 24584);
  // fp16 and fp64 by element size: (6 + 12 + 8) elements.
  CHECK(known("aten::mm", {{2, 3}, {3, 4}}, {"c10::Half", "c10::Half"}).bytes == 52);
  CHECK(known("aten::mm", {{2, 3}, {3, 4}}, {"double", "double"}).bytes == 208);
}

TEST_CASE("op cost: addmm counts the product only, reads the bias", "[op_cost]") {
  // bias [32] + [64,128] @ [128,32]: 524,288 FLOPs (flop_counter.py
  // addmm_flop = mm_flop); (32 + 8192 + 4096 + 2048) * 4 = 57,472 bytes.
  const Strings types = {"float", "float", "float", "Scalar", "Scalar"};
  OpCost c = known("aten::addmm", {{32}, {64, 128}, {128, 32}, {}, {}}, types);
  CHECK(c.flops == 524288);
  CHECK(c.bytes == 57472);
  // a100-sendrecv-rank0 as recorded: [256] + [2048,6948] @ [6948,256]:
  // 2 * 2048 * 256 * 6948 = 7,285,506,048 FLOPs; (256 + 14,229,504 +
  // 1,778,688 + 524,288) * 4 = 66,130,944 bytes.
  c = known("aten::addmm", {{256}, {2048, 6948}, {6948, 256}, {}, {}}, types);
  CHECK(c.flops == 7285506048ull);
  CHECK(c.bytes == 66130944);
  // The out= form (mtia-rank0): same FLOPs; the out tensor is the write.
  c = known("aten::addmm", {{32}, {64, 128}, {128, 32}, {}, {}, {64, 32}},
            {"float", "float", "float", "Scalar", "Scalar", "float"});
  CHECK(c.bytes == 57472);
  // A bias that does not broadcast to [64,32].
  CHECK(unknown("aten::addmm", {{33}, {64, 128}, {128, 32}, {}, {}}, types));
}

TEST_CASE("op cost: bmm and baddbmm", "[op_cost]") {
  // [4,16,32] @ [4,32,8] bf16: 2 * 4 * 16 * 8 * 32 = 32,768 FLOPs;
  // (2048 + 1024 + 512) * 2 = 7,168 bytes.
  OpCost c = known("aten::bmm", {{4, 16, 32}, {4, 32, 8}}, {"c10::BFloat16", "c10::BFloat16"});
  CHECK(c.flops == 32768);
  CHECK(c.bytes == 7168);
  // baddbmm: [4,16,8] + the same product, float: 32,768 FLOPs;
  // (512 + 2048 + 1024 + 512) * 4 = 16,384 bytes.
  c = known("aten::baddbmm", {{4, 16, 8}, {4, 16, 32}, {4, 32, 8}, {}, {}},
            {"float", "float", "float", "Scalar", "Scalar"});
  CHECK(c.flops == 32768);
  CHECK(c.bytes == 16384);
  CHECK(unknown("aten::bmm", {{4, 16, 32}, {3, 32, 8}}, {"float", "float"}));  // batch 4 vs 3
}

TEST_CASE("op cost: matmul broadcasts batch dimensions and handles 1-D operands", "[op_cost]") {
  const Strings ff = {"float", "float"};
  // [2,1,3,4] @ [5,4,6] -> [2,5,3,6]: 2 * (2*5) * 3 * 6 * 4 = 1,440 FLOPs;
  // (24 + 120 + 180) * 4 = 1,296 bytes.
  OpCost c = known("aten::matmul", {{2, 1, 3, 4}, {5, 4, 6}}, ff);
  CHECK(c.flops == 1440);
  CHECK(c.bytes == 1296);
  // [4] @ [3,4,6] -> [3,6]: 2 * 3 * 1 * 6 * 4 = 144; (4 + 72 + 18) * 4 = 376.
  c = known("aten::matmul", {{4}, {3, 4, 6}}, ff);
  CHECK(c.flops == 144);
  CHECK(c.bytes == 376);
  // [3,4] @ [4] -> [3] (matrix-vector): 2 * 3 * 4 = 24; (12 + 4 + 3) * 4 = 76.
  // FlopCounterMode counts 0 here: it has no formula for aten::mv.
  c = known("aten::matmul", {{3, 4}, {4}}, ff);
  CHECK(c.flops == 24);
  CHECK(c.bytes == 76);
  // [4] @ [4] -> scalar: 2 * 4 = 8; (4 + 4 + 1) * 4 = 36.
  c = known("aten::matmul", {{4}, {4}}, ff);
  CHECK(c.flops == 8);
  CHECK(c.bytes == 36);
  CHECK(unknown("aten::matmul", {{2, 3, 4}, {5, 4, 6}}, ff));  // batch 2 vs 5
  CHECK(unknown("aten::matmul", {{3, 4}, {5, 6}}, ff));        // k 4 vs 5
  // An old profiler's record (a100-sendrecv-rank0) with six entries for two
  // arguments: not guessed.
  CHECK(unknown("aten::matmul",
                {{2048, 1120}, {1120, 256}, {1120}, {2048, 2400}, {256, 2048}, {2048, 2400}},
                Strings(6, "float")));
}

TEST_CASE("op cost: linear with and without bias (weight is [out, in])", "[op_cost]") {
  // [8,16,64] x W[32,64]^T: 2 * (8*16) * 32 * 64 = 524,288 FLOPs; bf16 bytes
  // (8192 input + 2048 weight + 32 bias + 4096 output) * 2 = 28,736.
  OpCost c = known("aten::linear", {{8, 16, 64}, {32, 64}, {32}},
                   {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16"});
  CHECK(c.flops == 524288);
  CHECK(c.bytes == 28736);
  // No bias: recorded as [] with type "" (torch 2.9.1); (8192 + 2048 + 4096) * 2.
  c = known("aten::linear", {{8, 16, 64}, {32, 64}, {}}, {"c10::BFloat16", "c10::BFloat16", ""});
  CHECK(c.flops == 524288);
  CHECK(c.bytes == 28672);
  const Strings f3 = {"float", "float", "float"};
  CHECK(unknown("aten::linear", {{8, 64}, {32, 63}, {32}}, f3));  // in 64 vs 63
  CHECK(unknown("aten::linear", {{8, 64}, {32, 64}, {31}}, f3));  // bias 31 vs out 32
  // a100-sendrecv-rank0: linear [2048,6948] x W[256,6948]^T + b[256] and
  // the addmm it runs have the same 7,285,506,048 FLOPs (nested: count once).
  CHECK(known("aten::linear", {{2048, 6948}, {256, 6948}, {256}}, f3).flops == 7285506048ull);
  // a100-sendrecv-rank0's four-entry record: input [2048,3906] does not meet
  // weight [2048,512]; not read as an out= form.
  CHECK(unknown("aten::linear", {{2048, 3906}, {2048, 512}, {2494, 512}, {2494}},
                Strings(4, "float")));
}

namespace {

const Strings kBf16x3 = {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16"};

// _scaled_dot_product_flash_attention(query, key, value, dropout_p,
// is_causal, return_debug_mask, *, scale) as recorded.
OpCost flash_forward(const std::string& is_causal) {
  return known(
      "aten::_scaled_dot_product_flash_attention",
      {{2, 4, 128, 64}, {2, 4, 256, 64}, {2, 4, 256, 64}, {}, {}, {}, {}},
      {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar", "Scalar", ""},
      {"", "", "", "0.", is_causal, "False", ""});
}

}  // namespace

TEST_CASE("op cost: SDPA flash forward and backward (B=2, H=4, L=128, S=256, E=Ev=64)",
          "[op_cost]") {
  // Forward, flop_counter.py sdpa_flop_count: 2BHLSE + 2BHLSEv
  //   = 2 * 2*4 * 128 * 256 * (64 + 64) = 67,108,864.
  // Bytes, bf16: q 65,536 + k 131,072 + v 131,072 + output 65,536 elements
  //   = 393,216 * 2 = 786,432.
  OpCost c = flash_forward("False");
  CHECK(std::string(c.op_type) == "attention");
  CHECK(c.flops == 67108864);
  CHECK(c.bytes == 786432);
  // Causal: the same (flop_counter.py does not halve for a causal mask).
  CHECK(flash_forward("True").flops == 67108864);

  // Backward (grad_out, query, key, value, out, logsumexp, cum_seq_q,
  // cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
  // philox_offset, *, scale); sdpa_backward_flop_count: 2BHLS (3E + 2Ev)
  //   = 2 * 8 * 128 * 256 * 320 = 167,772,160 (2.5x the forward).
  // Bytes: read grad_out, q, k, v, out (458,752 bf16 = 917,504), logsumexp
  // [2,4,128] float (4,096), two int64 seeds (16); write dq, dk, dv
  // (327,680 bf16 = 655,360): 1,576,976.
  const Dims bwd_dims = {{2, 4, 128, 64},
                         {2, 4, 128, 64},
                         {2, 4, 256, 64},
                         {2, 4, 256, 64},
                         {2, 4, 128, 64},
                         {2, 4, 128},
                         {},
                         {},
                         {},
                         {},
                         {},
                         {},
                         {},
                         {},
                         {}};
  Strings bwd_types = {"c10::BFloat16",
                       "c10::BFloat16",
                       "c10::BFloat16",
                       "c10::BFloat16",
                       "c10::BFloat16",
                       "float",
                       "",
                       "",
                       "Scalar",
                       "Scalar",
                       "Scalar",
                       "Scalar",
                       "long int",
                       "long int",
                       ""};
  c = known("aten::_scaled_dot_product_flash_attention_backward", bwd_dims, bwd_types);
  CHECK(c.flops == 167772160);
  CHECK(c.bytes == 1576976);
  // grad_out of the wrong length (L 64, not 128).
  Dims bad = bwd_dims;
  bad[0] = {2, 4, 64, 64};
  CHECK(unknown("aten::_scaled_dot_product_flash_attention_backward", bad, bwd_types));
  // Variable-length (cum_seq_q given): the lengths are not in the shapes.
  Dims varlen = bwd_dims;
  varlen[6] = {3};
  bwd_types[6] = "int";
  CHECK(unknown("aten::_scaled_dot_product_flash_attention_backward", varlen, bwd_types));
}

TEST_CASE("op cost: SDPA efficient and cudnn (Ev != E) and math attention", "[op_cost]") {
  // q [1,2,16,8], k [1,2,32,8], v [1,2,32,4], float.
  // Forward: 2 * 1*2 * 16 * 32 * (8 + 4) = 24,576 FLOPs;
  // bytes (256 + 512 + 256 + output 128) * 4 = 4,608.
  const Dims fwd = {{1, 2, 16, 8}, {1, 2, 32, 8}, {1, 2, 32, 4}, {}, {}, {}, {}, {}};
  const Strings fwd_types = {"float", "float", "float", "", "Scalar", "Scalar", "Scalar", ""};
  OpCost c = known("aten::_scaled_dot_product_efficient_attention", fwd, fwd_types);
  CHECK(c.flops == 24576);
  CHECK(c.bytes == 4608);
  c = known("aten::_scaled_dot_product_cudnn_attention",
            {{1, 2, 16, 8}, {1, 2, 32, 8}, {1, 2, 32, 4}, {}, {}, {}, {}, {}, {}},
            {"float", "float", "float", "", "Scalar", "Scalar", "Scalar", "Scalar", ""});
  CHECK(c.flops == 24576);
  // Backward (grad_out_, query, key, value, attn_bias, out, logsumexp,
  // philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, scale):
  // 2 * 2 * 16 * 32 * (3*8 + 2*4) = 65,536 FLOPs. Bytes: read grad_out 128,
  // q 256, k 512, v 256, out 128 floats (5,120), logsumexp [1,2,32] (256),
  // seeds (16); write dq, dk, dv 1,024 floats (4,096): 9,488.
  c = known("aten::_scaled_dot_product_efficient_attention_backward",
            {{1, 2, 16, 4},
             {1, 2, 16, 8},
             {1, 2, 32, 8},
             {1, 2, 32, 4},
             {},
             {1, 2, 16, 4},
             {1, 2, 32},
             {},
             {},
             {},
             {},
             {},
             {}},
            {"float", "float", "float", "float", "", "float", "float", "long int", "long int",
             "Scalar", "ScalarList", "Scalar", ""});
  CHECK(c.flops == 65536);
  CHECK(c.bytes == 9488);
  // Grouped K/V heads (k, v with 1 head for q's 2): flop_counter.py asserts
  // equal heads; unknown here.
  CHECK(unknown("aten::_scaled_dot_product_efficient_attention",
                {{1, 2, 16, 8}, {1, 1, 32, 8}, {1, 1, 32, 4}, {}, {}, {}, {}, {}}, fwd_types));

  // Math (query, key, value, attn_mask, dropout_p, is_causal, dropout_mask,
  // *, scale, enable_gqa) as torch 2.9.1 records it: the same 24,576 FLOPs
  // (FlopCounterMode counts them in the bmm calls it decomposes into); it
  // also returns the attention weights [1,2,16,32]: bytes 4,096 inputs +
  // 512 output + 4,096 weights = 8,704.
  c = known("aten::_scaled_dot_product_attention_math",
            {{1, 2, 16, 8}, {1, 2, 32, 8}, {1, 2, 32, 4}, {}, {}, {}, {}, {}, {}},
            {"float", "float", "float", "", "Scalar", "Scalar", "", "", "Scalar"},
            {"", "", "", "", "0.", "True", "", "", "False"});
  CHECK(c.flops == 24576);
  CHECK(c.bytes == 8704);
}

TEST_CASE("op cost: _flash / _efficient attention kernels take [B, L, H, E]", "[op_cost]") {
  // _flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q,
  // max_k, dropout_p, is_causal, return_debug_mask, *, scale,
  // window_size_left, window_size_right, seqused_k, alibi_slopes) with
  // q [2,128,4,64], k, v [2,256,4,64]: the SDPA flash case above, same
  // 67,108,864 FLOPs and 786,432 bytes. (flop_counter.py passes these shapes
  // to sdpa_flop_count as [b, h, s, d] and asserts, 128 heads != 256.)
  const Strings fwd_types = {"c10::BFloat16",
                             "c10::BFloat16",
                             "c10::BFloat16",
                             "",
                             "",
                             "Scalar",
                             "Scalar",
                             "Scalar",
                             "Scalar",
                             "Scalar",
                             "",
                             "",
                             "",
                             "",
                             ""};
  OpCost c = known("aten::_flash_attention_forward",
                   {{2, 128, 4, 64},
                    {2, 256, 4, 64},
                    {2, 256, 4, 64},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {},
                    {}},
                   fwd_types);
  CHECK(c.flops == 67108864);
  CHECK(c.bytes == 786432);
  // L = S = 128: 2 * 2*4 * 128 * 128 * 128 = 33,554,432 (flop_counter.py,
  // reading H=4 as the sequence, counts 1,048,576).
  c = known("aten::_flash_attention_forward",
            {{2, 128, 4, 64},
             {2, 128, 4, 64},
             {2, 128, 4, 64},
             {},
             {},
             {},
             {},
             {},
             {},
             {},
             {},
             {},
             {},
             {},
             {}},
            fwd_types);
  CHECK(c.flops == 33554432);
  // _flash_attention_backward(grad_out, query, key, value, out, logsumexp,
  // cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, rng_state,
  // unused, ...): the SDPA flash backward above (rng_state [2] int64 = 16
  // bytes, unused [0]): 167,772,160 FLOPs, 1,576,976 bytes.
  c = known(
      "aten::_flash_attention_backward",
      {{2, 128, 4, 64},
       {2, 128, 4, 64},
       {2, 256, 4, 64},
       {2, 256, 4, 64},
       {2, 128, 4, 64},
       {2, 4, 128},
       {},
       {},
       {},
       {},
       {},
       {},
       {2},
       {0},
       {},
       {},
       {}},
      {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float",
       "", "", "Scalar", "Scalar", "Scalar", "Scalar", "long int", "long int", "", "", ""});
  CHECK(c.flops == 167772160);
  CHECK(c.bytes == 1576976);
  // _efficient_attention_forward(query, key, value, bias, cu_seqlens_q,
  // cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, custom_mask_type,
  // compute_log_sumexp, *, scale, seqlen_k, window_size): the efficient case
  // above in [B, L, H, E]: 24,576 FLOPs, 4,608 bytes.
  Dims eff = {
      {1, 16, 2, 8}, {1, 32, 2, 8}, {1, 32, 2, 4}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  Strings eff_types = {"float",  "float",  "float",  "",       "", "", "Scalar",
                       "Scalar", "Scalar", "Scalar", "Scalar", "", "", ""};
  c = known("aten::_efficient_attention_forward", eff, eff_types);
  CHECK(c.flops == 24576);
  CHECK(c.bytes == 4608);
  // _efficient_attention_backward(grad_out_, query, key, value, bias, out,
  // cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, logsumexp,
  // dropout_p, philox_seed, philox_offset, custom_mask_type,
  // bias_requires_grad, *, scale, num_splits_key, window_size,
  // shared_storage_dqdkdv): 65,536 FLOPs, 9,488 bytes as above.
  c = known(
      "aten::_efficient_attention_backward",
      {{1, 16, 2, 4},
       {1, 16, 2, 8},
       {1, 32, 2, 8},
       {1, 32, 2, 4},
       {},
       {1, 16, 2, 4},
       {},
       {},
       {},
       {},
       {1, 2, 32},
       {},
       {},
       {},
       {},
       {},
       {},
       {},
       {},
       {}},
      {"float", "float",  "float",    "float",    "",       "float",  "", "", "Scalar", "Scalar",
       "float", "Scalar", "long int", "long int", "Scalar", "Scalar", "", "", "",       "Scalar"});
  CHECK(c.flops == 65536);
  CHECK(c.bytes == 9488);
  // Packed variable-length sequences (cu_seqlens_q [3]): unknown.
  eff[4] = {3};
  eff_types[4] = "int";
  eff[5] = {3};
  eff_types[5] = "int";
  CHECK(unknown("aten::_efficient_attention_forward", eff, eff_types));
}

namespace {

// aten::convolution(input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups) as torch 2.9.1 records Conv2d(4, 6, 3,
// stride=2, padding=1, groups=2) on a [2,4,9,9] input.
const Dims kConvDims = {{2, 4, 9, 9}, {6, 2, 3, 3}, {6}, {}, {}, {}, {}, {}, {}};
const Strings kConvTypes = {"float",      "float",  "float",      "ScalarList", "ScalarList",
                            "ScalarList", "Scalar", "ScalarList", "Scalar"};

}  // namespace

TEST_CASE("op cost: 2-D convolution with groups and stride, transposed too", "[op_cost]") {
  // Output [2,6,5,5]: (9 + 2*1 - (3-1) - 1) / 2 + 1 = 5. flop_counter.py
  // conv_flop_count: 2 * N * Cout * prod(out) * Cin/groups * prod(kernel)
  //   = 2 * 2 * 6 * 25 * 2 * 9 = 10,800.
  // Bytes: (648 input + 108 weight + 6 bias + 300 output) * 4 = 4,248.
  const Strings concrete = {"", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "2"};
  OpCost c = known("aten::convolution", kConvDims, kConvTypes, concrete);
  CHECK(c.flops == 10800);
  CHECK(c.bytes == 4248);
  CHECK(c.op_type == nullptr);  // no graph op type models a convolution
  // aten::_convolution: the same nine plus benchmark, deterministic,
  // cudnn_enabled, allow_tf32.
  Dims dims13 = kConvDims;
  Strings types13 = kConvTypes, concrete13 = concrete;
  for (const char* flag : {"False", "False", "True", "True"}) {
    dims13.push_back({});
    types13.push_back("Scalar");
    concrete13.push_back(flag);
  }
  c = known("aten::_convolution", dims13, types13, concrete13);
  CHECK(c.flops == 10800);
  CHECK(c.bytes == 4248);
  // aten::cudnn_convolution(self, weight, padding, stride, dilation, groups,
  // benchmark, deterministic, allow_tf32): no bias, padding before stride.
  // 10,800 FLOPs; (648 + 108 + 300) * 4 = 4,224 bytes. (flop_counter.py
  // reads it with convolution's positions, so benchmark=True would count it
  // as transposed: 34,992.)
  c = known("aten::cudnn_convolution", {{2, 4, 9, 9}, {6, 2, 3, 3}, {}, {}, {}, {}, {}, {}, {}},
            {"float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar",
             "Scalar", "Scalar"},
            {"", "", "[1, 1]", "[2, 2]", "[1, 1]", "2", "True", "False", "True"});
  CHECK(c.flops == 10800);
  CHECK(c.bytes == 4224);

  // ConvTranspose2d(4, 6, 3, stride=2, groups=2): weight [Cin=4, Cout/g=3,
  // 3, 3], output [2,6,19,19]: (9-1)*2 + (3-1) + 1 = 19. conv_flop_count
  // (transposed): 2 * N * prod(input spatial) * prod(kernel) * w[0] * w[1]
  //   = 2 * 2 * 81 * 9 * 4 * 3 = 34,992.
  // Bytes: (648 + 108 + 6 + 4,332) * 4 = 20,376.
  c = known("aten::convolution", {{2, 4, 9, 9}, {4, 3, 3, 3}, {6}, {}, {}, {}, {}, {}, {}},
            kConvTypes, {"", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "2"});
  CHECK(c.flops == 34992);
  CHECK(c.bytes == 20376);

  // Without "Concrete Inputs" the stride is unknown, so is the output.
  CHECK(unknown("aten::convolution", kConvDims, kConvTypes));
  // groups=3 does not fit 4 input channels over weight's 2 per group.
  CHECK(unknown("aten::convolution", kConvDims, kConvTypes,
                {"", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "3"}));
  // A kernel larger than the padded input.
  CHECK(unknown("aten::convolution", {{2, 4, 2, 2}, {6, 2, 5, 5}, {6}, {}, {}, {}, {}, {}, {}},
                kConvTypes, {"", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "2"}));
}

TEST_CASE("op cost: convolution_backward follows flop_counter.py term by term", "[op_cost]") {
  // The Conv2d above: grad_output [2,6,5,5], input [2,4,9,9], weight
  // [6,2,3,3]; (grad_output, input, weight, bias_sizes, stride, padding,
  // dilation, transposed, output_padding, groups, output_mask).
  const Dims dims = {{2, 6, 5, 5}, {2, 4, 9, 9}, {6, 2, 3, 3}, {}, {}, {}, {}, {}, {}, {}, {}};
  const Strings types = {"float",      "float",      "float",      "ScalarList",
                         "ScalarList", "ScalarList", "ScalarList", "Scalar",
                         "ScalarList", "Scalar",     "ScalarList"};
  auto concrete = [](const std::string& transposed, const std::string& padding,
                     const std::string& mask) {
    return Strings{"", "", "", "[6]", "[2, 2]", padding, "[1, 1]", transposed, "[0, 0]", "2", mask};
  };
  // grad_input = conv_flop_count(grad_out, w, x, transposed=True)
  //   = 2 * 2 * 25 (grad_out spatial) * 9 * 6 * 2 = 10,800 (the forward's);
  // grad_weight = conv_flop_count(t(x), t(grad_out), t(w)): batch Cin=4,
  //   conv_shape = kernel 9, c_out * c_in = 6 * 2 (grad_out's C, N),
  //   filter = 25: 2 * 4 * 9 * 6 * 2 * 25 = 21,600 (groups=2 times the
  //   forward: flop_counter.py uses the full input channels);
  // total 32,400. Bytes: read 300 + 648 + 108, write grad_input 648,
  // grad_weight 108, grad_bias 6: 1,818 * 4 = 7,272.
  OpCost c = known("aten::convolution_backward", dims, types,
                   concrete("False", "[1, 1]", "[True, True, True]"));
  CHECK(c.flops == 32400);
  CHECK(c.bytes == 7272);
  // The first layer (no grad_input): 21,600 FLOPs; (1,056 + 114) * 4 = 4,680.
  c = known("aten::convolution_backward", dims, types,
            concrete("False", "[1, 1]", "[False, True, True]"));
  CHECK(c.flops == 21600);
  CHECK(c.bytes == 4680);
  // The transposed conv above: grad_output [2,6,19,19]. grad_input =
  // conv_flop_count(grad_out, w, x, transposed=False): 2 * 2 * 81 * 9 * 4 *
  // 3 = 34,992; grad_weight = conv_flop_count(t(grad_out), t(x), t(w)):
  // 2 * 6 * 9 * 4 * 2 * 81 = 69,984; total 104,976. Bytes: read 4,332 + 648
  // + 108, write 648 + 108 + 6: 5,850 * 4 = 23,400.
  Dims tdims = dims;
  tdims[0] = {2, 6, 19, 19};
  tdims[2] = {4, 3, 3, 3};
  c = known("aten::convolution_backward", tdims, types,
            concrete("True", "[0, 0]", "[True, True, True]"));
  CHECK(c.flops == 104976);
  CHECK(c.bytes == 23400);
  // grad_output that the forward could not have produced ([2,6,4,4]).
  Dims bad = dims;
  bad[0] = {2, 6, 4, 4};
  CHECK(unknown("aten::convolution_backward", bad, types,
                concrete("False", "[1, 1]", "[True, True, True]")));
  // No output_mask recorded: which gradients were computed is unknown.
  CHECK(unknown("aten::convolution_backward", dims, types));
}

TEST_CASE("op cost: unknown ops and inputs that do not fit are unknown, never guessed",
          "[op_cost]") {
  const Strings ff = {"float", "float"};
  CHECK(unknown("aten::relu", {{4, 4}}, {"float"}));
  CHECK(unknown("mm", {{2, 3}, {3, 4}}, ff));                     // not an aten:: name
  CHECK(unknown("aten::mm", {{64, 128}, {127, 32}}, ff));         // inner dims 128 vs 127
  CHECK(unknown("aten::mm", {{4, 64, 128}, {128, 32}}, ff));      // 3-D
  CHECK(unknown("aten::mm", {{64, 128}, {128, 32}}, {"float"}));  // one type for two inputs
  CHECK(unknown("aten::mm", {{64, 128}, {128, 32}, {32, 64}}, {"float", "float", "float"}));
  CHECK(unknown("aten::mm", {{64, 128}, {128, 32}}, {"float", "c10::qint8"}));  // unknown size
  CHECK(unknown("aten::mm", {{-1, 128}, {128, 32}}, ff));                       // negative dim
  CHECK(unknown("aten::mm", {{64, 128}, {128, 32}}, ff, {"", "", ""}));         // concrete: 3 for 2
  // 2^40 x 2^40 x 2^40 multiply-adds overflow 64 bits.
  const int64_t big = int64_t{1} << 40;
  CHECK(unknown("aten::mm", {{big, big}, {big, big}}, ff));
  // Zero-size operands are known: nothing to compute, nothing to move.
  const OpCost c = known("aten::mm", {{0, 128}, {128, 32}}, ff);
  CHECK(c.flops == 0);
  CHECK(c.bytes == 128 * 32 * 4);
}
