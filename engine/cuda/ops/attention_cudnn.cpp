// cuDNN fused flash attention through cudnn-frontend's graph API
// (attention_cudnn.h). Written after the pattern of llm.c's
// train_gpt2 cudnn_att.cpp (graphs keyed by shape and cached, tensors named
// by uid, workspace from the caller), with the engine's layouts: no
// transposes, strides describe [B, T, heads * D] rows as [B, heads, T, D].
#include "engine/cuda/ops/attention_cudnn.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/ops/attention_cudnn_layout.h"
#include "engine/cuda/ops/nvtx_range.h"

namespace shardscope::engine::cuda {

namespace fe = cudnn_frontend;

namespace {

// Tensor uids of the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

constexpr size_t kAlign = 256;
size_t align_up(size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudaError(std::string(what) + ": " + cudnnGetErrorString(status));
}

void check_fe(fe::error_t e, const char* stage, const CudnnAttentionKey& key) {
  if (e.is_bad())
    throw CudaError("cuDNN attention (" + cudnn_attention_key_text(key) + "): " + stage +
                    " failed: " + e.get_message());
}

std::vector<int64_t> vec(const std::array<int64_t, 4>& a) {
  return {a[0], a[1], a[2], a[3]};
}

}  // namespace

std::string cudnn_version_text() {
  const size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch (cuDNN 9)
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;
    size_t cudnn_workspace = 0;  // bytes cuDNN's plan asks for
  };
  std::map<CudnnAttentionKey, Entry> cache;

  ~Impl() {
    if (handle) cudnnDestroy(handle);  // no throw from a destructor
  }

  cudnnHandle_t get_handle() {
    if (!handle) {
      const size_t version = cudnnGetVersion();
      if (version < 90000)
        throw CudaError("cuDNN attention needs cuDNN 9, the loaded libcudnn is version " +
                        std::to_string(version));
      check_cudnn(cudnnCreate(&handle), "cudnnCreate");
    }
    return handle;
  }

