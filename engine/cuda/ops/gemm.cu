// Linear layers on cuBLASLt (cpu::ops_linear twin). Row-major [r, c] arrays
// are column-major [c, r] to cuBLASLt, so every product below is written as
// the column-major problem D[m, n] = op(A)[m, k] op(B)[k, n] (+ C = D when
// accumulating). Compute is CUBLAS_COMPUTE_32F with fp32 scale: exact fp32
// for f32 operands (no TF32), tensor cores with fp32 accumulation for
// bf16/f16. Matmul descriptors, layouts and the heuristic's algorithm are
// cached per Blas and problem (shape, dtypes, transposes, pointer alignment):
// the heuristic runs once per distinct GEMM of a model, not once per call.
#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/internal.h"
#include "engine/cuda/ops/linear_checks.h"
#include "engine/cuda/ops/nvtx_range.h"
#include "engine/cuda/ops/op_checks.h"
#include "engine/cuda/ops/ops.h"

namespace shardscope::engine::cuda {

namespace {

void check_lt(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(what) + ": " + cublasLtGetStatusName(status) + " (" +
                  cublasLtGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}
#define SS_CUBLASLT_CHECK(expr) check_lt((expr), #expr, __FILE__, __LINE__)

cudaDataType_t cuda_type(plan::DType dt) {
  switch (dt) {
    case plan::DType::bf16:
      return CUDA_R_16BF;
    case plan::DType::f16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;  // the argument checks admit f32, bf16 and f16 only
  }
}

// Largest power of two (at most 256) dividing the address; null counts as 256.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// Column-major D[m, n] = alpha op(A) op(B) + beta D, with an optional bias
// epilogue (D[i, j] += bias[i], bias [m]).
struct GemmProblem {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  float beta = 0.0f;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
};

using PlanKey = std::array<int64_t, 16>;

PlanKey key_of(const GemmProblem& g) {
  return {g.trans_a,
          g.trans_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          g.ab_type,
          g.d_type,
          g.bias != nullptr,
          g.bias_type,
          alignment_of(g.a),
          alignment_of(g.b),
          alignment_of(g.d),
          alignment_of(g.bias)};
}

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;  // false: cuBLASLt has no algorithm for this problem
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

// One per Blas (keyed by its handle). The mutex also serialises the calls of
// a Blas shared by several host threads, since each call sets the cached
// descriptor's bias pointer.
struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<GemmPlan>> plans;
};

std::mutex caches_mutex;
std::unordered_map<const void*, std::shared_ptr<PlanCache>>& caches() {
  static std::unordered_map<const void*, std::shared_ptr<PlanCache>> by_handle;
  return by_handle;
}

std::shared_ptr<PlanCache> cache_of(const Blas& blas) {
  std::lock_guard<std::mutex> lock(caches_mutex);
  return caches().at(blas.handle());
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  SS_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value));
}
template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const V& value) {
  SS_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
}

std::unique_ptr<GemmPlan> make_plan(const Blas& blas, const GemmProblem& g) {
  auto plan = std::make_unique<GemmPlan>();
  SS_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(g.bias_type));
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
             g.bias);  // the heuristic reads its alignment
  }
  // Stored (pre-op) shapes: op(A) is [m, k], op(B) is [k, n].
  SS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->a, g.ab_type, g.trans_a ? g.k : g.m,
                                               g.trans_a ? g.m : g.k, g.lda));
  SS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->b, g.ab_type, g.trans_b ? g.n : g.k,
                                               g.trans_b ? g.k : g.n, g.ldb));
  SS_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&plan->d, g.d_type, g.m, g.n, g.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  SS_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      pref_owner(pref, cublasLtMatmulPreferenceDestroy);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<uint64_t>(blas.workspace_bytes()));
  // Algorithms needing more alignment than the operands have are excluded
  // (the default assumes 256-byte aligned operands).
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.a));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.b));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.d));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.d));

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      static_cast<cublasLtHandle_t>(blas.handle()), plan->desc, plan->a, plan->b, plan->d, plan->d,
      pref, 1, &result, &returned);
  // No algorithm is an answer, not an error: NOT_SUPPORTED, or for the bias
  // epilogue any refusal (the caller falls back to bias rows + beta = 1).
  if (status != CUBLAS_STATUS_NOT_SUPPORTED && g.bias == nullptr)
    check_lt(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  if (status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->has_algo = true;
  }
  return plan;
}

// Runs the GEMM on stream s; false (nothing launched) when cuBLASLt has no
// algorithm for it (callers fall back, e.g. from the bias epilogue).
bool run_gemm(const Blas& blas, cudaStream_t s, const GemmProblem& g) {
  const std::shared_ptr<PlanCache> cache = cache_of(blas);
  std::lock_guard<std::mutex> lock(cache->mutex);
  std::unique_ptr<GemmPlan>& plan = cache->plans[key_of(g)];
  if (!plan) plan = make_plan(blas, g);
  if (!plan->has_algo) return false;
  if (g.bias != nullptr) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  const float alpha = 1.0f;
  SS_CUBLASLT_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(blas.handle()), plan->desc, &alpha,
                                   g.a, plan->a, g.b, plan->b, &g.beta, g.d, plan->d, g.d, plan->d,
                                   &plan->algo, blas.workspace(), blas.workspace_bytes(), s));
  return true;
}

