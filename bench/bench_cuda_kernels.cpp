// GPU kernels of the CUDA engine at GPT-2 small shapes (bf16, B = 8,
// T = 1024, 12 heads of 64, width 768, vocabulary 50257): achieved TFLOP/s
// of the attention kernel families (simt, tensor_core, cudnn) forward and backward,
// and of the cuBLASLt linear layers, to see where a step's time goes against
// PyTorch eager. Prints one table; results go to docs/cuda.md.
//
//   bench_cuda_kernels [--batch B] [--seq T] [--iters N]
//
// Without a CUDA device or driver it says so and exits 2 (nothing to time).
// FLOPs (causal attention counts the visible half of every T x T product):
//   attention forward  2 products: 2 * B*H*T^2*D
//   attention backward 5 products (S again, dP, dV, dK, dQ): 5 * B*H*T^2*D
//   linear forward     2 * N*in*out; backward (dx and dW) 4 * N*in*out
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/device_query.h"
#include "engine/cuda/ops/attention_cudnn.h"
#include "engine/cuda/ops/ops.h"

using namespace shardscope::engine::cuda;
using shardscope::plan::DType;

namespace {

// Device buffer of `count` bf16 values uniform in [-1, 1) (never zeros: the
// kernels' time does not depend on values, but NaN-free inputs keep it so).
struct Bf16Buffer {
  void* ptr = nullptr;
  explicit Bf16Buffer(size_t count, uint32_t seed) {
    std::vector<__nv_bfloat16> host(count);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (auto& x : host) x = __float2bfloat16(uniform(rng));
    SS_CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(__nv_bfloat16)));
    SS_CUDA_CHECK(
        cudaMemcpy(ptr, host.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  }
  ~Bf16Buffer() { (void)cudaFree(ptr); }
  Bf16Buffer(const Bf16Buffer&) = delete;
  Bf16Buffer& operator=(const Bf16Buffer&) = delete;
  DevPtr dev() const { return {ptr, DType::bf16}; }
};

struct DeviceBytes {
  void* ptr = nullptr;
  explicit DeviceBytes(size_t bytes) {
    SS_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    SS_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
  }
  ~DeviceBytes() { (void)cudaFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

// Mean milliseconds of `run` on `stream` over `iters` timed calls after 3 warm-ups.
double time_ms(cudaStream_t stream, int iters, const std::function<void()>& run) {
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t start = nullptr, stop = nullptr;
  SS_CUDA_CHECK(cudaEventCreate(&start));
  SS_CUDA_CHECK(cudaEventCreate(&stop));
  SS_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) run();
  SS_CUDA_CHECK(cudaEventRecord(stop, stream));
  SS_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return static_cast<double>(ms) / iters;
}

void row(const char* what, double ms, double flops) {
  std::printf("%-44s %9.3f ms %9.1f TFLOP/s\n", what, ms, flops / (ms * 1e-3) / 1e12);
}

int64_t flag_value(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const DeviceQuery q = query_devices();
  if (!q.ok || q.device_count == 0) {
    std::fprintf(stderr, "bench_cuda_kernels: no CUDA device: %s\n", q.message.c_str());
    return 2;
  }
  const int64_t batch = flag_value(argc, argv, "--batch", 8);
  const int64_t seq = flag_value(argc, argv, "--seq", 1024);
  const int iters = static_cast<int>(flag_value(argc, argv, "--iters", 20));
  const int64_t heads = 12, head_dim = 64, width = heads * head_dim, vocab = 50257;
  const int64_t n = batch * seq;
  std::printf("bench_cuda_kernels on %s: bf16, B=%lld T=%lld H=%lld D=%lld, %d iterations\n",
              q.message.c_str(), static_cast<long long>(batch), static_cast<long long>(seq),
              static_cast<long long>(heads), static_cast<long long>(head_dim), iters);

  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Attention on the packed c_attn output [B, T, 3 * width], as GPT-2 runs it.
  {
    AttentionShape shape;
    shape.batch = batch;
    shape.seq = seq;
    shape.n_head = shape.n_kv_head = heads;
    shape.head_dim = head_dim;
    shape.scale = 1.0 / 8.0;
    Bf16Buffer qkv(static_cast<size_t>(n * 3 * width), 1);
    Bf16Buffer out(static_cast<size_t>(n * width), 2), dout(static_cast<size_t>(n * width), 3);
    Bf16Buffer dqkv(static_cast<size_t>(n * 3 * width), 4);
    DeviceBytes lse(static_cast<size_t>(batch * heads * seq) * sizeof(float));
    DeviceBytes ws(attention_backward_workspace_bytes(shape));
    const DevPtr base = qkv.dev(), dbase = dqkv.dev();
    const DevQkv in{base, base.at(width), base.at(2 * width), 3 * width, 3 * width};
    const DevQkvGrad grad{dbase, dbase.at(width), dbase.at(2 * width), 3 * width, 3 * width};
    const double product = static_cast<double>(batch * heads) * seq * seq * head_dim;
    for (AttentionKernel kernel : {AttentionKernel::simt, AttentionKernel::tensor_core}) {
      const std::string name = attention_kernel_name(kernel);
      const double fwd = time_ms(stream, iters, [&] {
        attention_forward(stream, shape, in, out.dev(), static_cast<float*>(lse.ptr), kernel);
      });
      row(("attention forward, " + name).c_str(), fwd, 2 * product);
      const double bwd = time_ms(stream, iters, [&] {
        attention_backward(stream, shape, in, out.dev(), static_cast<const float*>(lse.ptr),
                           dout.dev(), grad,
                           Workspace{ws.ptr, attention_backward_workspace_bytes(shape)}, kernel);
      });
      row(("attention backward, " + name).c_str(), bwd, 5 * product);
    }
    // cuDNN's fused flash attention, its graphs built before timing as the
    // engine's sizing pass builds them; the backward includes the adds of
    // dQ, dK, dV into the gradients (the engine's += contract).
    CudnnAttention cudnn;
    const auto key = [&](CudnnDirection d) {
      return cudnn_attention_key("bench_cuda_kernels", shape, DType::bf16, 3 * width, 3 * width, d,
                                 false);
    };
    const size_t cudnn_bytes = std::max(cudnn.prepare(key(CudnnDirection::forward)),
                                        cudnn.prepare(key(CudnnDirection::backward)));
    DeviceBytes cudnn_ws(std::max<size_t>(cudnn_bytes, 1));
    const Workspace cws{cudnn_ws.ptr, cudnn_bytes};
    const double fwd = time_ms(stream, iters, [&] {
      cudnn.forward(stream, shape, in, out.dev(), static_cast<float*>(lse.ptr), cws);
    });
    row("attention forward, cudnn", fwd, 2 * product);
    const double bwd = time_ms(stream, iters, [&] {
      cudnn.backward(stream, shape, in, out.dev(), static_cast<const float*>(lse.ptr), dout.dev(),
                     grad, cws);
    });
    row("attention backward, cudnn (+= into dq, dk, dv)", bwd, 5 * product);
  }

  // The linear layers of one block (c_attn, attn c_proj, c_fc, mlp c_proj) and lm_head.
  {
    Blas blas;
    struct Linear {
      const char* name;
      int64_t in, out;
    };
    const Linear layers[] = {{"c_attn 768 -> 2304", width, 3 * width},
                             {"attn.c_proj 768 -> 768", width, width},
                             {"c_fc 768 -> 3072", width, 4 * width},
                             {"mlp.c_proj 3072 -> 768", 4 * width, width},
                             {"lm_head 768 -> 50257", width, vocab}};
    for (const Linear& l : layers) {
      Bf16Buffer x(static_cast<size_t>(n * l.in), 5), w(static_cast<size_t>(l.in * l.out), 6);
      Bf16Buffer y(static_cast<size_t>(n * l.out), 7), dx(static_cast<size_t>(n * l.in), 8);
      Bf16Buffer dw(static_cast<size_t>(l.in * l.out), 9);
      const size_t ws_bytes = linear_backward_workspace_bytes(n, l.in, l.out);
      DeviceBytes ws(ws_bytes > 0 ? ws_bytes : 1);
      const double flops = 2.0 * static_cast<double>(n) * l.in * l.out;
      const double fwd = time_ms(stream, iters, [&] {
        linear_forward(blas, stream, x.dev(), w.dev(), ConstDevPtr{}, y.dev(), n, l.in, l.out,
                       WeightLayout::in_out);
      });
      row((std::string("linear forward, ") + l.name).c_str(), fwd, flops);
      const double bwd = time_ms(stream, iters, [&] {
        linear_backward(blas, stream, x.dev(), w.dev(), y.dev(), dx.dev(), dw.dev(), DevPtr{}, n,
                        l.in, l.out, WeightLayout::in_out, Workspace{ws.ptr, ws_bytes});
      });
      row((std::string("linear backward, ") + l.name).c_str(), bwd, 2 * flops);
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
