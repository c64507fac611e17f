// What a fused SDPA kernel keeps besides the attention op's graph tensors
// (plan/sdpa.h FusedSdpaBytes): repeat_kv's k and v copies and the explicit
// mask, in the compute dtype, against sizes computed by hand from the
// tensors PyTorch 2.9.1 saves (saved-tensor hooks on the CPU flash kernel,
// transformers 4.57.6); and Phi-3's copy of SDPA's output.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/sdpa.h"

using namespace shardscope;

namespace {

nlohmann::json reference_config(const std::string& name) {
  std::ifstream in(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/reference/" + name + ".json");
  nlohmann::json j;
  in >> j;
  return j.at("config");
}

// fsdp2, bf16, 8 ranks, B = 2, T = 128, one unit per decoder layer: the
// references' setup.
plan::Schedule reference_schedule(const plan::Graph& g, const std::string& layer) {
  const plan::Policy p = plan::policy_from_json(
      {{"batch_size", 2},
       {"seq_len", 128},
       {"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}},
       {"wrap", {{"type", "class"}, {"classes", {layer}}}}});
  const plan::World w = plan::validate_policy(p, g, 8);
  const plan::UnitPlan up = plan::build_units(g, p, w);
  plan::Schedule s = plan::build_schedule(g, p, up, 0);
  REQUIRE(plan::check_schedule(g, up, s).empty());
  return s;
}

struct KernelSaved {
  int count = 0;
  int64_t bytes = 0;
  bool all_bf16 = true;
};

KernelSaved kernel_saved(const plan::Schedule& s) {
  KernelSaved k;
  for (const plan::Buffer& b : s.buffers)
    if (b.role == plan::BufferRole::kernel_saved) {
      ++k.count;
      k.bytes += b.bytes;
      k.all_bf16 = k.all_bf16 && b.dtype == plan::DType::bf16;
    }
  return k;
}

bool saved_by_attention(const plan::Graph& g, int tensor) {
  for (const plan::Op& op : g.ops)
    if (op.type == plan::OpType::attention &&
        std::find(op.saved.begin(), op.saved.end(), tensor) != op.saved.end())
      return true;
  return false;
}

}  // namespace

TEST_CASE("sdpa fused: repeated k and v and the mask, bytes by hand", "[plan][sdpa]") {
  plan::SdpaCall c;
  c.n_head = 4;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.seq_len = 128;
  c.dtype = plan::DType::bf16;
  c.explicit_mask = true;
  c.repeated_kv = true;
  c.kv_copied = true;
  // k and v [B=2, H=4, T=128, D=32] in bf16: 2 * 32768 * 2; the mask
  // [2, 1, 128, 128] in bf16: 32768 * 2.
  const plan::FusedSdpaBytes f = plan::fused_sdpa_bytes(c, 2, 2);
  CHECK(f.repeated_kv == 131072);
  CHECK(f.mask == 65536);
  CHECK(f.saved() == 196608);
  c.explicit_mask = false;
  CHECK(plan::fused_sdpa_bytes(c, 2, 4).saved() == 262144);  // fp32, no mask
  c.kv_copied = false;  // one KV head: repeat_kv's reshape is a view
  CHECK(plan::fused_sdpa_bytes(c, 2, 4).saved() == 0);
}

TEST_CASE("sdpa fused: repeat_kv copies k and v only with more than one KV head", "[plan][sdpa]") {
  // mistral-h128-l2-gqa4-sw64 (4 heads over 1): under the mask SDPA gets
  // H-headed k and v, but as expanded views of the roped k and of v_proj's
  // output (measured: SDPA keeps [2, 1, 128, 32] tensors), plus the mask.
  plan::Op op;
  op.type = plan::OpType::attention;
  op.attrs.n_head = 4;
  op.attrs.n_kv_head = 1;
  op.attrs.head_dim = 32;
  op.attrs.sliding_window = 64;
  const plan::SdpaCall mqa = plan::sdpa_call(op, plan::DType::bf16, 128);
  CHECK(mqa.repeated_kv);
  CHECK(mqa.kv_heads == 4);  // what the kernel choice sees
  CHECK_FALSE(mqa.kv_copied);
  const plan::FusedSdpaBytes f = plan::fused_sdpa_bytes(mqa, 2, 2);
  CHECK(f.repeated_kv == 0);
  CHECK(f.mask == 65536);
  op.attrs.n_kv_head = 2;
  CHECK(plan::sdpa_call(op, plan::DType::bf16, 128).kv_copied);
}

TEST_CASE("sdpa fused: Phi-3 under a 64-token window keeps repeated k, v and the mask",
          "[plan][sdpa][schedule]") {
  // phi3-h128-l2-gqa2-sw64: H = 4, Hkv = 2, D = 32, T = 128 >= window 64, so
  // transformers passes a [B, 1, T, T] mask and k, v repeated to 4 heads.
  const plan::Graph g = plan::model_from_hf_config(
      reference_config("phi3-h128-l2-gqa2-sw64-fsdp2-bf16-w8-b2-t128-rafT-ac0"), "phi3");
  const KernelSaved k = kernel_saved(reference_schedule(g, "Phi3DecoderLayer"));
  // Per layer: k and v 2 * B*T*H*D * 2 B = 131072, the mask B*T*T * 2 B = 65536.
  CHECK(k.count == 2);
  CHECK(k.bytes == 2 * (131072 + 65536));
  CHECK(k.all_bf16);
  // SDPA keeps q's roped copy, not the packed qkv_proj output (v is a copy
  // now, no view of it) nor the 2-headed roped k.
  for (const plan::Op& op : g.ops) {
    if (op.type != plan::OpType::attention) continue;
    const plan::SdpaCall call = plan::sdpa_call(op, plan::DType::bf16, 128);
    const std::vector<int> kept = plan::sdpa_graph_saved(op, plan::SdpaKernel::flash_cpu, call);
    auto has = [&](int t) { return std::find(kept.begin(), kept.end(), t) != kept.end(); };
    CHECK_FALSE(has(op.inputs[0]));
    CHECK(has(op.outputs[2]));        // q_roped
    CHECK_FALSE(has(op.outputs[3]));  // k_roped
    CHECK(has(op.outputs[0]));
    CHECK(has(op.outputs[1]));
  }
}

TEST_CASE("sdpa fused: Phi-3's rotary ends in cat, so o_proj saves a copy of SDPA's output",
          "[plan][sdpa]") {
  // q_embed = torch.cat([...], dim=-1) is contiguous [B, H, T, D]; SDPA's
  // output follows q's layout and transpose(1, 2).contiguous() copies it.
  const plan::Graph g =
      plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/phi3-tiny.json");
  int copies = 0;
  for (size_t t = 0; t < g.tensors.size(); ++t)
    if (g.tensors[t].name.find(".out_bhtd") != std::string::npos) {
      ++copies;
      CHECK(saved_by_attention(g, static_cast<int>(t)));
    }
  CHECK(copies == 2);
}

TEST_CASE("sdpa fused: Qwen2-MoE's attention repeats k and v without a mask, Mixtral's does not",
          "[plan][sdpa][schedule]") {
  // Qwen2MoeSdpaAttention calls repeat_kv before SDPA (is_causal, no mask):
  // 3 layers of k and v at 4 heads, 2 * B*T*H*D * 2 B = 131072 each.
  const plan::Graph qwen = plan::model_from_hf_config(
      reference_config("qwen2moe-h128-l3-e4k2-fsdp2-bf16-w8-b2-t128-rafT-ac0"), "qwen2moe");
  const KernelSaved q = kernel_saved(reference_schedule(qwen, "Qwen2MoeDecoderLayer"));
  CHECK(q.count == 3);
  CHECK(q.bytes == 3 * 131072);
  CHECK(q.all_bf16);
  // Mixtral passes enable_gqa: k and v stay at their 2 heads, nothing extra.
  const plan::Graph mixtral = plan::model_from_hf_config(
      reference_config("mixtral-h128-l2-e4k2-fsdp2-bf16-w8-b2-t128-rafT-ac0"), "mixtral");
  CHECK(kernel_saved(reference_schedule(mixtral, "MixtralDecoderLayer")).count == 0);
}
