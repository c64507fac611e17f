// The SDPA kernel PyTorch 2.11 picks (plan/sdpa.h) and what the math
// fallback keeps for backward, against sizes computed by hand.
#include <catch2/catch.hpp>

#include <string>

#include "plan/error.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/sdpa.h"

using namespace shardscope;

namespace {

plan::SdpaCall call(int64_t h, int64_t kv, int64_t d, plan::DType dtype, bool mask = false) {
  plan::SdpaCall c;
  c.n_head = h;
  c.kv_heads = kv;
  c.head_dim = d;
  c.seq_len = 128;
  c.dtype = dtype;
  c.explicit_mask = mask;
  return c;
}

const plan::DeviceFamily kCpu{};
const plan::DeviceFamily kSm80{true, 80};
const plan::DeviceFamily kSm90{true, 90};

plan::SdpaKernel pick(const plan::SdpaCall& c, const plan::DeviceFamily& d) {
  return plan::choose_sdpa_kernel(c, d, plan::SdpaBackend::automatic).kernel;
}

// Bytes of the buffers of `role` allocated in a schedule.
int64_t role_bytes(const plan::Schedule& s, plan::BufferRole role, int* count) {
  int64_t bytes = 0;
  for (const plan::Buffer& b : s.buffers)
    if (b.role == role) {
      bytes += b.bytes;
      ++*count;
    }
  return bytes;
}

}  // namespace

TEST_CASE("sdpa: fp32 with grouped KV heads falls back to math on Hopper and Ampere",
          "[plan][sdpa]") {
  using plan::DType;
  using plan::SdpaKernel;
  // cuDNN and flash take fp16/bf16 only; memory-efficient refuses enable_gqa.
  const plan::SdpaChoice c =
      plan::choose_sdpa_kernel(call(4, 2, 32, DType::f32), kSm90, plan::SdpaBackend::automatic);
  CHECK(c.kernel == SdpaKernel::math);
  CHECK(c.refused.find("cudnn: f32 (needs fp16 or bf16)") != std::string::npos);
  CHECK(c.refused.find("efficient: grouped KV heads (4 query heads over 2") != std::string::npos);
  CHECK(pick(call(4, 2, 32, DType::f32), kSm80) == SdpaKernel::math);
  // Equal heads: memory-efficient runs fp32 (the H200 references' MHA runs).
  CHECK(pick(call(4, 4, 32, DType::f32), kSm90) == SdpaKernel::efficient);
  // bf16: cuDNN first on sm_90 (torch 2.11, cuDNN 9.19), flash first on sm_80.
  CHECK(pick(call(4, 2, 32, DType::bf16), kSm90) == SdpaKernel::cudnn);
  CHECK(pick(call(4, 2, 32, DType::bf16), kSm80) == SdpaKernel::flash);
  // An explicit mask (sliding window): flash refuses it, memory-efficient takes it.
  CHECK(pick(call(4, 4, 32, DType::bf16, true), kSm80) == SdpaKernel::efficient);
  // head_dim: cuDNN up to 256 on sm_90 (128 elsewhere), flash up to 256; fp32
  // memory-efficient needs a multiple of 4.
  CHECK(pick(call(4, 4, 192, DType::bf16), kSm90) == SdpaKernel::cudnn);
  CHECK(pick(call(4, 4, 192, DType::bf16), kSm80) == SdpaKernel::flash);
  CHECK(pick(call(4, 4, 512, DType::bf16), kSm90) == SdpaKernel::efficient);
  CHECK(pick(call(4, 4, 6, DType::f32), kSm90) == SdpaKernel::math);
  // Below sm_80 neither flash nor cuDNN runs.
  CHECK(pick(call(4, 4, 64, DType::f16), plan::DeviceFamily{true, 75}) == SdpaKernel::efficient);
  // The CPU runs its flash kernel whatever the heads and dtype.
  CHECK(pick(call(4, 2, 32, DType::f32), kCpu) == SdpaKernel::flash_cpu);
  CHECK(pick(call(4, 2, 6, DType::bf16, true), kCpu) == SdpaKernel::flash_cpu);
}

