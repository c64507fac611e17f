// engine/cuda/ops/hf_math.h on the host (no GPU, no CUDA compiler): the
// per-element math and index functions the gated, softcap, RMSNorm and
// embedding kernels run reproduce the CPU twins bit for bit when compiled as
// plain C++ (the same expressions in the same order, std:: functions), and
// the strided index lands where Phi-3's packed gate|up keeps each element.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/hf_math.h"

namespace shardscope::engine::cuda {
namespace {

using cpu::GateActivation;
using FVec = std::vector<float>;

FVec uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  FVec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// What gated_forward_kernel / gated_backward_kernel compute, element by
// element over the dense [rows, width] output, on the host.
void host_gated(const float* gate, const float* up, const float* dy, float* y, float* dgate,
                float* dup, int64_t rows, int64_t width, int64_t stride, GateActivation act) {
  for (int64_t i = 0; i < rows * width; ++i) {
    const int64_t at = hf::strided_offset(i, width, stride);
    y[i] = hf::gated_value(gate[at], up[at], act);
    hf::gated_backward_element(gate[at], up[at], dy[i], act, dgate[at], dup[at]);
  }
}

}  // namespace

TEST_CASE("strided_offset maps a dense gated element to its packed gate|up column") {
  // rows of width 4 in a packed [rows, 2 * 4] buffer: element (1, 1) at 8 + 1.
  CHECK(hf::strided_offset(5, 4, 8) == 9);
  CHECK(hf::strided_offset(0, 4, 8) == 0);
  CHECK(hf::strided_offset(3, 4, 8) == 3);
  CHECK(hf::strided_offset(11, 4, 8) == 2 * 8 + 3);
  // Unpacked: one row of rows * width, the index itself.
  CHECK(hf::strided_offset(11, 12, 12) == 11);
}

TEST_CASE("the gated math reproduces cpu::gated_forward and gated_backward bit for bit") {
  const GateActivation acts[] = {GateActivation::silu, GateActivation::gelu,
                                 GateActivation::gelu_tanh};
  uint32_t seed = 1;
  for (const GateActivation act : acts)
    for (const bool packed : {true, false}) {
      INFO("act " << static_cast<int>(act) << " packed " << packed);
      std::mt19937 rng(++seed);
      const int64_t rows = 5, width = 7, n = rows * width;
      const int64_t stride = packed ? 2 * width : n, r = packed ? rows : 1, w = packed ? width : n;
      // Packed: one [rows, 2 * width] buffer; else gate then up, each n.
      const FVec in = uniform(rng, static_cast<size_t>(2 * n), -4.0f, 4.0f);
      const float* gate = in.data();
      const float* up = packed ? in.data() + width : in.data() + n;
      const FVec dy = uniform(rng, static_cast<size_t>(n), -1.0f, 1.0f);
      const FVec g0 = uniform(rng, static_cast<size_t>(2 * n), -1.0f, 1.0f);
      FVec y_cpu(static_cast<size_t>(n)), y_host(static_cast<size_t>(n));
      FVec g_cpu = g0, g_host = g0;
      auto dup_of = [&](FVec& g) { return packed ? g.data() + width : g.data() + n; };
      cpu::gated_forward(gate, up, y_cpu.data(), r, w, stride, act);
      cpu::gated_backward(gate, up, dy.data(), g_cpu.data(), dup_of(g_cpu), r, w, stride, act);
      host_gated(gate, up, dy.data(), y_host.data(), g_host.data(), dup_of(g_host), r, w, stride,
                 act);
      CHECK(y_host == y_cpu);
      CHECK(g_host == g_cpu);  // dgate and dup, packed or not, untouched gaps included
    }
}

TEST_CASE("silu through the gated math equals swiglu's, so Phi-3's packed MLP trains as Llama's") {
  std::mt19937 rng(7);
  const FVec g = uniform(rng, 64, -6.0f, 6.0f), u = uniform(rng, 64, -1.0f, 1.0f);
  FVec y(64);
  cpu::swiglu_forward(g.data(), u.data(), y.data(), 64);
  for (size_t i = 0; i < 64; ++i) CHECK(hf::gated_value(g[i], u[i], GateActivation::silu) == y[i]);
}

TEST_CASE("softcap math reproduces cpu::softcap_forward and backward bit for bit") {
  std::mt19937 rng(3);
  const float cap = 30.0f;
  const FVec x = uniform(rng, 200, -120.0f, 120.0f), dy = uniform(rng, 200, -1.0f, 1.0f);
  FVec y(200), th(200), dx(200, 0.5f);
  cpu::softcap_forward(x.data(), y.data(), th.data(), 200, cap);
  cpu::softcap_backward(th.data(), dy.data(), dx.data(), 200);
  for (size_t i = 0; i < 200; ++i) {
    float yh = 0.0f, thh = 0.0f;
    hf::softcap_element(x[i], cap, yh, thh);
    CHECK(yh == y[i]);
    CHECK(thh == th[i]);
    CHECK(0.5f + dy[i] * hf::softcap_slope(th[i]) == dx[i]);
  }
  // Saturated: |y| reaches the cap, never beyond.
  float ys = 0.0f, ths = 0.0f;
  hf::softcap_element(1e6f, cap, ys, ths);
  CHECK(ys == cap);
  CHECK(hf::softcap_slope(ths) == 0.0f);
}

TEST_CASE("rms_weight gives cpu::rmsnorm_forward's (offset + w) products bit for bit") {
  std::mt19937 rng(5);
  const int64_t n = 6, c = 8;  // 6 heads of 8
  const FVec x = uniform(rng, n * c, -2.0f, 2.0f), w = uniform(rng, c, -0.5f, 0.5f);
  for (const double offset : {0.0, 1.0}) {
    INFO("offset " << offset);
    FVec y(static_cast<size_t>(n * c)), rstd(static_cast<size_t>(n));
    cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), n, c, 1e-6, offset);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < c; ++i) {
        const float wk = hf::rms_weight(w[static_cast<size_t>(i)], static_cast<float>(offset));
        CHECK(x[static_cast<size_t>(r * c + i)] * rstd[static_cast<size_t>(r)] * wk ==
              y[static_cast<size_t>(r * c + i)]);
      }
  }
  CHECK(hf::rms_weight(0.25f, 1.0f) == 1.25f);
  CHECK(hf::rms_weight(0.25f, 0.0f) == 0.25f);
}

