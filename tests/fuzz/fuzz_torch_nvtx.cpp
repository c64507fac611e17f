// libFuzzer target: the parser of PyTorch's NVTX range names
// (traces/torch_nvtx.h) and the kernel-name dtype rule. Any input parses,
// is refused as malformed with a reason, or is not PyTorch's; what parses
// keeps the limits (inputs, dimensions, values) and, when its name holds
// none of the field markers, parses again to the same range from the
// canonical text getNvtxStr would write.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "traces/torch_nvtx.h"

using namespace shardscope::traces;

namespace {

std::string canonical(const TorchNvtxRange& r) {
  std::string s = r.name;
  if (r.seq >= 0) s += ", seq = " + std::to_string(r.seq);
  s += ", op_id = " + std::to_string(r.op_id);
  if (!r.has_sizes) return s;
  s += ", sizes = [";
  for (size_t i = 0; i < r.sizes.size(); ++i) {
    s += i ? ", [" : "[";
    for (size_t j = 0; j < r.sizes[i].size(); ++j)
      s += (j ? ", " : "") + std::to_string(r.sizes[i][j]);
    s += "]";
  }
  return s + "]";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)kernel_dtype(text);
  TorchNvtxRange r;
  std::string why;
  const TorchNvtxParse p = parse_torch_nvtx(text, &r, &why);
  if (p == TorchNvtxParse::malformed && why.empty()) std::abort();
  if (p != TorchNvtxParse::ok) return 0;
  if (r.name.empty() || r.seq < -1 || r.op_id < 0 || r.op_id > kTorchNvtxMaxValue) std::abort();
  if (r.sizes.size() > kTorchNvtxMaxInputs || (!r.has_sizes && !r.sizes.empty())) std::abort();
  for (const auto& dims : r.sizes) {
    if (dims.size() > kTorchNvtxMaxDims) std::abort();
    for (int64_t d : dims)
      if (d < 0 || d > kTorchNvtxMaxValue) std::abort();
  }
  if (r.name.find(", op_id = ") != std::string::npos ||
      r.name.find(", seq = ") != std::string::npos)
    return 0;
  TorchNvtxRange again;
  if (parse_torch_nvtx(canonical(r), &again) != TorchNvtxParse::ok) std::abort();
  if (again.name != r.name || again.seq != r.seq || again.op_id != r.op_id ||
      again.has_sizes != r.has_sizes || again.sizes != r.sizes)
    std::abort();
  return 0;
}
