// FLOPs and bytes of a PyTorch operator from what the profiler records with
// record_shapes=True: a cpu_op's "Input Dims" (one list per argument of the
// op's schema, in schema order; [] for scalars, lists and None), "Input type"
// ("float", "c10::BFloat16", ...; "Scalar", "ScalarList", "" for None) and,
// from PyTorch 2.x, "Concrete Inputs" (the values of scalar and list
// arguments as text: "[2, 2]", "False", "2"; "" for tensors).
//
// FLOPs are those of torch/utils/flop_counter.py (PyTorch 2.9.1, cited per
// formula in op_cost.cpp): 2 per multiply-add of the matrix products and
// convolutions, bias additions, softmax and scaling not counted, causal
// masks not halving anything. Where that file misreads an op's inputs (the
// _flash / _efficient kernels' [B, L, H, E] layout, cudnn_convolution's
// argument order) or has no formula (aten::mv, aten::dot inside matmul),
// the op's own schema and the same formula are used (op_cost.cpp says
// where). Bytes: every tensor input read once plus the
// op's result tensors written once (numel x element size; an out= argument
// counts as written, not read); auxiliary results (logsumexp, RNG state,
// debug masks) are not counted as written.
//
// Nesting: an op's cost includes the work of the ops it calls
// (aten::linear -> aten::addmm, aten::_scaled_dot_product_attention_math ->
// aten::bmm, aten::convolution -> aten::cudnn_convolution); a caller summing
// over a trace counts each piece of work once (e.g. the innermost costed op).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::traces {

struct OpCost {
  uint64_t flops = 0;  // forward or backward FLOPs of the op, as named
  uint64_t bytes = 0;  // tensor inputs read + results written
  bool known = false;  // false: op not covered, or shapes that do not fit its schema
  // The graph op type this computes, in plan's names (plan::op_type_name):
  // "linear" for the matrix-product family, "attention" for the attention
  // kernels; nullptr for convolutions (no graph op type models them).
  const char* op_type = nullptr;
};

// The cost of `op_name` ("aten::mm", ...) with its recorded inputs.
// input_types has one entry per input_dims entry; concrete_inputs is empty
// (not recorded) or has one entry per input too. Covered (forward and the
// named backward ops; anything else is unknown):
//   aten::mm, addmm, bmm, baddbmm (and their out= forms), matmul (1-D and
//   broadcast batch dims), linear (weight [out, in], bias optional);
//   aten::_scaled_dot_product_{flash,efficient,cudnn}_attention and
//   their _backward, aten::_scaled_dot_product_attention_math (q [B,H,L,E],
//   k [B,H,S,E], v [B,H,S,Ev]); aten::_flash_attention_{forward,backward},
//   aten::_efficient_attention_{forward,backward} (layout [B,L,H,E]);
//   aten::convolution, _convolution, cudnn_convolution (transposed too) and
//   convolution_backward, which need concrete_inputs (stride, padding,
//   dilation, transposed, groups, output_mask).
// known == false, never a guess, when: the op is not covered; an argument
// count, rank, dimension or dtype does not fit the schema (e.g. old
// profilers' Input Dims with extra entries); attention inputs are
// variable-length (cum_seq_q / cu_seqlens given: the per-sequence lengths
// are not in the shapes) or have grouped K/V heads; a convolution's
// concrete inputs are missing; or a count overflows 64 bits.
OpCost op_cost(std::string_view op_name, const std::vector<std::vector<int64_t>>& input_dims,
               const std::vector<std::string>& input_types,
               const std::vector<std::string>& concrete_inputs = {});

// Bytes per element of a profiler "Input type" dtype string: "float" 4,
// "double" 8, "c10::Half" / "c10::BFloat16" 2, "long int" 8, "int" 4,
// "short int" 2, "signed char" / "unsigned char" / "bool" 1,
// "c10::Float8_e4m3fn" (and the other float8 types) 1,
// "c10::complex<float>" 8, ...; 0 for anything else ("Scalar",
// "ScalarList", "" = None, unknown names).
size_t dtype_size(std::string_view type);

}  // namespace shardscope::traces
