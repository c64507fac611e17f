// PyTorch's NVTX ranges (torch.autograd.profiler.emit_nvtx), parsed, and the
// compute dtype a kernel's name states.
//
// With emit_nvtx(record_shapes=True) PyTorch pushes one NVTX range per
// RecordFunction (aten ops, autograd nodes, record_function scopes) on the
// thread that runs it, named by getNvtxStr (torch/csrc/profiler/util.cpp,
// with the observer in torch/csrc/profiler/standalone/nvtx_observer.cpp):
//
//   NAME[, seq = SEQ][, op_id = ID][, sizes = SHAPES][, input_op_ids = IDS]
//
//   NAME    fn.name(): "aten::mm", "MmBackward0", "FSDP::all_gather", ...
//   SEQ     the autograd sequence number (>= 0), present when the op ran
//           under grad mode through an autograd kernel; a backward node
//           (MmBackward0) carries its forward op's number
//   ID      the RecordFunction handle (> 0; emit_nvtx always asks for ids)
//   SHAPES  shapesToStr(inputSizes(fn, flatten_list_enabled=true)): one
//           "[d0, d1, ...]" per input, "[]" for scalars, None and empty
//           lists; a tensor-list input is flattened into one entry per
//           defined tensor. Present only with record_shapes and when the
//           RecordFunction has inputs.
//   IDS     "[(op_id,output_nr), ...]", the producers of the inputs
//
// Ranges of other code (a program's own nvtx.range_push) have no op_id
// field: they are not PyTorch's and parse as not_torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/trace.h"

namespace shardscope::traces {

struct TorchNvtxRange {
  std::string name;  // "aten::mm"
  int64_t seq = -1;  // -1: no ", seq = " field
  int64_t op_id = 0;
  bool has_sizes = false;                   // a ", sizes = " field was present
  std::vector<std::vector<int64_t>> sizes;  // one entry per (flattened) input
};

enum class TorchNvtxParse {
  ok,         // *out holds the range
  not_torch,  // no ", op_id = " field: another program's range
  malformed,  // looks like PyTorch's but does not parse; *why says where
};

// Limits on what parses (malformed beyond them, with the limit in *why): a
// range name of at most 1 MiB, at most 65536 inputs, at most 64 dimensions
// per input (PyTorch's own limit is lower), every dimension, seq and op_id a
// decimal integer in [0, 2^62] (larger values are refused, never wrapped).
constexpr size_t kTorchNvtxMaxBytes = size_t{1} << 20;
constexpr size_t kTorchNvtxMaxInputs = 65536;
constexpr size_t kTorchNvtxMaxDims = 64;
constexpr int64_t kTorchNvtxMaxValue = int64_t{1} << 62;

TorchNvtxParse parse_torch_nvtx(std::string_view text, TorchNvtxRange* out,
                                std::string* why = nullptr);

// An autograd node's range: a name ending in "Backward" and digits
// ("MmBackward0", "ScaledDotProductFlashAttentionBackward0").
bool is_backward_node_name(std::string_view name);

// The input dtype a kernel's name states, as cuBLAS, CUTLASS, FlashAttention
// and PyTorch's templates spell it: bf16 ("bf16", "bfloat16"), fp16 ("fp16",
// "f16" not after 'b', "half", "hgemm"), else fp32 ("f32", "fp32", "tf32",
// "sgemm", "float"); 16-bit names win over fp32 ones (accumulators are fp32
// in bf16 and fp16 kernels). unknown when it names none, both 16-bit types,
// or an 8-bit float ("fp8", "e4m3", "e5m2"), and for names that encode types
// in other ways: cuBLAS's "nvjet_*" kernels (PyTorch 2.11's bf16 GEMMs on
// the H200: "nvjet_sm90_tst_..."), and cuDNN's, whose "f16" stands for
// either 16-bit type. Never a guess.
enum class KernelDtype { unknown, fp32, bf16, fp16 };
KernelDtype kernel_dtype(std::string_view kernel_name);
const char* kernel_dtype_name(KernelDtype dtype);  // "unknown", "fp32", "bf16", "fp16"
// The profiler "Input type" op_cost reads for the dtype: "float",
// "c10::BFloat16", "c10::Half"; "" for unknown.
const char* kernel_dtype_input_type(KernelDtype dtype);

// What a CUPTI profile (tool_versions "recorder" = "shardscope-inject
// (CUPTI)") says about its kernels' FLOPs, for `report` and `calibrate`:
// with `profile --torch-shapes`, how many compute kernels got FLOPs from
// PyTorch's NVTX ranges, by dtype, and why the others did not (the
// "torch_nvtx.*" counts profiler/cupti/torch_ops.h writes); without it, that
// its kernels carry no FLOPs and how to record them. Empty for other traces.
std::vector<std::string> torch_nvtx_notes(const Trace& trace);

// The dtype of a CUPTI profile's kernels that got FLOPs from NVTX ranges
// ("bf16", "fp16", "fp32") when their names all state the same one;
// "" otherwise, with *why saying what the names said ("" in *why: the trace
// has no such kernels, e.g. not a --torch-shapes profile).
std::string torch_nvtx_compute_dtype(const Trace& trace, std::string* why);

}  // namespace shardscope::traces
