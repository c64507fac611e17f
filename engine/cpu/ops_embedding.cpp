// Embedding gather (forward) and scatter-add (backward).
#include <string>

#include "engine/cpu/check.h"
#include "engine/cpu/ops.h"

namespace shardscope::engine::cpu {

using detail::require;
using detail::require_index;
using detail::require_nonneg;
using detail::require_ptr;

namespace {

void check_embedding(const char* fn, const int64_t* ids, int64_t n, int64_t rows, int64_t dim) {
  require_nonneg(fn, "n", n);
  require_nonneg(fn, "rows", rows);
  require_nonneg(fn, "dim", dim);
  if (ids == nullptr) {
    // Positions mode: row i for i < n.
    if (n > rows)
      throw std::out_of_range(std::string(fn) + ": position " + std::to_string(n - 1) +
                              " is outside [0, " + std::to_string(rows) + ") (sequence of " +
                              std::to_string(n) + " positions)");
    return;
  }
  for (int64_t i = 0; i < n; ++i) require_index(fn, "id", ids[i], i, rows);
}

}  // namespace

void embedding_forward(const int64_t* ids, const float* table, float* out, int64_t n, int64_t rows,
                       int64_t dim) {
  const char* fn = "embedding_forward";
  check_embedding(fn, ids, n, rows, dim);
  require_ptr(fn, "table", table, n * dim);
  require_ptr(fn, "out", out, n * dim);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = table + (ids != nullptr ? ids[i] : i) * dim;
    float* dst = out + i * dim;
    for (int64_t c = 0; c < dim; ++c) dst[c] = src[c];
  }
}

void embedding_backward(const int64_t* ids, const float* dout, float* dtable, int64_t n,
                        int64_t rows, int64_t dim, int64_t padding_idx) {
  const char* fn = "embedding_backward";
  check_embedding(fn, ids, n, rows, dim);
  require_ptr(fn, "dout", dout, n * dim);
  require_ptr(fn, "dtable", dtable, n * dim);
  require(padding_idx >= -1 && padding_idx < rows, fn,
          "padding_idx " + std::to_string(padding_idx) + " is not -1 or a row of " +
              std::to_string(rows));
  // Rows are added in order of i: a repeated id sums its rows in a fixed order.
  for (int64_t i = 0; i < n; ++i) {
    if (ids != nullptr && ids[i] == padding_idx) continue;
    float* dst = dtable + (ids != nullptr ? ids[i] : i) * dim;
    const float* src = dout + i * dim;
    for (int64_t c = 0; c < dim; ++c) dst[c] += src[c];
  }
}

}  // namespace shardscope::engine::cpu
