// Mixture-of-experts ops (cpu::ops_moe twins): router, dispatch, combine and
// the shared expert's sigmoid gate. The per-row math is moe_math.h's (also
// compiled and tested on the host). No host synchronisation: every count the
// launches need is fixed by the plan (an expert's rows); the rows an expert
// really gets are found on the device, and a count that breaks the plan is
// reported through the op's error flag, read at the end of the step.
//
// Determinism: no floating-point atomics. Every token is routed to distinct
// experts (top-k picks distinct ones; forced routing puts a token's k slots T
// apart, on k distinct experts), so the rows of one expert belong to distinct
// tokens and the dispatch backward and the combine forward add into distinct
// token rows without atomics; experts are combined one launch after another
// in expert order, the CPU op's summation order. Row sums (dot products of
// the backward passes) are fixed-order warp reductions in fp64. The only
// atomics are the integer counts of tokens per expert.
#include <climits>
#include <string>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/element.cuh"
#include "engine/cuda/ops/moe_math.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"
#include "engine/cuda/ops/reduce.cuh"

namespace shardscope::engine::cuda {

using detail::require;
using detail::require_nonneg;
using detail::require_operand;
using detail::require_ptr;
using detail::require_workspace;

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // row reductions: one warp per row
constexpr int kScanThreads = 1024;            // dispatch: one block scans every slot

unsigned row_blocks(int64_t n) {
  const int64_t b = detail::ceil_div(n, kRowsPerBlock);
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// ---- router ---------------------------------------------------------------------------

// One thread per token. forced_ends non-null: the experts of forced routing
// (moe::forced_expert) instead of the top-k. counts non-null: += 1 per
// (token, choice) on the chosen expert.
__global__ void __launch_bounds__(kThreads)
    router_forward_kernel(const void* logits, ElemType tl, void* probs, ElemType tp,
                          int64_t* indices, void* weights, ElemType tw, int64_t n, int64_t experts,
                          int64_t k, bool normalize, const int64_t* forced_ends, int64_t seq,
                          unsigned long long* counts) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t* idx = indices + i * k;
    if (forced_ends != nullptr)
      for (int64_t j = 0; j < k; ++j)
        idx[j] = moe::forced_expert(forced_ends, experts, j * seq + i % seq);
    auto logit = [&](int64_t e) { return load_elem(logits, tl, i * experts + e); };
    auto store_prob = [&](int64_t e, float p) { store_elem(probs, tp, i * experts + e, p); };
    auto store_weight = [&](int64_t j, float w) { store_elem(weights, tw, i * k + j, w); };
    moe::router_forward_row(logit, experts, k, normalize, forced_ends == nullptr, idx, store_prob,
                            store_weight);
    if (counts != nullptr)
      for (int64_t j = 0; j < k; ++j) atomicAdd(counts + idx[j], 1ull);
  }
}

__global__ void __launch_bounds__(kThreads)
    router_backward_kernel(const void* probs, ElemType tp, const int64_t* indices,
                           const void* dweights, ElemType tdw, void* dlogits, ElemType tdl,
                           int64_t n, int64_t experts, int64_t k, bool normalize) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    auto prob = [&](int64_t e) { return load_elem(probs, tp, i * experts + e); };
    auto dweight = [&](int64_t j) { return load_elem(dweights, tdw, i * k + j); };
    auto add = [&](int64_t e, float v) {
      const int64_t at = i * experts + e;
      store_elem(dlogits, tdl, at, load_elem(dlogits, tdl, at) + v);
    };
    moe::router_backward_row(prob, indices + i * k, dweight, experts, k, normalize, add);
  }
}

// ---- dispatch -------------------------------------------------------------------------

