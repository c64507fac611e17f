// Mean cross entropy over rows of logits [N, V] whose first `valid` columns
// are the classes (a padded vocabulary: plan/vocab_padding.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_index;
using detail::require_ptr;

namespace {

// valid < 0: all v columns. Returns the valid columns, checked in [1, v].
int64_t check_shape(const char* fn, int64_t n, int64_t v, int64_t valid) {
  require(n >= 1, fn, "n = " + std::to_string(n) + " rows: the mean needs at least one");
  require(v >= 1, fn, "v = " + std::to_string(v) + " < 1");
  if (valid < 0) return v;
  require(
      valid >= 1 && valid <= v, fn,
      "valid = " + std::to_string(valid) + " columns outside [1, v = " + std::to_string(v) + "]");
  return valid;
}

}  // namespace

double cross_entropy_forward(const float* logits, const int64_t* labels, float* log_probs,
                             int64_t n, int64_t v, int64_t valid) {
  const char* fn = "cross_entropy_forward";
  const int64_t cols = check_shape(fn, n, v, valid);
  require_ptr(fn, "logits", logits, n * v);
  require_ptr(fn, "labels", labels, n);
  require_ptr(fn, "log_probs", log_probs, n * v);
  for (int64_t i = 0; i < n; ++i) require_index(fn, "label", labels[i], i, cols);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = logits + i * v;
    float* lp = log_probs + i * v;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < cols; ++j) max_logit = std::max(max_logit, x[j]);
    double sum_exp = 0.0;
    for (int64_t j = 0; j < cols; ++j) sum_exp += std::exp(x[j] - max_logit);
    // log_softmax = x - (max + log sum exp(x - max)); a padded column has
    // probability 0 (log -inf), whatever its logit.
    const float log_norm = max_logit + static_cast<float>(std::log(sum_exp));
    for (int64_t j = 0; j < cols; ++j) lp[j] = x[j] - log_norm;
    for (int64_t j = cols; j < v; ++j) lp[j] = -std::numeric_limits<float>::infinity();
    total -= static_cast<double>(lp[labels[i]]);
  }
  return total / static_cast<double>(n);
}

void cross_entropy_backward(const float* log_probs, const int64_t* labels, float dloss,
                            float* dlogits, int64_t n, int64_t v, int64_t valid) {
  const char* fn = "cross_entropy_backward";
  const int64_t cols = check_shape(fn, n, v, valid);
  require_ptr(fn, "log_probs", log_probs, n * v);
  require_ptr(fn, "labels", labels, n);
  require_ptr(fn, "dlogits", dlogits, n * v);
  for (int64_t i = 0; i < n; ++i) require_index(fn, "label", labels[i], i, cols);
  const float g = dloss / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    const float* lp = log_probs + i * v;
    float* d = dlogits + i * v;
    // Padded columns [cols, v) get no gradient: dlogits there is unchanged.
    for (int64_t j = 0; j < cols; ++j) d[j] += g * std::exp(lp[j]);
    d[labels[i]] -= g;
  }
}

}  // namespace shardscope::engine::cpu
