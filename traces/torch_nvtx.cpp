#include "traces/torch_nvtx.h"

#include <algorithm>
#include <cctype>

namespace shardscope::traces {

namespace {

constexpr std::string_view kSeq = ", seq = ";
constexpr std::string_view kOpId = ", op_id = ";
constexpr std::string_view kSizes = ", sizes = ";
constexpr std::string_view kInputOpIds = ", input_op_ids = ";

// A cursor over the text after the name; every reader sets why_ on failure.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  bool at_end() const { return pos_ == s_.size(); }
  size_t pos() const { return pos_; }
  const std::string& why() const { return why_; }

  bool fail(const std::string& what) {
    if (why_.empty()) why_ = what + " at byte " + std::to_string(pos_);
    return false;
  }
  bool consume(std::string_view token) {
    if (s_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  bool expect(char c, const char* what) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return fail(pos_ == s_.size() ? std::string("truncated: expected ") + what
                                  : std::string("expected ") + what);
  }
  void skip_spaces() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }

  // A decimal integer in [0, kTorchNvtxMaxValue] (a leading '-' when allowed:
  // input_op_ids' output number -1).
  bool integer(const char* what, int64_t* out, bool allow_minus_one = false) {
    bool negative = false;
    if (allow_minus_one && peek('-')) {
      negative = true;
      ++pos_;
    }
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int digit = s_[pos_] - '0';
      if (v > (kTorchNvtxMaxValue - digit) / 10) {
        pos_ = start;
        return fail(std::string(what) + " exceeds 2^62");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == start)
      return fail(pos_ == s_.size() ? std::string("truncated: expected ") + what
                                    : std::string(what) + " is not a decimal integer");
    if (negative && v != 1) return fail(std::string(what) + " is negative");
    *out = negative ? -v : v;
    return true;
  }

  // "[[d, d], [], [d]]"
  bool shapes(std::vector<std::vector<int64_t>>* out) {
    out->clear();
    if (!expect('[', "'[' opening sizes")) return false;
    skip_spaces();
    if (peek(']')) {
      ++pos_;
      return true;
    }
    for (;;) {
      if (out->size() == kTorchNvtxMaxInputs)
        return fail("more than " + std::to_string(kTorchNvtxMaxInputs) + " inputs in sizes");
      out->emplace_back();
      if (!shape(&out->back())) return false;
      skip_spaces();
      if (peek(']')) {
        ++pos_;
        return true;
      }
      if (!expect(',', "',' or ']' in sizes")) return false;
      skip_spaces();
    }
  }

  // "[(3,0), (0,-1)]"
  bool op_ids() {
    if (!expect('[', "'[' opening input_op_ids")) return false;
    skip_spaces();
    if (peek(']')) {
      ++pos_;
      return true;
    }
    for (size_t n = 0;; ++n) {
      if (n == kTorchNvtxMaxInputs)
        return fail("more than " + std::to_string(kTorchNvtxMaxInputs) + " input_op_ids");
      int64_t id = 0, output = 0;
      if (!expect('(', "'(' in input_op_ids") || !integer("an input op id", &id) ||
          !expect(',', "',' in input_op_ids") ||
          !integer("an output number", &output, /*allow_minus_one=*/true) ||
          !expect(')', "')' in input_op_ids"))
        return false;
      skip_spaces();
      if (peek(']')) {
        ++pos_;
        return true;
      }
      if (!expect(',', "',' or ']' in input_op_ids")) return false;
      skip_spaces();
    }
  }