void run_gemm_or_throw(const Blas& blas, cudaStream_t s, const GemmProblem& g, const char* fn) {
  if (!run_gemm(blas, s, g))
    throw CudaError(std::string(fn) + ": cuBLASLt has no algorithm for m = " + std::to_string(g.m) +
                    ", n = " + std::to_string(g.n) + ", k = " + std::to_string(g.k) +
                    " with these dtypes and alignments");
}

void check_float_dtype_pair(const char* fn, const char* name, plan::DType dt, plan::DType inputs) {
  detail::require(dt == inputs || dt == plan::DType::f32, fn,
                  std::string(name) + " dtype " + plan::dtype_name(dt) +
                      " must be the inputs' dtype " + plan::dtype_name(inputs) + " or f32");
}

void check_dims(const char* fn, int64_t n, int64_t in, int64_t out) {
  detail::require_nonneg(fn, "n", n);
  detail::require_nonneg(fn, "in", in);
  detail::require_nonneg(fn, "out", out);
}

}  // namespace

// ---- Blas ---------------------------------------------------------------------------

Blas::Blas(size_t workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  SS_CUBLASLT_CHECK(cublasLtCreate(&handle));
  if (workspace_bytes > 0) {
    const cudaError_t err = cudaMalloc(&workspace_, workspace_bytes);
    if (err != cudaSuccess) {
      cublasLtDestroy(handle);
      throw_cuda_error(err, "Blas: cudaMalloc of the cuBLASLt workspace", __FILE__, __LINE__);
    }
  }
  handle_ = handle;
  workspace_bytes_ = workspace_bytes;
  std::lock_guard<std::mutex> lock(caches_mutex);
  caches()[handle_] = std::make_shared<PlanCache>();
}

