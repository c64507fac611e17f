// Gradients of a parameter used by two ops (a tied embedding and lm_head):
// each producer's backward writes its own full-size gradient and autograd
// sums them out of place, so the earlier gradient, the later one and their
// sum are live at once (docs/schedule.md, "Shared parameters").
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "plan/models.h"
#include "plan/schedule.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// Qwen3-shaped, tied, at a vocabulary large next to its width (V/H = 128,
// as Qwen3-0.6B's 151936 / 1024 is about 148).
json tied_config(int64_t vocab) {
  return {{"model_type", "qwen3"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"vocab_size", vocab},
          {"max_position_embeddings", 128},
          {"rope_theta", 1000000.0},
          {"rms_norm_eps", 1e-6},
          {"tie_word_embeddings", true},
          {"use_sliding_window", false}};
}

struct SharedGradTrace {
  int64_t max_live_bytes = 0;  // of the tied parameter's unsharded gradients
  int sums = 0;                // grad_accumulate ops over them
  int64_t sum_op_bytes = 0;
};

SharedGradTrace trace_tied_grads(const plan::Graph& g, const plan::Schedule& s, int param) {
  SharedGradTrace out;
  int64_t live = 0;
  auto of_param = [&](int b) {
    const plan::Buffer& buf = s.buffers[static_cast<size_t>(b)];
    return buf.role == plan::BufferRole::unsharded_grad && buf.param == param;
  };
  for (const plan::Action& a : s.actions) {
    if (a.kind == plan::ActionKind::alloc && of_param(a.buffer))
      live += s.buffers[static_cast<size_t>(a.buffer)].bytes;
    if (a.kind == plan::ActionKind::free && of_param(a.buffer))
      live -= s.buffers[static_cast<size_t>(a.buffer)].bytes;
    out.max_live_bytes = std::max(out.max_live_bytes, live);
    if (a.kind != plan::ActionKind::launch) continue;
    const plan::ScheduleOp& op = s.ops[static_cast<size_t>(a.op)];
    if (op.kind != plan::OpKind::grad_accumulate) continue;
    bool all = op.buffers.size() == 3;
    for (int b : op.buffers) all = all && of_param(b);
    if (!all) continue;
    ++out.sums;
    out.sum_op_bytes = op.bytes;
    // The sum comes right after the embedding's backward (the op before it).
    const plan::ScheduleOp& prev = s.ops[static_cast<size_t>(a.op - 1)];
    CHECK(prev.kind == plan::OpKind::backward);
    CHECK(g.ops[static_cast<size_t>(prev.graph_op)].type == plan::OpType::embedding);
  }
  CHECK(live == 0);
  return out;
}

}  // namespace

TEST_CASE("tied embedding: both producers' gradients and their sum are live at once",
          "[plan][schedule][tied]") {
  test::TempDir dir;
  const int64_t vocab = 8192, hidden = 64;
  const plan::Graph g = plan::load_model(dir.write("tied.json", tied_config(vocab)));
  const int embed = g.find_param("model.embed_tokens.weight");
  REQUIRE(embed >= 0);
  REQUIRE(g.find_param("lm_head.weight") < 0);  // tied: lm_head reads the embedding's weight
  for (const std::string dtype : {"bf16", "fp32"})
    for (const std::string ckpt : {"none", "full"}) {
      const json doc = {{"batch_size", 2},
                        {"seq_len", 16},
                        {"mixed_precision", {{"param_dtype", dtype}}},
                        {"wrap", {{"type", "class"}, {"classes", {"Qwen3DecoderLayer"}}}},
                        {"activation_checkpointing", ckpt}};
      INFO(doc.dump());
      const plan::Policy p = plan::policy_from_json(doc);
      const plan::World w = plan::validate_policy(p, g, 8);
      const plan::UnitPlan up = plan::build_units(g, p, w);
      const plan::Schedule s = plan::build_schedule(g, p, up, 0);
      REQUIRE(plan::check_schedule(g, up, s).empty());
      const int64_t one = vocab * hidden * (dtype == "bf16" ? 2 : 4);  // V x H in param dtype
      const SharedGradTrace t = trace_tied_grads(g, s, embed);
      CHECK(t.sums == 1);
      CHECK(t.max_live_bytes == 3 * one);  // lm_head's, the embedding's, the sum
      CHECK(t.sum_op_bytes == 3 * one);
    }
}

TEST_CASE("tied embedding: one sum per micro-step, none without a second producer",
          "[plan][schedule][tied]") {
  test::TempDir dir;
  json cfg = tied_config(4096);
  const plan::Graph tied = plan::load_model(dir.write("tied.json", cfg));
  cfg["tie_word_embeddings"] = false;
  const plan::Graph untied = plan::load_model(dir.write("untied.json", cfg));
  const json doc = {{"batch_size", 1}, {"seq_len", 8}, {"grad_accum_steps", 2}};
  const plan::Policy p = plan::policy_from_json(doc);
  for (const plan::Graph* g : {&tied, &untied}) {
    const plan::World w = plan::validate_policy(p, *g, 4);
    const plan::UnitPlan up = plan::build_units(*g, p, w);
    const plan::Schedule s = plan::build_schedule(*g, p, up, 0);
    REQUIRE(plan::check_schedule(*g, up, s).empty());
    const SharedGradTrace t = trace_tied_grads(*g, s, g->find_param("model.embed_tokens.weight"));
    CHECK(t.sums == (g == &tied ? 2 : 0));
    // fp32 parameters (the default): 4 B; untied: the embedding's own gradient only.
    CHECK(t.max_live_bytes == (g == &tied ? 3 : 1) * 4096 * 64 * 4);
  }
}