  Entry build(const CudnnAttentionKey& k) {
    auto g = std::make_shared<fe::graph::Graph>();
    const fe::DataType_t io =
        k.dtype == plan::DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
    g->set_io_data_type(io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const int64_t B = k.batch, T = k.seq, H = k.n_head, Hkv = k.n_kv_head, D = k.head_dim;
    auto rows = [&](const char* name, Uid uid, int64_t heads, int64_t row_stride) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({B, heads, T, D})
                           .set_stride(vec(cudnn_layout::bhtd_strides(T, D, row_stride))));
    };
    const CudnnRowStrides strides = cudnn_row_strides(k);
    auto q = rows("Q", kQ, H, strides.q);
    auto kk = rows("K", kK, Hkv, strides.k);
    auto v = rows("V", kV, Hkv, strides.v);
    const std::vector<int64_t> stats_dim{B, H, T, 1};
    const std::vector<int64_t> stats_stride = vec(cudnn_layout::stats_strides(H, T));
    if (k.direction == CudnnDirection::forward) {
      auto opts = fe::graph::SDPA_attributes()
                      .set_name("sdpa_forward")
                      .set_generate_stats(true)
                      .set_causal_mask(true)
                      .set_attn_scale(k.scale);
      if (k.sliding_window > 0)
        opts.set_diagonal_band_left_bound(static_cast<int>(k.sliding_window));
      auto [o, stats] = g->sdpa(q, kk, v, opts);
      o->set_output(true)
          .set_uid(kO)
          .set_dim({B, H, T, D})
          .set_stride(vec(cudnn_layout::bhtd_strides(T, D, H * D)));
      stats->set_output(true)
          .set_uid(kStats)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim(stats_dim)
          .set_stride(stats_stride);
    } else {
      auto o = rows("O", kO, H, H * D);
      auto dout = rows("dO", kDO, H, H * D);
      auto stats = g->tensor(fe::graph::Tensor_attributes()
                                 .set_name("Stats")
                                 .set_uid(kStats)
                                 .set_data_type(fe::DataType_t::FLOAT)
                                 .set_dim(stats_dim)
                                 .set_stride(stats_stride));
      auto opts = fe::graph::SDPA_backward_attributes()
                      .set_name("sdpa_backward")
                      .set_causal_mask(true)
                      .set_attn_scale(k.scale)
                      .set_deterministic_algorithm(k.deterministic);
      if (k.sliding_window > 0)
        opts.set_diagonal_band_left_bound(static_cast<int>(k.sliding_window));
      auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, stats, opts);
      // Dense scratch (attention_cudnn.h): [B, T, heads * D].
      dq->set_output(true)
          .set_uid(kDQ)
          .set_dim({B, H, T, D})
          .set_stride(vec(cudnn_layout::bhtd_strides(T, D, H * D)));
      dk->set_output(true)
          .set_uid(kDK)
          .set_dim({B, Hkv, T, D})
          .set_stride(vec(cudnn_layout::bhtd_strides(T, D, Hkv * D)));
      dv->set_output(true)
          .set_uid(kDV)
          .set_dim({B, Hkv, T, D})
          .set_stride(vec(cudnn_layout::bhtd_strides(T, D, Hkv * D)));
    }
    cudnnHandle_t h = get_handle();
    check_fe(g->validate(), "validate", k);
    check_fe(g->build_operation_graph(h), "build_operation_graph", k);
    check_fe(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", k);
    check_fe(g->check_support(h), "check_support", k);
    check_fe(g->build_plans(h), "build_plans", k);
    int64_t ws = 0;
    check_fe(g->get_workspace_size(ws), "get_workspace_size", k);
    return Entry{std::move(g), static_cast<size_t>(ws)};
  }

  const Entry& find(const char* fn, const CudnnAttentionKey& k) const {
    auto it = cache.find(k);
    if (it == cache.end())
      throw std::logic_error(std::string(fn) + ": no cuDNN graph was prepared for " +
                             cudnn_attention_key_text(k) +
                             " (graphs are built in the start-up sizing pass, never in a step)");
    return it->second;
  }

  void execute(const char* fn, const CudnnAttentionKey& k, const Entry& e, cudaStream_t s,
               std::unordered_map<int64_t, void*>& pack, void* workspace) {
    check_cudnn(cudnnSetStream(handle, s), "cudnnSetStream");
    check_fe(e.graph->execute(handle, pack, workspace), fn, k);
  }
};

CudnnAttention::CudnnAttention(bool deterministic_backward)
    : deterministic_(deterministic_backward), impl_(std::make_unique<Impl>()) {}

CudnnAttention::~CudnnAttention() = default;

size_t CudnnAttention::cached_graphs() const {
  return impl_->cache.size();
}

size_t CudnnAttention::prepare(const CudnnAttentionKey& key) {
  auto it = impl_->cache.find(key);
  if (it == impl_->cache.end()) it = impl_->cache.emplace(key, impl_->build(key)).first;
  size_t bytes = align_up(it->second.cudnn_workspace) + cudnn_rope_scratch_bytes(key);
  if (key.direction == CudnnDirection::backward) bytes += cudnn_backward_scratch_bytes(key);
  return bytes;
}