TEST_CASE("sdpa: a forced backend that cannot run the call is an error naming the reason",
          "[plan][sdpa]") {
  using plan::DType;
  auto forced = [](plan::SdpaBackend b, const plan::SdpaCall& c, const plan::DeviceFamily& d) {
    return plan::choose_sdpa_kernel(c, d, b).kernel;
  };
  CHECK_THROWS_WITH(forced(plan::SdpaBackend::efficient, call(4, 2, 32, DType::f32), kSm90),
                    Catch::Contains("policy: attention.sdpa_backend: \"efficient\" cannot run on "
                                    "sm_90: grouped KV heads (4 query heads over 2"));
  CHECK_THROWS_WITH(forced(plan::SdpaBackend::flash, call(4, 4, 32, DType::f32), kSm90),
                    Catch::Contains("\"flash\" cannot run on sm_90: f32 (needs fp16 or bf16)"));
  CHECK_THROWS_WITH(forced(plan::SdpaBackend::cudnn, call(4, 4, 32, DType::bf16), kCpu),
                    Catch::Contains("\"cudnn\" cannot run on cpu: no such CPU kernel"));
  CHECK(forced(plan::SdpaBackend::math, call(4, 4, 32, DType::bf16), kSm90) ==
        plan::SdpaKernel::math);
  CHECK(forced(plan::SdpaBackend::math, call(4, 4, 32, DType::f32), kCpu) ==
        plan::SdpaKernel::math);
  CHECK(forced(plan::SdpaBackend::flash, call(4, 2, 32, DType::bf16), kSm90) ==
        plan::SdpaKernel::flash);
  CHECK_THROWS_WITH(plan::parse_device_family("gfx942", "device"),
                    Catch::Contains("device: expected \"cpu\" or a CUDA arch"));
  CHECK(plan::parse_device_family("sm_100", "device") == plan::DeviceFamily{true, 100});
}

TEST_CASE("sdpa: transformers' call: repeat_kv under a sliding-window mask, else enable_gqa",
          "[plan][sdpa]") {
  plan::Op op;
  op.type = plan::OpType::attention;
  op.attrs.n_head = 8;
  op.attrs.n_kv_head = 2;
  op.attrs.head_dim = 64;
  op.attrs.sliding_window = 64;
  const plan::SdpaCall windowed = plan::sdpa_call(op, plan::DType::bf16, 128);
  CHECK(windowed.explicit_mask);
  CHECK(windowed.repeated_kv);
  CHECK(windowed.kv_heads == 8);
  // T < W: masking_utils drops the mask (is_causal), k and v keep 2 heads.
  const plan::SdpaCall short_seq = plan::sdpa_call(op, plan::DType::bf16, 32);
  CHECK_FALSE(short_seq.explicit_mask);
  CHECK(short_seq.kv_heads == 2);
}

TEST_CASE("sdpa: the math fallback's saved bytes and temporaries, by hand", "[plan][sdpa]") {
  // B 2, H 4, Hkv 2, T 128, D 32, fp32: B*H*T*D = 32768, B*H*T*T = 131072.
  const plan::MathSdpaBytes m = plan::math_sdpa_bytes(call(4, 2, 32, plan::DType::f32), 2, 4);
  // q*s, k^T*s, v expanded (3 x 32768) and the probabilities, fp32.
  CHECK(m.saved == (3 * 32768 + 131072) * 4);
  // q*s, k expanded, scores and softmax, the causal mask [T, T] in fp32.
  CHECK(m.forward_temps == (2 * 32768 + 2 * 131072) * 4 + 128 * 128 * 4);
  CHECK(m.backward_temps == 2 * 131072 * 4);
  CHECK_FALSE(m.keeps_graph_v);
  // Equal heads in fp32: v is the graph's own v, kept as a graph tensor.
  const plan::MathSdpaBytes mha = plan::math_sdpa_bytes(call(4, 4, 32, plan::DType::f32), 2, 4);
  CHECK(mha.keeps_graph_v);
  CHECK(mha.saved == (2 * 32768 + 131072) * 4);
  // bf16: everything upcast to fp32; q and k copies (4 and 2 heads) on top.
  const plan::MathSdpaBytes lowp = plan::math_sdpa_bytes(call(4, 4, 32, plan::DType::bf16), 2, 2);
  CHECK(lowp.saved == (3 * 32768 + 131072) * 4);
  CHECK(lowp.forward_temps == (32768 + 2 * 131072) * 4 + 128 * 128 * 4 + (32768 + 32768) * 4);
}