// One block: walks the tokens*k slots in the CPU op's order
// (moe::dispatch_slot), giving the r-th slot naming `expert` row r (slots[r]
// = that slot, for r < rows), then marks rows [found, rows) as padding (-1).
// A count against the plan (found > rows; or found != rows when `exact`)
// sets *error_flag = 1 + found (saturated at INT_MAX).
__global__ void __launch_bounds__(kScanThreads)
    dispatch_slots_kernel(const int64_t* indices, int64_t* slots, int64_t tokens, int64_t seq,
                          int64_t k, int64_t expert, int64_t rows, bool exact, int* error_flag) {
  __shared__ int warp_counts[kScanThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t total = tokens * k;
  int64_t found = 0;  // same value in every thread
  for (int64_t base = 0; base < total; base += kScanThreads) {
    const int64_t q = base + threadIdx.x;
    const int64_t slot = q < total ? moe::dispatch_slot(q, seq, k) : -1;
    const bool hit = q < total && indices[slot] == expert;
    const unsigned ballot = __ballot_sync(detail::kFullMask, hit);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = 0, chunk = 0;  // hits of earlier warps, of the whole chunk
    for (int w = 0; w < kScanThreads / 32; ++w) {
      if (w < warp) before += warp_counts[w];
      chunk += warp_counts[w];
    }
    const int64_t r = found + before + __popc(ballot & ((1u << lane) - 1u));
    if (hit && r < rows) slots[r] = slot;
    found += chunk;
    __syncthreads();  // warp_counts is rewritten by the next chunk
  }
  for (int64_t r = found + threadIdx.x; r < rows; r += kScanThreads) slots[r] = -1;
  if (threadIdx.x == 0 && error_flag != nullptr && (found > rows || (exact && found != rows)))
    *error_flag = found >= INT_MAX - 1 ? INT_MAX : static_cast<int>(found + 1);
}

// xe[r, :] = x[slots[r] / k, :], zeros for padding rows.
__global__ void __launch_bounds__(kThreads)
    dispatch_rows_kernel(const void* x, ElemType tx, const int64_t* slots, void* xe, ElemType te,
                         int64_t rows, int64_t c, int64_t k) {
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < rows * c;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = at / c, col = at % c;
    const int64_t s = slots[r];
    store_elem(xe, te, at, s < 0 ? 0.0f : load_elem(x, tx, (s / k) * c + col));
  }
}

// dx[slots[r] / k, :] += dxe[r, :] (distinct tokens per row: no atomics).
__global__ void __launch_bounds__(kThreads)
    dispatch_backward_kernel(const void* dxe, ElemType te, const int64_t* slots, void* dx,
                             ElemType tx, int64_t rows, int64_t c, int64_t k) {
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < rows * c;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = at / c, col = at % c;
    const int64_t s = slots[r];
    if (s < 0) continue;
    const int64_t d = (s / k) * c + col;
    store_elem(dx, tx, d, load_elem(dx, tx, d) + load_elem(dxe, te, at));
  }
}

// ---- combine --------------------------------------------------------------------------

// One expert: acc[slots[r] / k, :] += w * y[r, :] in fp32, weighted[r, :] = the
// product (0 for padding rows), w = weights[slots[r]].
__global__ void __launch_bounds__(kThreads)
    combine_expert_kernel(const void* y, ElemType ty, const int64_t* slots, const void* weights,
                          ElemType tw, float* acc, void* weighted, ElemType tp, int64_t rows,
                          int64_t c, int64_t k) {
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < rows * c;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = at / c, col = at % c;
    const int64_t s = slots[r];
    float prod = 0.0f;
    if (s >= 0) {
      prod = moe::mul_rn(load_elem(weights, tw, s), load_elem(y, ty, at));
      acc[(s / k) * c + col] += prod;
    }
    if (weighted != nullptr) store_elem(weighted, tp, at, prod);
  }
}

// One expert, one warp per row: dy[r, :] += w * dout[token, :];
// dweights[slots[r]] += sum_i dout[token, i] * y[r, i] (fp64, fixed order).
__global__ void __launch_bounds__(kThreads)
    combine_backward_kernel(const void* y, ElemType ty, const int64_t* slots, const void* weights,
                            ElemType tw, const void* dout, ElemType to, void* dy, ElemType tdy,
                            void* dweights, ElemType tdw, int64_t rows, int64_t c, int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // whole warps leave together
  const int64_t s = slots[r];
  if (s < 0) return;
  const float w = load_elem(weights, tw, s);
  const int64_t tok = s / k;
  double dot = 0;
  for (int64_t col = lane; col < c; col += 32) {
    const float g = load_elem(dout, to, tok * c + col);
    const int64_t at = r * c + col;
    store_elem(dy, tdy, at, load_elem(dy, tdy, at) + moe::mul_rn(w, g));
    dot += moe::mul_rn(static_cast<double>(g), static_cast<double>(load_elem(y, ty, at)));
  }
  dot = detail::warp_sum(dot);
  if (lane == 0)
    store_elem(dweights, tdw, s, load_elem(dweights, tdw, s) + static_cast<float>(dot));
}