namespace {

// ws must hold what prepare() returned for the key.
void require_workspace(const char* fn, const Workspace& ws, size_t needed) {
  if (needed > 0 && (ws.ptr == nullptr || ws.bytes < needed))
    throw std::invalid_argument(std::string(fn) + ": workspace (ws) holds " +
                                std::to_string(ws.bytes) + " bytes, the cuDNN graph needs " +
                                std::to_string(needed));
  if (ws.ptr) require_cudnn_aligned(fn, "ws", ws.ptr);
}

// RoPE: q and k rotated into the dense scratch at `at` (q then k); returns
// the q and k cuDNN reads (the call's own without RoPE).
std::pair<const void*, const void*> rotated_qk(cudaStream_t s, const char* fn,
                                               const CudnnAttentionKey& key,
                                               const AttentionShape& shape, const DevQkv& qkv,
                                               char* at) {
  if (!key.rope) return {qkv.q.ptr, qkv.k.ptr};
  const size_t elem = plan::dtype_bytes(key.dtype);
  const int64_t rows = key.batch * key.seq;
  void* q = at;
  void* k = at + align_up(static_cast<size_t>(rows * key.n_head * key.head_dim) * elem);
  const cudnn_layout::RopeTable table = cudnn_layout::rope_table(shape.rope_theta, key.head_dim);
  detail::launch_rope_rows(s, qkv.q, qkv.q_stride, DevPtr{q, key.dtype}, rows, key.seq, key.n_head,
                           key.head_dim, table, fn);
  detail::launch_rope_rows(s, qkv.k, qkv.kv_stride, DevPtr{k, key.dtype}, rows, key.seq,
                           key.n_kv_head, key.head_dim, table, fn);
  return {q, k};
}

// cuDNN's graphs read the heads of a row head_dim apart: GPT-NeoX's per-head
// [H, 3, D] rows (head_stride 3 * D) are refused, never read wrongly.
void require_dense_heads(const char* fn, const char* name, int64_t head_stride, int64_t head_dim) {
  if (head_stride != 0 && head_stride != head_dim)
    throw std::invalid_argument(std::string(fn) + ": " + name + " " + std::to_string(head_stride) +
                                " (heads not head_dim " + std::to_string(head_dim) +
                                " apart, GPT-NeoX's per-head qkv) is not read by cuDNN's graphs");
}

void require_nonnull(const char* fn, const char* name, const void* ptr) {
  if (ptr == nullptr) throw std::invalid_argument(std::string(fn) + ": " + name + " is null");
}

void require_dtype(const char* fn, const char* name, plan::DType dt, plan::DType expected) {
  if (dt != expected)
    throw std::invalid_argument(std::string(fn) + ": " + name + " has dtype " +
                                plan::dtype_name(dt) + " but q has " + plan::dtype_name(expected) +
                                " (attention tensors share one dtype)");
}

}  // namespace

void CudnnAttention::forward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv,
                             DevPtr out, float* lse, Workspace ws) {
  const char* fn = "attention_forward_cudnn";
  if (shape.batch == 0 || shape.seq == 0) return;  // as attention_forward: nothing to do
  const CudnnAttentionKey key = cudnn_attention_key(fn, shape, qkv.q.dt, qkv.q_stride,
                                                    qkv.kv_stride, CudnnDirection::forward, false);
  require_dense_heads(fn, "head_stride", qkv.head_stride, shape.head_dim);
  require_dtype(fn, "k", qkv.k.dt, qkv.q.dt);
  require_dtype(fn, "v", qkv.v.dt, qkv.q.dt);
  require_dtype(fn, "out", out.dt, qkv.q.dt);
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"q", qkv.q.ptr},
                                  {"k", qkv.k.ptr},
                                  {"v", qkv.v.ptr},
                                  {"out", out.ptr},
                                  {"lse", lse}}) {
    require_nonnull(fn, name, ptr);
    require_cudnn_aligned(fn, name, ptr);
  }
  const Impl::Entry& e = impl_->find(fn, key);
  const size_t cudnn_bytes = align_up(e.cudnn_workspace);
  require_workspace(fn, ws, cudnn_bytes + cudnn_rope_scratch_bytes(key));
  NvtxRange range(fn);
  const auto [q, k] = rotated_qk(s, fn, key, shape, qkv, static_cast<char*>(ws.ptr) + cudnn_bytes);
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)},
                                          {kK, const_cast<void*>(k)},
                                          {kV, const_cast<void*>(qkv.v.ptr)},
                                          {kO, out.ptr},
                                          {kStats, lse}};
  impl_->execute(fn, key, e, s, pack, ws.ptr);
}