TEST_CASE("embedding_grad_row skips padding_idx and out-of-range ids, never positions") {
  const std::vector<int64_t> ids = {3, 1, -1, 7, 1, 0};
  const int64_t rows = 5, padding = 1;
  const int64_t want[] = {3, -1, -1, -1, -1, 0};
  for (int64_t i = 0; i < 6; ++i) {
    INFO("row " << i);
    CHECK(hf::embedding_grad_row(ids.data(), i, rows, padding) == want[i]);
  }
  CHECK(hf::embedding_grad_row(ids.data(), 1, rows, -1) == 1);    // no padding: id 1 counts
  CHECK(hf::embedding_grad_row(nullptr, 1, rows, padding) == 1);  // positions: row i
  CHECK(hf::embedding_grad_row(nullptr, 5, rows, padding) == -1);

  // The scatter the backward kernels do, against cpu::embedding_backward.
  const std::vector<int64_t> valid = {3, 1, 4, 1, 0};
  const int64_t dim = 2;
  const FVec dout = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  FVec ref(static_cast<size_t>(rows * dim), 0.0f), got = ref;
  cpu::embedding_backward(valid.data(), dout.data(), ref.data(), 5, rows, dim, padding);
  for (int64_t i = 0; i < 5; ++i) {
    const int64_t row = hf::embedding_grad_row(valid.data(), i, rows, padding);
    if (row < 0) continue;
    for (int64_t c = 0; c < dim; ++c)
      got[static_cast<size_t>(row * dim + c)] += dout[static_cast<size_t>(i * dim + c)];
  }
  CHECK(got == ref);
  CHECK(ref[2] == 0.0f);  // row 1, the padding row: nothing
  CHECK(ref[3] == 0.0f);
}

}  // namespace shardscope::engine::cuda