// ---- sigmoid gate ---------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    sigmoid_gate_forward_kernel(const void* g, ElemType tg, const void* x, ElemType tx, void* y,
                                ElemType ty, void* sig, ElemType ts, int64_t n, int64_t c) {
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < n * c;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = at / c;
    const float s = moe::sigmoid_of(load_elem(g, tg, i));
    if (at % c == 0) store_elem(sig, ts, i, s);
    store_elem(y, ty, at, moe::mul_rn(s, load_elem(x, tx, at)));
  }
}

// One warp per row: dx += sig * dy; dg += (sum dy * x) * sig * (1 - sig).
__global__ void __launch_bounds__(kThreads)
    sigmoid_gate_backward_kernel(const void* sig, ElemType ts, const void* x, ElemType tx,
                                 const void* dy, ElemType tdy, void* dg, ElemType tdg, void* dx,
                                 ElemType tdx, int64_t n, int64_t c) {
  const int lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const float s = load_elem(sig, ts, i);
  double dot = 0;
  for (int64_t col = lane; col < c; col += 32) {
    const int64_t at = i * c + col;
    const float d = load_elem(dy, tdy, at);
    store_elem(dx, tdx, at, load_elem(dx, tdx, at) + moe::mul_rn(s, d));
    dot += moe::mul_rn(static_cast<double>(d), static_cast<double>(load_elem(x, tx, at)));
  }
  dot = detail::warp_sum(dot);
  if (lane == 0) {
    const double grad = moe::mul_rn(moe::mul_rn(dot, static_cast<double>(s)), 1.0 - s);
    store_elem(dg, tdg, i, load_elem(dg, tdg, i) + static_cast<float>(grad));
  }
}

void require_router_shape(const char* fn, int64_t n, int64_t experts, int64_t k) {
  require_nonneg(fn, "n", n);
  require(experts >= 1 && k >= 1 && k <= experts, fn,
          "needs 1 <= k <= experts, got k = " + std::to_string(k) +
              ", experts = " + std::to_string(experts));
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------

void moe_router_forward(cudaStream_t s, ConstDevPtr logits, DevPtr probs, int64_t* indices,
                        DevPtr weights, int64_t n, int64_t experts, int64_t k, bool normalize,
                        const int64_t* forced_ends, int64_t seq, int64_t* counts) {
  const char* fn = "moe_router_forward";
  require_router_shape(fn, n, experts, k);
  const ElemType tl = require_operand(fn, "logits", logits, n * experts);
  const ElemType tp = require_operand(fn, "probs", probs, n * experts);
  const ElemType tw = require_operand(fn, "weights", weights, n * k);
  require_ptr(fn, "indices", indices, n * k);
  if (forced_ends != nullptr)
    require(seq >= 1 && n % seq == 0, fn,
            "seq = " + std::to_string(seq) + " does not divide n = " + std::to_string(n) +
                " (forced routing is per sequence)");
  if (n == 0) return;
  NvtxRange range(fn);
  router_forward_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
      logits.ptr, tl, probs.ptr, tp, indices, weights.ptr, tw, n, experts, k, normalize,
      forced_ends, seq, reinterpret_cast<unsigned long long*>(counts));
  SS_CUDA_CHECK_LAUNCH(fn);
}

void moe_router_backward(cudaStream_t s, ConstDevPtr probs, const int64_t* indices,
                         ConstDevPtr dweights, DevPtr dlogits, int64_t n, int64_t experts,
                         int64_t k, bool normalize) {
  const char* fn = "moe_router_backward";
  require_router_shape(fn, n, experts, k);
  const ElemType tp = require_operand(fn, "probs", probs, n * experts);
  const ElemType tdw = require_operand(fn, "dweights", dweights, n * k);
  const ElemType tdl = require_operand(fn, "dlogits", dlogits, n * experts);
  require_ptr(fn, "indices", indices, n * k);
  if (n == 0) return;
  NvtxRange range(fn);
  router_backward_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
      probs.ptr, tp, indices, dweights.ptr, tdw, dlogits.ptr, tdl, n, experts, k, normalize);
  SS_CUDA_CHECK_LAUNCH(fn);
}