void CudnnAttention::backward(cudaStream_t s, const AttentionShape& shape, const DevQkv& qkv,
                              ConstDevPtr out, const float* lse, ConstDevPtr dout,
                              const DevQkvGrad& grad, Workspace ws) {
  const char* fn = "attention_backward_cudnn";
  if (shape.batch == 0 || shape.seq == 0) return;
  const CudnnAttentionKey key = cudnn_attention_key(
      fn, shape, qkv.q.dt, qkv.q_stride, qkv.kv_stride, CudnnDirection::backward, deterministic_);
  require_dense_heads(fn, "head_stride", qkv.head_stride, shape.head_dim);
  require_dense_heads(fn, "grad.head_stride", grad.head_stride, shape.head_dim);
  for (const auto& [name, dt] : {std::pair<const char*, plan::DType>{"k", qkv.k.dt},
                                 {"v", qkv.v.dt},
                                 {"out", out.dt},
                                 {"dout", dout.dt},
                                 {"dq", grad.dq.dt},
                                 {"dk", grad.dk.dt},
                                 {"dv", grad.dv.dt}})
    require_dtype(fn, name, dt, qkv.q.dt);
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"q", qkv.q.ptr},
                                  {"k", qkv.k.ptr},
                                  {"v", qkv.v.ptr},
                                  {"out", out.ptr},
                                  {"lse", lse},
                                  {"dout", dout.ptr}}) {
    require_nonnull(fn, name, ptr);
    require_cudnn_aligned(fn, name, ptr);
  }
  require_nonnull(fn, "dq", grad.dq.ptr);
  require_nonnull(fn, "dk", grad.dk.ptr);
  require_nonnull(fn, "dv", grad.dv.ptr);
  if (grad.q_stride < shape.n_head * shape.head_dim ||
      grad.kv_stride < shape.n_kv_head * shape.head_dim)
    throw std::invalid_argument(std::string(fn) + ": gradient strides (grad.q_stride " +
                                std::to_string(grad.q_stride) + ", grad.kv_stride " +
                                std::to_string(grad.kv_stride) + ") are narrower than a row");
  const Impl::Entry& e = impl_->find(fn, key);
  const size_t cudnn_bytes = align_up(e.cudnn_workspace);
  const size_t grad_bytes = cudnn_backward_scratch_bytes(key);
  require_workspace(fn, ws, cudnn_bytes + grad_bytes + cudnn_rope_scratch_bytes(key));
  // Scratch after cuDNN's own workspace: dQ, then dK, then dV (dense), then
  // the rotated q and k under RoPE.
  const size_t elem = plan::dtype_bytes(key.dtype);
  const int64_t rows = key.batch * key.seq;
  const int64_t qw = key.n_head * key.head_dim, kvw = key.n_kv_head * key.head_dim;
  char* base = static_cast<char*>(ws.ptr) + cudnn_bytes;
  void* dq = base;
  void* dk = base + align_up(static_cast<size_t>(rows * qw) * elem);
  void* dv = static_cast<char*>(dk) + align_up(static_cast<size_t>(rows * kvw) * elem);
  NvtxRange range(fn);
  const auto [q, k] = rotated_qk(s, fn, key, shape, qkv, base + grad_bytes);
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(q)},
                                          {kK, const_cast<void*>(k)},
                                          {kV, const_cast<void*>(qkv.v.ptr)},
                                          {kO, const_cast<void*>(out.ptr)},
                                          {kDO, const_cast<void*>(dout.ptr)},
                                          {kStats, const_cast<float*>(lse)},
                                          {kDQ, dq},
                                          {kDK, dk},
                                          {kDV, dv}};
  impl_->execute(fn, key, e, s, pack, ws.ptr);
  // Accumulate (+=) into the engine's gradients, with their own row strides.
  if (key.rope) {  // dQ, dK are w.r.t. the rotated q, k: back through R^T
    const cudnn_layout::RopeTable table = cudnn_layout::rope_table(shape.rope_theta, key.head_dim);
    detail::launch_add_rope_back_rows(s, ConstDevPtr{dq, key.dtype}, grad.dq, grad.q_stride, rows,
                                      key.seq, key.n_head, key.head_dim, table, fn);
    detail::launch_add_rope_back_rows(s, ConstDevPtr{dk, key.dtype}, grad.dk, grad.kv_stride, rows,
                                      key.seq, key.n_kv_head, key.head_dim, table, fn);
  } else {
    detail::launch_add_rows(s, ConstDevPtr{dq, key.dtype}, rows, qw, grad.dq, grad.q_stride, fn);
    detail::launch_add_rows(s, ConstDevPtr{dk, key.dtype}, rows, kvw, grad.dk, grad.kv_stride, fn);
  }
  detail::launch_add_rows(s, ConstDevPtr{dv, key.dtype}, rows, kvw, grad.dv, grad.kv_stride, fn);
}

}  // namespace shardscope::engine::cuda
