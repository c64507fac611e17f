// The executor's layout kernels (engine/cuda/exec/exec_kernels.h) against
// engine/exec/layout.h's host implementation on a real fsdp2 unit (gpt2-tiny's
// first block over 4 ranks: per-parameter chunks make the permutation
// non-trivial): copy-out and gradient cast give the same elements exactly
// (fp32 moves values; bf16 rounds to nearest even as store_f32 does).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/exec/exec_kernels.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/layout.h"
#include "plan/units.h"
#include "tests/engine/cuda/test_cuda_exec_util.h"

using namespace shardscope;

namespace {

#define REQUIRE_CUDA(expr) REQUIRE((expr) == cudaSuccess)

struct Device {
  explicit Device(size_t bytes) { REQUIRE_CUDA(cudaMalloc(&ptr, bytes)); }
  ~Device() { cudaFree(ptr); }
  void* ptr = nullptr;
};

// The first GPT-2 block: several parameters, each chunked by rows over 4 ranks.
const plan::Unit& pick_unit(const plan::UnitPlan& units) {
  for (const plan::Unit& u : units.units)
    if (u.name.find("h.0") != std::string::npos && u.shard_numel > 0) return u;
  return units.units.at(1);
}

}  // namespace

TEST_CASE("layout kernels equal the host layout on an fsdp2 unit of 4 ranks", "[cuda][exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const plan::Policy policy = test::make_policy(
      {"batch_size=1", "seq_len=8", "wrap.type=class", "wrap.classes=[\"GPT2Block\"]"});
  const plan::World world = plan::validate_policy(policy, g, 4);
  const plan::UnitPlan units = plan::build_units(g, policy, world);
  const plan::Unit& unit = pick_unit(units);
  const engine::exec::UnitLayout lay(g, unit, plan::Flavor::fsdp2, 4);
  const int64_t full = lay.full_numel();
  REQUIRE(lay.params().size() > 1);

  std::vector<int64_t> table;
  for (const auto& pp : lay.params()) table.push_back(pp.shard_offset);
  for (const auto& pp : lay.params()) table.push_back(pp.chunk);
  for (const auto& pp : lay.params()) table.push_back(pp.unsharded);
  Device table_dev(table.size() * sizeof(int64_t));
  REQUIRE_CUDA(cudaMemcpy(table_dev.ptr, table.data(), table.size() * sizeof(int64_t),
                          cudaMemcpyHostToDevice));
  engine::cuda::DevLayout dl;
  dl.table = static_cast<const int64_t*>(table_dev.ptr);
  dl.count = static_cast<int32_t>(lay.params().size());
  dl.shard_numel = lay.shard_numel();
  dl.full_numel = full;
  dl.identity = false;

  std::vector<float> a(static_cast<size_t>(full)), b(static_cast<size_t>(full));
  for (int64_t i = 0; i < full; ++i) {
    a[static_cast<size_t>(i)] = 0.001f * static_cast<float>(i % 977) - 0.3f;
    b[static_cast<size_t>(i)] = 0.0007f * static_cast<float>(i % 331) + 0.01f;
  }
  const size_t bytes = static_cast<size_t>(full) * sizeof(float);
  Device a_dev(bytes), b_dev(bytes), out_dev(bytes);
  REQUIRE_CUDA(cudaMemcpy(a_dev.ptr, a.data(), bytes, cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaMemcpy(b_dev.ptr, b.data(), bytes, cudaMemcpyHostToDevice));

  SECTION("copy-out: gathered to unsharded, fp32, exact") {
    engine::cuda::gathered_to_unsharded(nullptr, dl, {a_dev.ptr, plan::DType::f32},
                                        {out_dev.ptr, plan::DType::f32});
    std::vector<float> got(a.size()), want(a.size());
    REQUIRE_CUDA(cudaMemcpy(got.data(), out_dev.ptr, bytes, cudaMemcpyDeviceToHost));
    lay.gathered_to_unsharded(a.data(), want.data(), 4);
    CHECK(got == want);
  }
  SECTION("gradient cast: (a + b) unsharded to gathered, rounded to bf16") {
    const engine::cuda::ConstDevPtr src[2] = {{a_dev.ptr, plan::DType::f32},
                                              {b_dev.ptr, plan::DType::f32}};
    engine::cuda::unsharded_to_gathered(nullptr, dl, src, 2, {out_dev.ptr, plan::DType::bf16}, 0,
                                        full);
    std::vector<uint16_t> got(a.size());
    REQUIRE_CUDA(cudaMemcpy(got.data(), out_dev.ptr, got.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> sum(a.size()), gathered(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = 0.0f + a[i] + b[i];
    lay.unsharded_to_gathered(sum.data(), gathered.data(), 4);
    std::vector<uint16_t> want(a.size());
    engine::exec::store_f32(gathered.data(), want.data(), plan::DType::bf16, full);
    CHECK(got == want);
  }
  SECTION("reshard copy: a slice of the gathered layout") {
    const int64_t len = full / 2;
    const engine::cuda::ConstDevPtr src[1] = {{a_dev.ptr, plan::DType::f32}};
    engine::cuda::unsharded_to_gathered(nullptr, dl, src, 1, {out_dev.ptr, plan::DType::f32}, len,
                                        len);
    std::vector<float> got(static_cast<size_t>(len)), gathered(a.size());
    REQUIRE_CUDA(cudaMemcpy(got.data(), out_dev.ptr, got.size() * 4, cudaMemcpyDeviceToHost));
    lay.unsharded_to_gathered(a.data(), gathered.data(), 4);
    CHECK(got == std::vector<float>(gathered.begin() + len, gathered.end()));
  }
}