void moe_dispatch_forward(cudaStream_t s, ConstDevPtr x, const int64_t* indices, DevPtr xe,
                          int64_t* slots, int64_t tokens, int64_t seq, int64_t c, int64_t k,
                          int64_t expert, int64_t rows, bool exact, int32_t* error_flag) {
  const char* fn = "moe_dispatch_forward";
  require_nonneg(fn, "tokens", tokens);
  require(seq >= 1 && tokens % seq == 0, fn,
          "seq = " + std::to_string(seq) + " does not divide tokens = " + std::to_string(tokens));
  require_nonneg(fn, "c", c);
  require_nonneg(fn, "rows", rows);
  require(k >= 1, fn, "k = " + std::to_string(k) + " < 1");
  require_nonneg(fn, "expert", expert);
  const ElemType tx = require_operand(fn, "x", x, tokens * c);
  const ElemType te = require_operand(fn, "xe", xe, rows * c);
  require_ptr(fn, "indices", indices, tokens * k);
  require_ptr(fn, "slots", slots, rows);
  if (tokens == 0 && rows == 0) return;
  NvtxRange range(fn);
  dispatch_slots_kernel<<<1, kScanThreads, 0, s>>>(indices, slots, tokens, seq, k, expert, rows,
                                                   exact, error_flag);
  SS_CUDA_CHECK_LAUNCH(fn);
  if (rows * c == 0) return;
  dispatch_rows_kernel<<<detail::grid_for(rows * c, kThreads), kThreads, 0, s>>>(
      x.ptr, tx, slots, xe.ptr, te, rows, c, k);
  SS_CUDA_CHECK_LAUNCH(fn);
}

void moe_dispatch_backward(cudaStream_t s, ConstDevPtr dxe, const int64_t* slots, DevPtr dx,
                           int64_t rows, int64_t c, int64_t k, int64_t tokens) {
  const char* fn = "moe_dispatch_backward";
  require_nonneg(fn, "rows", rows);
  require_nonneg(fn, "c", c);
  require_nonneg(fn, "tokens", tokens);
  require(k >= 1, fn, "k = " + std::to_string(k) + " < 1");
  const ElemType te = require_operand(fn, "dxe", dxe, rows * c);
  const ElemType tx = require_operand(fn, "dx", dx, tokens * c);
  require_ptr(fn, "slots", slots, rows);
  if (rows * c == 0) return;
  NvtxRange range(fn);
  dispatch_backward_kernel<<<detail::grid_for(rows * c, kThreads), kThreads, 0, s>>>(
      dxe.ptr, te, slots, dx.ptr, tx, rows, c, k);
  SS_CUDA_CHECK_LAUNCH(fn);
}

size_t moe_combine_forward_workspace_bytes(plan::DType out, int64_t tokens, int64_t c) {
  if (out == plan::DType::f32) return 0;  // accumulates into out itself
  return static_cast<size_t>(tokens) * static_cast<size_t>(c) * sizeof(float);
}

void moe_combine_forward(cudaStream_t s, const ConstDevPtr* y, const int64_t* const* slots,
                         const int64_t* rows, int64_t experts, ConstDevPtr weights, DevPtr out,
                         int64_t tokens, int64_t c, int64_t k, const DevPtr* weighted,
                         Workspace ws) {
  const char* fn = "moe_combine_forward";
  require_nonneg(fn, "tokens", tokens);
  require_nonneg(fn, "c", c);
  require(k >= 1, fn, "k = " + std::to_string(k) + " < 1");
  require_nonneg(fn, "experts", experts);
  const ElemType tw = require_operand(fn, "weights", weights, tokens * k);
  require_operand(fn, "out", out, tokens * c);
  require(experts == 0 || (y != nullptr && slots != nullptr && rows != nullptr), fn,
          "y, slots and rows must list every expert");
  for (int64_t e = 0; e < experts; ++e) {
    require_nonneg(fn, "rows", rows[e]);
    require_operand(fn, "y", y[e], rows[e] * c);
    require_ptr(fn, "slots", slots[e], rows[e]);
    if (weighted != nullptr) require_operand(fn, "weighted", weighted[e], rows[e] * c);
  }
  const size_t need = moe_combine_forward_workspace_bytes(out.dt, tokens, c);
  require_workspace(fn, ws, need);
  if (tokens * c == 0) return;
  NvtxRange range(fn);
  float* acc = need > 0 ? static_cast<float*>(ws.ptr) : static_cast<float*>(out.ptr);
  SS_CUDA_CHECK(cudaMemsetAsync(acc, 0, static_cast<size_t>(tokens * c) * sizeof(float), s));
  for (int64_t e = 0; e < experts; ++e) {  // expert order: the CPU op's summation order
    if (rows[e] * c == 0) continue;
    const ElemType ty = elem_type(y[e].dt, fn);
    void* prod = weighted != nullptr ? weighted[e].ptr : nullptr;
    const ElemType tp = weighted != nullptr ? elem_type(weighted[e].dt, fn) : ElemType::f32;
    combine_expert_kernel<<<detail::grid_for(rows[e] * c, kThreads), kThreads, 0, s>>>(
        y[e].ptr, ty, slots[e], weights.ptr, tw, acc, prod, tp, rows[e], c, k);
    SS_CUDA_CHECK_LAUNCH(fn);
  }
  if (need > 0) cast(s, ConstDevPtr{acc, plan::DType::f32}, out, tokens * c);
}