 private:
  bool shape(std::vector<int64_t>* dims) {
    if (!expect('[', "'[' opening an input's sizes")) return false;
    skip_spaces();
    if (peek(']')) {
      ++pos_;
      return true;
    }
    for (;;) {
      if (peek('[')) return fail("sizes nested deeper than a list of lists");
      if (dims->size() == kTorchNvtxMaxDims)
        return fail("an input with more than " + std::to_string(kTorchNvtxMaxDims) + " dimensions");
      int64_t d = 0;
      if (!integer("a dimension", &d)) return false;
      dims->push_back(d);
      skip_spaces();
      if (peek(']')) {
        ++pos_;
        return true;
      }
      if (!expect(',', "',' or ']' in an input's sizes")) return false;
      skip_spaces();
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string why_;
};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

TorchNvtxParse malformed(std::string* why, const std::string& what) {
  if (why) *why = what;
  return TorchNvtxParse::malformed;
}

bool contains(std::string_view s, std::string_view token) {
  return s.find(token) != std::string_view::npos;
}

}  // namespace

TorchNvtxParse parse_torch_nvtx(std::string_view text, TorchNvtxRange* out, std::string* why) {
  const size_t op_at = text.find(kOpId);
  if (op_at == std::string_view::npos) return TorchNvtxParse::not_torch;
  if (text.size() > kTorchNvtxMaxBytes)
    return malformed(why, "range name of " + std::to_string(text.size()) +
                              " bytes, over the limit of " + std::to_string(kTorchNvtxMaxBytes));
  TorchNvtxRange r;
  std::string_view head = text.substr(0, op_at);
  const size_t seq_at = head.rfind(kSeq);
  if (seq_at != std::string_view::npos) {
    const std::string_view digits = head.substr(seq_at + kSeq.size());
    if (!all_digits(digits)) return malformed(why, "seq is not a decimal integer");
    Reader seq(digits);
    if (!seq.integer("seq", &r.seq)) return malformed(why, seq.why());
    head = head.substr(0, seq_at);
  }
  if (head.empty()) return malformed(why, "no op name before the op_id field");
  r.name = std::string(head);

  const size_t tail_at = op_at + kOpId.size();
  Reader rd(text.substr(tail_at));
  auto failed = [&]() {
    return malformed(why, rd.why() + " (of the text after \"" + std::string(kOpId.substr(2)) +
                              "\", byte " + std::to_string(tail_at) + " of the range name)");
  };
  if (!rd.integer("op_id", &r.op_id)) return failed();
  if (rd.consume(kSizes)) {
    r.has_sizes = true;
    if (!rd.shapes(&r.sizes)) return failed();
  }
  if (rd.consume(kInputOpIds) && !rd.op_ids()) return failed();
  if (!rd.at_end()) {
    rd.fail("unexpected text after the fields");
    return failed();
  }
  *out = std::move(r);
  return TorchNvtxParse::ok;
}

bool is_backward_node_name(std::string_view name) {
  size_t end = name.size();
  while (end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9') --end;
  if (end == name.size()) return false;
  constexpr std::string_view kBackward = "Backward";
  return end > kBackward.size() &&
         name.substr(end - kBackward.size(), kBackward.size()) == kBackward;
}

KernelDtype kernel_dtype(std::string_view kernel_name) {
  std::string s(kernel_name);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (contains(s, "nvjet")) return KernelDtype::unknown;  // types in another code
  if (contains(s, "fp8") || contains(s, "e4m3") || contains(s, "e5m2")) return KernelDtype::unknown;
  const bool bf16 = contains(s, "bf16") || contains(s, "bfloat16");
  bool fp16 = contains(s, "fp16") || contains(s, "half") || contains(s, "hgemm");
  // cuDNN's generated kernels say "f16" for either 16-bit type (its SDPA
  // kernels of a bf16 run are "..._wgmma_f16_knob_..."): a bare "f16" counts
  // only in other names.
  const bool bare_f16_means_fp16 = !contains(s, "cudnn");
  for (size_t at = s.find("f16"); bare_f16_means_fp16 && !fp16 && at != std::string::npos;
       at = s.find("f16", at + 1))
    if (at == 0 || s[at - 1] != 'b') fp16 = true;
  if (bf16 && fp16) return KernelDtype::unknown;
  if (bf16) return KernelDtype::bf16;
  if (fp16) return KernelDtype::fp16;
  if (contains(s, "f32") || contains(s, "tf32") || contains(s, "sgemm") || contains(s, "float"))
    return KernelDtype::fp32;
  return KernelDtype::unknown;
}

const char* kernel_dtype_name(KernelDtype dtype) {
  switch (dtype) {
    case KernelDtype::fp32:
      return "fp32";
    case KernelDtype::bf16:
      return "bf16";
    case KernelDtype::fp16:
      return "fp16";
    default:
      return "unknown";
  }
}

const char* kernel_dtype_input_type(KernelDtype dtype) {
  switch (dtype) {
    case KernelDtype::fp32:
      return "float";
    case KernelDtype::bf16:
      return "c10::BFloat16";
    case KernelDtype::fp16:
      return "c10::Half";
    default:
      return "";
  }
}

namespace {

constexpr const char* kInjectRecorder = "shardscope-inject (CUPTI)";

int64_t count(const Trace& t, const std::string& key) {
  auto it = t.meta.tool_versions.find("torch_nvtx." + key);
  if (it == t.meta.tool_versions.end()) return 0;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return 0;  // informational: a broken count reads as none
  }
}

bool is_inject_profile(const Trace& t) {
  auto it = t.meta.tool_versions.find("recorder");
  return it != t.meta.tool_versions.end() && it->second == kInjectRecorder;
}

// "bf16 10, unknown 2" over the torch_nvtx.dtype.* counts.
std::string dtype_counts(const Trace& t, int* kinds, int64_t* unknown) {
  std::string s;
  *kinds = 0;
  *unknown = 0;
  for (KernelDtype d :
       {KernelDtype::bf16, KernelDtype::fp16, KernelDtype::fp32, KernelDtype::unknown}) {
    const int64_t n = count(t, std::string("dtype.") + kernel_dtype_name(d));
    if (n == 0) continue;
    if (d == KernelDtype::unknown)
      *unknown = n;
    else
      ++*kinds;
    s += (s.empty() ? "" : ", ") + std::string(kernel_dtype_name(d)) + " " + std::to_string(n);
  }
  return s;
}

}  // namespace

std::vector<std::string> torch_nvtx_notes(const Trace& t) {
  std::vector<std::string> notes;
  if (!is_inject_profile(t)) return notes;
  if (t.meta.tool_versions.count("torch_nvtx.kernels") == 0) {
    int64_t compute = 0, with_flops = 0;
    for (const RankTrace& r : t.ranks)
      for (const Event& e : r.events)
        if (is_compute(e.category)) {
          ++compute;
          if (e.flops) ++with_flops;
        }
    if (compute > 0 && with_flops == 0)
      notes.push_back(
          "none of the " + std::to_string(compute) +
          " compute kernels carries FLOPs: this CUPTI profile was recorded without "
          "--torch-shapes, and kernel names give no sizes; for a PyTorch program, `shardscope "
          "profile --torch-shapes -- python ...` attributes kernels to PyTorch's NVTX ranges "
          "with shapes and gives them op types and FLOPs");
    return notes;
  }
  const int64_t kernels = count(t, "kernels"), with = count(t, "with_flops");
  int kinds = 0;
  int64_t unknown = 0;
  const std::string dtypes = dtype_counts(t, &kinds, &unknown);
  notes.push_back("--torch-shapes: " + std::to_string(with) + " of " + std::to_string(kernels) +
                  " compute kernels got an op type and FLOPs from PyTorch's NVTX ranges" +
                  (dtypes.empty() ? "" : " (dtype from kernel names: " + dtypes + ")"));
  struct Why {
    const char* key;
    const char* why;
  };
  static const Why kWhy[] = {
      {"flops_on_other_kernel", "ran under an op whose FLOPs are on its longest kernel"},
      {"op_not_costed",
       "ran under ops that have no FLOPs formula (element-wise, norms, copies, optimizer: "
       "memory-bound work) or whose sizes do not fit the op's schema"},
      {"outside_op_range",
       "were launched outside any PyTorch op range (a thread emit_nvtx does not cover, or "
       "before the program imported torch)"},
      {"range_without_sizes",
       "ran under op ranges without sizes (emit_nvtx without record_shapes)"},
      {"range_malformed", "ran under op ranges whose names did not parse"},
      {"graph_replay",
       "ran in CUDA graph replays (captured under other ops than the one open at replay)"},
      {"no_launch_record", "had no recorded launch (CUPTI runtime/driver record)"},
  };
  std::string why;
  for (const Why& w : kWhy) {
    const int64_t n = count(t, w.key);
    if (n > 0) why += (why.empty() ? "" : "; ") + std::to_string(n) + " " + w.why;
  }
  if (!why.empty())
    notes.push_back("--torch-shapes: " + std::to_string(kernels - with) +
                    " compute kernels have no FLOPs: " + why);
  if (unknown > 0)
    notes.push_back("--torch-shapes: " + std::to_string(unknown) +
                    " kernels with FLOPs have names that state no dtype (or two): their bytes "
                    "are unknown, and calibrate needs --dtype for such a trace");
  return notes;
}

std::string torch_nvtx_compute_dtype(const Trace& t, std::string* why) {
  if (why) why->clear();
  if (!is_inject_profile(t) || count(t, "with_flops") == 0) return "";
  int kinds = 0;
  int64_t unknown = 0;
  const std::string dtypes = dtype_counts(t, &kinds, &unknown);
  if (kinds == 1 && unknown == 0) {
    for (KernelDtype d : {KernelDtype::bf16, KernelDtype::fp16, KernelDtype::fp32})
      if (count(t, std::string("dtype.") + kernel_dtype_name(d)) > 0) return kernel_dtype_name(d);
  }
  if (why)
    *why = "its kernels with FLOPs state " +
           std::string(kinds > 1 ? "several dtypes" : "no dtype for some") + " in their names (" +
           dtypes + ")";
  return "";
}

}  // namespace shardscope::traces
