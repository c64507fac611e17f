// Reading a Hugging Face config.json: HfConfigReader, used by every family's
// reader (plan/models_<family>.cpp), and the helpers they share.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace shardscope::plan {

// Each family's reader, <family>_config_from_hf(config.json contents, source)
// (plan/models_<family>.h), names `source` (the file) in its errors: a missing
// or mistyped required key, a value out of range, or a feature that would
// change the math and is not modeled.

// Typed access to a config.json object; errors name the key and the file.
// Unknown extra keys are fine (HF configs carry many). get_int and
// require_int refuse a size key above its limit (plan/model_limits.h),
// naming the key, the value and the limit.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& config, std::string source);

  bool has(const char* key) const;  // present and not null
  int64_t require_int(const char* key, int64_t min_value = 1) const;
  int64_t get_int(const char* key, int64_t fallback, int64_t min_value = 1) const;
  double get_double(const char* key, double fallback) const;  // must be > 0
  bool get_bool(const char* key, bool fallback) const;
  std::string get_string(const char* key, const std::string& fallback) const;
  const nlohmann::json* get(const char* key) const;  // nullptr when absent or null
  [[noreturn]] void fail(const char* key, const std::string& what) const;
  // The divisibility check of every family's reader: unless `divisor` (>= 1,
  // as read) divides `dividend`, fails naming `divisor_key`:
  // "<dividend_key> <dividend> <relation> <divisor_key> <divisor><note>".
  void check_divisible(const char* dividend_key, int64_t dividend, const char* divisor_key,
                       int64_t divisor, const char* relation = "is not divisible by",
                       const char* note = "") const;
  // Attention shape checks of the Llama-like readers (check_divisible): fail naming
  // num_key_value_heads unless it divides num_attention_heads; with no
  // head_dim (0: derived), fail naming num_attention_heads unless it divides
  // hidden_size.
  void check_kv_heads(int64_t heads, int64_t kv_heads) const;
  // With a head_dim (> 0) it also checks num_attention_heads x head_dim.
  void check_derived_head_dim(int64_t hidden, int64_t heads, int64_t head_dim) const;
  // Fails naming head_dim when num_attention_heads x head_dim exceeds
  // kMaxAttentionWidth (plan/model_limits.h).
  void check_attention_width(int64_t heads, int64_t head_dim) const;

 private:
  const nlohmann::json& config_;
  std::string source_;
};

// The gated MLP activation of a Hugging Face `hidden_act`: "silu", "gelu" or
// "gelu_tanh" (from gelu_pytorch_tanh). Anything else throws Error
// "<family> config for '<name>': unsupported hidden_act '<value>'".
std::string gated_activation(const std::string& hidden_act, const char* family,
                             const std::string& name);

}  // namespace shardscope::plan