void moe_combine_backward(cudaStream_t s, const ConstDevPtr* y, const int64_t* const* slots,
                          const int64_t* rows, int64_t experts, ConstDevPtr weights,
                          ConstDevPtr dout, const DevPtr* dy, DevPtr dweights, int64_t tokens,
                          int64_t c, int64_t k) {
  const char* fn = "moe_combine_backward";
  require_nonneg(fn, "tokens", tokens);
  require_nonneg(fn, "c", c);
  require(k >= 1, fn, "k = " + std::to_string(k) + " < 1");
  require_nonneg(fn, "experts", experts);
  const ElemType tw = require_operand(fn, "weights", weights, tokens * k);
  const ElemType to = require_operand(fn, "dout", dout, tokens * c);
  const ElemType tdw = require_operand(fn, "dweights", dweights, tokens * k);
  require(experts == 0 || (y != nullptr && slots != nullptr && rows != nullptr && dy != nullptr),
          fn, "y, dy, slots and rows must list every expert");
  for (int64_t e = 0; e < experts; ++e) {
    require_nonneg(fn, "rows", rows[e]);
    require_operand(fn, "y", y[e], rows[e] * c);
    require_operand(fn, "dy", dy[e], rows[e] * c);
    require_ptr(fn, "slots", slots[e], rows[e]);
  }
  if (tokens == 0) return;
  NvtxRange range(fn);
  for (int64_t e = 0; e < experts; ++e) {
    if (rows[e] == 0) continue;
    combine_backward_kernel<<<row_blocks(rows[e]), kThreads, 0, s>>>(
        y[e].ptr, elem_type(y[e].dt, fn), slots[e], weights.ptr, tw, dout.ptr, to, dy[e].ptr,
        elem_type(dy[e].dt, fn), dweights.ptr, tdw, rows[e], c, k);
    SS_CUDA_CHECK_LAUNCH(fn);
  }
}

void sigmoid_gate_forward(cudaStream_t s, ConstDevPtr g, ConstDevPtr x, DevPtr y, DevPtr sig,
                          int64_t n, int64_t c) {
  const char* fn = "sigmoid_gate_forward";
  require_nonneg(fn, "n", n);
  require_nonneg(fn, "c", c);
  const ElemType tg = require_operand(fn, "g", g, n);
  const ElemType tx = require_operand(fn, "x", x, n * c);
  const ElemType ty = require_operand(fn, "y", y, n * c);
  const ElemType ts = require_operand(fn, "sig", sig, n);
  require(c >= 1 || n == 0, fn, "c = 0 with n = " + std::to_string(n) + " rows (sig unwritten)");
  if (n == 0) return;
  NvtxRange range(fn);
  sigmoid_gate_forward_kernel<<<detail::grid_for(n * c, kThreads), kThreads, 0, s>>>(
      g.ptr, tg, x.ptr, tx, y.ptr, ty, sig.ptr, ts, n, c);
  SS_CUDA_CHECK_LAUNCH(fn);
}

void sigmoid_gate_backward(cudaStream_t s, ConstDevPtr sig, ConstDevPtr x, ConstDevPtr dy,
                           DevPtr dg, DevPtr dx, int64_t n, int64_t c) {
  const char* fn = "sigmoid_gate_backward";
  require_nonneg(fn, "n", n);
  require_nonneg(fn, "c", c);
  const ElemType ts = require_operand(fn, "sig", sig, n);
  const ElemType tx = require_operand(fn, "x", x, n * c);
  const ElemType tdy = require_operand(fn, "dy", dy, n * c);
  const ElemType tdg = require_operand(fn, "dg", dg, n);
  const ElemType tdx = require_operand(fn, "dx", dx, n * c);
  if (n == 0) return;
  NvtxRange range(fn);
  sigmoid_gate_backward_kernel<<<row_blocks(n), kThreads, 0, s>>>(
      sig.ptr, ts, x.ptr, tx, dy.ptr, tdy, dg.ptr, tdg, dx.ptr, tdx, n, c);
  SS_CUDA_CHECK_LAUNCH(fn);
}

}  // namespace shardscope::engine::cuda