TEST_CASE("sdpa: the math fallback's temporaries are one block per tensor PyTorch allocates",
          "[plan][sdpa]") {
  // B 2, H 4, Hkv 2, T 128, D 32, fp32 (as above): q*s 131,072 B, scores and
  // softmax 524,288 B each, k expanded 131,072 B, the causal mask 65,536 B.
  // Their sum (1.31 MiB) as one block would be a large-pool request (a 20 MiB
  // segment on the H200); each alone fits the small pool, as in PyTorch.
  const plan::MathSdpaBytes m = plan::math_sdpa_bytes(call(4, 2, 32, plan::DType::f32), 2, 4);
  CHECK(m.forward_pieces == std::vector<int64_t>{131072, 524288, 524288, 131072, 65536});
  // The probabilities' and the scores' gradients.
  CHECK(m.backward_pieces == std::vector<int64_t>{524288, 524288});
  int64_t fwd = 0, bwd = 0;
  for (int64_t b : m.forward_pieces) fwd += b;
  for (int64_t b : m.backward_pieces) bwd += b;
  CHECK(fwd == m.forward_temps);
  CHECK(bwd == m.backward_temps);
  // bf16: the upcast copies of q (4 heads) and k (2 heads) are blocks too.
  const plan::MathSdpaBytes lowp = plan::math_sdpa_bytes(call(4, 2, 32, plan::DType::bf16), 2, 2);
  CHECK(lowp.forward_pieces ==
        std::vector<int64_t>{131072, 524288, 524288, 131072, 65536, 131072, 65536, 65536});
}

TEST_CASE("sdpa: a math plan keeps kernel_saved buffers and no log-sum-exp, a CPU plan none",
          "[plan][sdpa][schedule]") {
  // llama-tiny: 2 layers, 4 heads over 2 KV heads, head_dim 16, fp32.
  const plan::Graph g = plan::load_model("llama-tiny");
  const nlohmann::json doc = {{"batch_size", 2},
                              {"seq_len", 64},
                              {"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}}};
  for (const bool cuda : {false, true})
    for (const std::string ckpt : {"none", "full"}) {
      nlohmann::json d = doc;
      d["activation_checkpointing"] = ckpt;
      INFO(d.dump() << " cuda " << cuda);
      plan::Policy p = plan::policy_from_json(d);
      p.device = cuda ? kSm90 : kCpu;
      const plan::World w = plan::validate_policy(p, g, 4);
      const plan::UnitPlan up = plan::build_units(g, p, w);
      const plan::Schedule s = plan::build_schedule(g, p, up, 0);
      REQUIRE(plan::check_schedule(g, up, s).empty());
      int count = 0;
      const int64_t bytes = role_bytes(s, plan::BufferRole::kernel_saved, &count);
      // B*H*T*D = 2*4*64*16 = 8192, B*H*T*T = 32768: q*s, k*s, v expanded
      // and the probabilities in fp32, per layer; checkpointing: once in
      // forward (dropped) and again in the recompute.
      const int64_t per_layer = (3 * 8192 + 32768) * 4;
      const int passes = ckpt == "full" ? 2 : 1;
      CHECK(count == (cuda ? 2 * passes : 0));
      CHECK(bytes == (cuda ? 2 * passes * per_layer : 0));
      // The log-sum-exp (fp32 [B, H, T]) exists only for the fused kernel.
      int lse = 0;
      for (const plan::Buffer& b : s.buffers)
        if (b.tensor >= 0 &&
            g.tensors[static_cast<size_t>(b.tensor)].name.find(".lse") != std::string::npos)
          ++lse;
      CHECK((lse > 0) == !cuda);
    }
}
