// HfConfigReader: typed access to a Hugging Face config.json for every
// family reader (plan/models_<family>.cpp), and the checks they share.
#include "plan/hf_config.h"

#include <cstdint>
#include <string>
#include <utility>

#include "plan/error.h"
#include "plan/model_limits.h"

namespace shardscope::plan {

using nlohmann::json;

HfConfigReader::HfConfigReader(const json& config, std::string source)
    : config_(config), source_(std::move(source)) {
  if (!config_.is_object()) throw Error(source_ + ": expected a JSON object (a config.json)");
}

void HfConfigReader::fail(const char* key, const std::string& what) const {
  throw Error(source_ + ": key '" + key + "': " + what);
}

void HfConfigReader::check_divisible(const char* dividend_key, int64_t dividend,
                                     const char* divisor_key, int64_t divisor, const char* relation,
                                     const char* note) const {
  if (dividend % divisor != 0)
    fail(divisor_key, std::string(dividend_key) + " " + std::to_string(dividend) + " " + relation +
                          " " + divisor_key + " " + std::to_string(divisor) + note);
}

void HfConfigReader::check_kv_heads(int64_t heads, int64_t kv_heads) const {
  check_divisible("num_attention_heads", heads, "num_key_value_heads", kv_heads,
                  "is not a multiple of");
}

void HfConfigReader::check_derived_head_dim(int64_t hidden, int64_t heads, int64_t head_dim) const {
  if (head_dim == 0)
    check_divisible("hidden_size", hidden, "num_attention_heads", heads, "is not divisible by",
                    " (and no head_dim is given)");
  if (head_dim != 0) check_attention_width(heads, head_dim);
}

void HfConfigReader::check_attention_width(int64_t heads, int64_t head_dim) const {
  // Both are at most 4096 (hf_size_limit): the product cannot overflow.
  if (heads * head_dim > kMaxAttentionWidth)
    fail("head_dim", "num_attention_heads " + std::to_string(heads) + " x head_dim " +
                         std::to_string(head_dim) + " = " + std::to_string(heads * head_dim) +
                         " exceeds the limit " + std::to_string(kMaxAttentionWidth) +
                         " (the width of q_proj's output; published models have at most 24,576)");
}

const json* HfConfigReader::get(const char* key) const {
  auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfigReader::has(const char* key) const {
  return get(key) != nullptr;
}

int64_t HfConfigReader::get_int(const char* key, int64_t fallback, int64_t min_value) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_number_integer()) fail(key, std::string("expected an integer, got ") + v->dump());
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(key, "value too large");
  const int64_t x = v->get<int64_t>();
  if (x < min_value) fail(key, "must be >= " + std::to_string(min_value) + ", got " + v->dump());
  // Checked here, as the key is read, so that no graph is built from it.
  if (const SizeLimit* limit = hf_size_limit(key); limit && x > limit->max)
    fail(key, std::to_string(x) + " exceeds the limit " + std::to_string(limit->max) + " (" +
                  limit->why + ")");
  return x;
}

int64_t HfConfigReader::require_int(const char* key, int64_t min_value) const {
  if (!has(key)) fail(key, "missing (required)");
  return get_int(key, 0, min_value);
}

double HfConfigReader::get_double(const char* key, double fallback) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_number()) fail(key, std::string("expected a number, got ") + v->dump());
  const double x = v->get<double>();
  if (!(x > 0)) fail(key, "must be > 0, got " + v->dump());
  return x;
}

bool HfConfigReader::get_bool(const char* key, bool fallback) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, std::string("expected true or false, got ") + v->dump());
  return v->get<bool>();
}

std::string HfConfigReader::get_string(const char* key, const std::string& fallback) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, std::string("expected a string, got ") + v->dump());
  return v->get<std::string>();
}

std::string gated_activation(const std::string& hidden_act, const char* family,
                             const std::string& name) {
  if (hidden_act == "silu") return "silu";
  if (hidden_act == "gelu") return "gelu";
  if (hidden_act == "gelu_pytorch_tanh") return "gelu_tanh";
  throw Error(std::string(family) + " config for '" + name + "': unsupported hidden_act '" +
              hidden_act + "'");
}

}  // namespace shardscope::plan