Blas::~Blas() {
  {
    std::lock_guard<std::mutex> lock(caches_mutex);
    caches().erase(handle_);  // destroys the cached descriptors (last owner)
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

// ---- argument checks ------------------------------------------------------------------

namespace detail {

void check_linear_forward(ConstDevPtr x, ConstDevPtr w, ConstDevPtr bias, ConstDevPtr y, int64_t n,
                          int64_t in, int64_t out) {
  const char* fn = "linear_forward";
  check_dims(fn, n, in, out);
  require_operand(fn, "x", x, n * in);
  require_operand(fn, "w", w, in * out);
  require_operand(fn, "y", y, n * out);
  if (bias.ptr != nullptr) require_operand(fn, "bias", bias, out);
  require(x.dt == w.dt, fn,
          std::string("x dtype ") + plan::dtype_name(x.dt) + " differs from w dtype " +
              plan::dtype_name(w.dt) + " (a GEMM's inputs share one dtype)");
  check_float_dtype_pair(fn, "y", y.dt, x.dt);
}

void check_linear_backward(ConstDevPtr x, ConstDevPtr w, ConstDevPtr dy, ConstDevPtr dx,
                           ConstDevPtr dw, ConstDevPtr dbias, int64_t n, int64_t in, int64_t out,
                           const void* ws_ptr, size_t ws_bytes) {
  const char* fn = "linear_backward";
  check_dims(fn, n, in, out);
  require_operand(fn, "x", x, n * in);
  require_operand(fn, "w", w, in * out);
  require_operand(fn, "dy", dy, n * out);
  require_operand(fn, "dw", dw, in * out);
  if (dx.ptr != nullptr) require_operand(fn, "dx", dx, n * in);
  if (dbias.ptr != nullptr) require_operand(fn, "dbias", dbias, out);
  require(x.dt == w.dt && dy.dt == w.dt, fn,
          std::string("x, w, dy dtypes ") + plan::dtype_name(x.dt) + ", " + plan::dtype_name(w.dt) +
              ", " + plan::dtype_name(dy.dt) + " differ (a GEMM's inputs share one dtype)");
  if (dx.ptr != nullptr) check_float_dtype_pair(fn, "dx", dx.dt, x.dt);
  check_float_dtype_pair(fn, "dw", dw.dt, x.dt);
  if (dbias.ptr != nullptr)
    require_workspace(fn, Workspace{const_cast<void*>(ws_ptr), ws_bytes},
                      linear_backward_workspace_bytes(n, in, out));
}

}  // namespace detail

// ---- linear ---------------------------------------------------------------------------

void linear_forward(Blas& blas, cudaStream_t s, ConstDevPtr x, ConstDevPtr w, ConstDevPtr bias,
                    DevPtr y, int64_t n, int64_t in, int64_t out, WeightLayout layout) {
  const char* fn = "linear_forward";
  detail::check_linear_forward(x, w, bias, y, n, in, out);
  NvtxRange range(fn);
  if (n == 0 || out == 0) return;
  const bool has_bias = bias.ptr != nullptr;
  if (in == 0) {  // empty product: y = bias rows, or zeros
    if (has_bias)
      detail::launch_broadcast_rows(s, bias, y, n, out, fn);
    else
      SS_CUDA_CHECK(
          cudaMemsetAsync(y.ptr, 0, static_cast<size_t>(n * out) * plan::dtype_bytes(y.dt), s));
    return;
  }
  // y^T[out, n] = op(W)[out, in] x^T[in, n]; W [out, in] row-major is [in, out]
  // column-major (transposed), W [in, out] row-major is [out, in] column-major.
  GemmProblem g;
  g.m = out, g.n = n, g.k = in;
  g.a = w.ptr, g.trans_a = layout == WeightLayout::out_in;
  g.lda = layout == WeightLayout::out_in ? in : out;
  g.b = x.ptr, g.trans_b = false, g.ldb = in;
  g.d = y.ptr, g.ldd = out;
  g.ab_type = cuda_type(x.dt), g.d_type = cuda_type(y.dt);
  // The bias epilogue (bias [m] broadcast over columns) when cuBLASLt takes
  // it: bias of y's dtype, 16-byte aligned; else bias rows then beta = 1.
  if (has_bias && bias.dt == y.dt && alignment_of(bias.ptr) >= 16) {
    g.bias = bias.ptr, g.bias_type = cuda_type(bias.dt);
    if (run_gemm(blas, s, g)) return;
    g.bias = nullptr;
  }
  if (has_bias) {
    detail::launch_broadcast_rows(s, bias, y, n, out, fn);
    g.beta = 1.0f;
  }
  run_gemm_or_throw(blas, s, g, fn);
}

size_t linear_backward_workspace_bytes(int64_t n, int64_t /*in*/, int64_t out) {
  return detail::column_sum_workspace_bytes(n, out, 1);
}

void linear_backward(Blas& blas, cudaStream_t s, ConstDevPtr x, ConstDevPtr w, ConstDevPtr dy,
                     DevPtr dx, DevPtr dw, DevPtr dbias, int64_t n, int64_t in, int64_t out,
                     WeightLayout layout, Workspace ws) {
  const char* fn = "linear_backward";
  detail::check_linear_backward(x, w, dy, dx, dw, dbias, n, in, out, ws.ptr, ws.bytes);
  NvtxRange range(fn);
  if (n == 0 || out == 0) return;
  const bool out_in = layout == WeightLayout::out_in;
  if (in > 0) {
    if (dx.ptr != nullptr) {
      // dx^T[in, n] += op(W)[in, out] dy^T[out, n]: W [out, in] row-major is
      // [in, out] column-major as is; W [in, out] row-major needs a transpose.
      GemmProblem g;
      g.m = in, g.n = n, g.k = out;
      g.a = w.ptr, g.trans_a = !out_in, g.lda = out_in ? in : out;
      g.b = dy.ptr, g.trans_b = false, g.ldb = out;
      g.d = dx.ptr, g.ldd = in, g.beta = 1.0f;
      g.ab_type = cuda_type(x.dt), g.d_type = cuda_type(dx.dt);
      run_gemm_or_throw(blas, s, g, fn);
    }
    GemmProblem g;
    g.k = n, g.beta = 1.0f;
    g.d = dw.ptr;
    g.ab_type = cuda_type(x.dt), g.d_type = cuda_type(dw.dt);
    if (out_in) {
      // dW^T[in, out] += x^T[in, n] dy[n, out]  (dW [out, in] row-major)
      g.m = in, g.n = out, g.ldd = in;
      g.a = x.ptr, g.trans_a = false, g.lda = in;
      g.b = dy.ptr, g.trans_b = true, g.ldb = out;
    } else {
      // dW^T[out, in] += dy^T[out, n] x[n, in]  (dW [in, out] row-major)
      g.m = out, g.n = in, g.ldd = out;
      g.a = dy.ptr, g.trans_a = false, g.lda = out;
      g.b = x.ptr, g.trans_b = true, g.ldb = in;
    }
    run_gemm_or_throw(blas, s, g, fn);
  }
  if (dbias.ptr != nullptr) {
    detail::ColumnSumInput sums;
    sums.term = detail::ColumnTerm::dy;
    sums.dy = dy.ptr, sums.dy_type = elem_type(dy.dt, fn);
    sums.rows = n, sums.cols = out;
    detail::launch_column_sum(s, sums, dbias, DevPtr{}, ws.ptr, fn);
  }
}

}  // namespace shardscope::engine::cuda
