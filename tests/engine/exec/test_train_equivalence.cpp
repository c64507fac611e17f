// Equivalence of sharded training with unsharded single-rank training on the
// same global batch (ranks as threads): losses within 1e-5 relative, final
// parameters within 1e-5 relative norm per tensor, in fp32.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/exec/train.h"
#include "plan/models.h"

using namespace shardscope;

namespace {

struct Case {
  std::string model;
  std::vector<std::string> sets;  // --set style assignments
  int world = 2;
};

plan::Policy make_policy(const std::vector<std::string>& sets) {
  nlohmann::json doc = nlohmann::json::object();
  for (const std::string& s : sets) plan::apply_set(doc, s);
  return plan::policy_from_json(doc);
}

engine::exec::TrainConfig config_for(const plan::Graph& g, plan::Policy p, int world) {
  engine::exec::TrainConfig c;
  c.graph = &g;
  c.policy = std::move(p);
  c.world_size = world;
  c.steps = 3;
  return c;
}

// Worst relative differences seen (printed by the grid test for the docs).
double g_worst_loss = 0, g_worst_param = 0;

double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    r += double(ref[i]) * ref[i];
  }
  return std::sqrt(d) / std::max(std::sqrt(r), 1e-30);
}

// Trains `c` with `world` ranks and a world-1 reference with the same global
// batch; returns the worst relative differences.
void check_equivalent(const Case& c) {
  const plan::Graph g = plan::load_model(c.model);
  std::vector<std::string> base = {"batch_size=2", "seq_len=16"};
  if (c.model == "mlp") base = {"batch_size=4"};
  // SGD with momentum: AdamW divides by sqrt(v) + eps and so turns the
  // rounding noise of gradients that are zero in exact arithmetic (GPT-2's
  // key bias: softmax is shift-invariant) into full-size steps; see the AdamW case.
  base.push_back("optimizer={\"type\":\"sgd\",\"lr\":0.05,\"momentum\":0.9}");
  std::vector<std::string> sets = base;
  sets.insert(sets.end(), c.sets.begin(), c.sets.end());
  engine::exec::TrainHooks hooks;
  hooks.gather_final_params = true;
  const auto runs = engine::exec::train_threads(config_for(g, make_policy(sets), c.world), hooks);

  std::vector<std::string> ref_sets = {c.model == "mlp"
                                           ? "batch_size=" + std::to_string(4 * c.world)
                                           : "batch_size=" + std::to_string(2 * c.world)};
  if (c.model != "mlp") ref_sets.push_back("seq_len=16");
  ref_sets.push_back(base.back());
  for (const std::string& s : c.sets)
    if (s.rfind("grad_accum_steps", 0) == 0 || s.rfind("optimizer", 0) == 0 ||
        s.rfind("grad_clip_norm", 0) == 0 || s.rfind("token_balance", 0) == 0 ||
        s.rfind("moe_routing", 0) == 0)
      ref_sets.push_back(s);
  const auto ref = engine::exec::train_threads(config_for(g, make_policy(ref_sets), 1), hooks);

  REQUIRE(runs[0].losses.size() == ref[0].losses.size());
  for (size_t i = 0; i < ref[0].losses.size(); ++i) {
    INFO("step " << i << " loss " << runs[0].losses[i] << " reference " << ref[0].losses[i]);
    const double rel = std::abs(runs[0].losses[i] - ref[0].losses[i]) / std::abs(ref[0].losses[i]);
    g_worst_loss = std::max(g_worst_loss, rel);
    CHECK(rel <= 1e-5);
  }
  REQUIRE(runs[0].params.size() == g.params.size());
  for (size_t p = 0; p < g.params.size(); ++p) {
    INFO("parameter " << g.params[p].name);
    const std::vector<float>& got = runs[0].params[p];
    const std::vector<float>& want = ref[0].params[p];
    double norm = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      norm += double(want[i]) * want[i];
      diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    }
    if (std::sqrt(norm) < 1e-6) {
      // A zero-initialised parameter whose gradient is zero in exact
      // arithmetic (the key bias without RoPE: softmax is shift-invariant)
      // ends as rounding noise on both sides: compared absolutely.
      INFO("reference norm " << std::sqrt(norm));
      CHECK(std::sqrt(diff) <= 1e-6);
      continue;
    }
    const double rel = rel_norm_diff(got, want);
    g_worst_param = std::max(g_worst_param, rel);
    CHECK(rel <= 1e-5);
  }
}

}  // namespace

TEST_CASE("training on 2 ranks equals single-rank training: gpt2-tiny fsdp2 per block", "[exec]") {
  check_equivalent({"gpt2-tiny", {"wrap.type=class", "wrap.classes=[\"GPT2Block\"]"}, 2});
}

TEST_CASE("training on 2 ranks equals single-rank training: mlp fsdp1 per block", "[exec]") {
  check_equivalent({"mlp", {"flavor=fsdp1", "wrap.type=class", "wrap.classes=[\"MLPBlock\"]"}, 2});
}

TEST_CASE("training on N ranks equals single-rank training: qwen2-tiny (q/k/v biases)",
          "[exec][hf]") {
  const std::string qwen2 = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/qwen2-tiny.json";
  const std::vector<std::string> per_layer = {"wrap.type=class",
                                              "wrap.classes=[\"Qwen2DecoderLayer\"]"};
  check_equivalent(Case{qwen2, per_layer, 2});
  std::vector<std::string> fsdp1 = per_layer;
  fsdp1.push_back("flavor=fsdp1");
  check_equivalent(Case{qwen2, fsdp1, 3});
}

// Per-op selective checkpointing: N ranks equal one rank, and on the same
// world the losses and final parameters equal those without checkpointing
// bit for bit (a cache hit hands out the forward value; a recompute runs the
// same kernels on the same inputs).
TEST_CASE("per-op checkpointing: N ranks equal one, and bit-identical to no checkpointing",
          "[exec][sac]") {
  const std::string qwen2 = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/qwen2-tiny.json";
  const std::vector<std::string> llama = {"wrap.type=class",
                                          "wrap.classes=[\"LlamaDecoderLayer\"]"};
  const std::vector<std::string> qwen = {"wrap.type=class", "wrap.classes=[\"Qwen2DecoderLayer\"]"};
  auto with = [](std::vector<std::string> s, const std::string& extra) {
    s.push_back(extra);
    return s;
  };
  const std::string titan = "activation_checkpointing={\"preset\":\"torchtitan\"}";
  check_equivalent(Case{"llama-tiny", with(llama, titan), 2});
  check_equivalent(Case{"llama-tiny", with(with(llama, titan), "flavor=fsdp1"), 4});
  check_equivalent(Case{qwen2, with(qwen, titan), 2});

  for (const auto& entry : {std::pair{std::string("llama-tiny"), llama}, std::pair{qwen2, qwen}}) {
    // Named copies, not structured bindings: C++17 lambdas cannot capture those.
    const std::string& model = entry.first;
    const std::vector<std::string>& wrap = entry.second;
    const plan::Graph g = plan::load_model(model);
    engine::exec::TrainHooks hooks;
    hooks.gather_final_params = true;
    auto train = [&](const std::string& ac) {
      std::vector<std::string> sets = wrap;
      for (const char* s : {"batch_size=2", "seq_len=16", "grad_accum_steps=2"}) sets.push_back(s);
      if (!ac.empty()) sets.push_back(ac);
      return engine::exec::train_threads(config_for(g, make_policy(sets), 2), hooks).at(0);
    };
    const engine::exec::RankRun plain = train("");
    for (const std::string& ac :
         {titan, std::string("activation_checkpointing=full"),
          std::string("activation_checkpointing={\"save_ops\":[\"attention\",\"swiglu\"]}")}) {
      INFO(model << " " << ac);
      const engine::exec::RankRun run = train(ac);
      CHECK(run.losses == plain.losses);
      CHECK(run.params == plain.params);
    }
  }
}

TEST_CASE(
    "training on N ranks equals single-rank training: GPT-NeoX (per-head qkv, partial "
    "rotary, parallel and sequential residual)",
    "[exec][hf]") {
  const std::string data = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";
  const std::vector<std::string> per_layer = {"wrap.type=class", "wrap.classes=[\"GPTNeoXLayer\"]"};
  check_equivalent(Case{data + "gpt_neox-tiny.json", per_layer, 2});
  std::vector<std::string> fsdp1 = per_layer;
  fsdp1.push_back("flavor=fsdp1");
  check_equivalent(Case{data + "gpt_neox-sequential-tiny.json", fsdp1, 3});
}

TEST_CASE(
    "training on N ranks equals single-rank training: OPT pre-LN and post-LN with "
    "project_in/out",
    "[exec][hf]") {
  const std::string data = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/";
  const std::vector<std::string> per_layer = {"wrap.type=class",
                                              "wrap.classes=[\"OPTDecoderLayer\"]"};
  check_equivalent(Case{data + "opt-tiny.json", per_layer, 2});
  std::vector<std::string> fsdp1 = per_layer;
  fsdp1.push_back("flavor=fsdp1");
  check_equivalent(Case{data + "opt-postln-tiny.json", fsdp1, 3});
}

TEST_CASE("OPT positions read rows 2..T+1: rows 0 and 1 of embed_positions never change",
          "[exec][hf]") {
  // Two runs with different learning rates (SGD, no weight decay) start from
  // the same initial parameters: rows that get no gradient end equal, the
  // rows read (2 .. 17 at T = 16) end different.
  const plan::Graph g =
      plan::load_model(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/opt-tiny.json");
  const int p = g.find_param("model.decoder.embed_positions.weight");
  REQUIRE(p >= 0);
  std::vector<std::vector<float>> finals;
  for (const char* lr : {"0.05", "0.1"}) {
    engine::exec::TrainHooks hooks;
    hooks.gather_final_params = true;
    const auto runs = engine::exec::train_threads(
        config_for(g,
                   make_policy({"batch_size=2", "seq_len=16",
                                std::string("optimizer={\"type\":\"sgd\",\"lr\":") + lr + "}"}),
                   2),
        hooks);
    finals.push_back(runs[0].params[static_cast<size_t>(p)]);
  }
  const int64_t dim = 64;
  for (int64_t row = 0; row < 19; ++row) {
    bool same = true;
    for (int64_t d = 0; d < dim; ++d)
      same = same && finals[0][static_cast<size_t>(row * dim + d)] ==
                         finals[1][static_cast<size_t>(row * dim + d)];
    INFO("row " << row);
    CHECK(same == (row < 2 || row > 17));
  }
}

TEST_CASE("losses decrease on the synthetic data's repeated batch structure", "[exec]") {
  const plan::Graph g = plan::load_model("mlp");
  const auto runs = engine::exec::train_threads(
      config_for(g, make_policy({"batch_size=8", "optimizer={\"type\":\"adamw\",\"lr\":0.01}"}), 1),
      {});
  REQUIRE(runs[0].losses.size() == 3);
  // Initial loss of a 10-class classifier near log(10).
  CHECK(std::abs(runs[0].losses[0] - std::log(10.0)) < 0.3);
}

// The policy grid: flavor x wrap x reshard x prefetch x accumulation x
// checkpointing on gpt2-tiny and llama-tiny with 2 ranks, plus 4-rank cases
// (fsdp2 reshard to 2, hybrid sharding, DDP) — every one against the
// single-rank reference.
TEST_CASE("training equals single-rank training over the policy grid", "[exec][grid]") {
  int cases = 0;
  for (const std::string model : {"gpt2-tiny", "llama-tiny"}) {
    const std::string block = model == "gpt2-tiny" ? "GPT2Block" : "LlamaDecoderLayer";
    for (const std::string flavor : {"fsdp1", "fsdp2"})
      for (const bool wrap : {false, true})
        for (const std::string reshard : {"true", "false"})
          for (const std::string prefetch : {"none", "pre"})
            for (const int accum : {1, 2})
              for (const bool ckpt : {false, true}) {
                if (ckpt && !wrap) continue;
                Case c{
                    model,
                    {"flavor=" + flavor, "reshard_after_forward=" + reshard,
                     "backward_prefetch=" + prefetch, "grad_accum_steps=" + std::to_string(accum)},
                    2};
                if (flavor == "fsdp1" && reshard == "false")
                  c.sets[1] = "reshard_after_forward=false";
                if (wrap) {
                  c.sets.push_back("wrap.type=class");
                  c.sets.push_back("wrap.classes=[\"" + block + "\"]");
                }
                if (ckpt) c.sets.push_back("activation_checkpointing=full");
                INFO(model << " " << flavor << " wrap " << wrap << " reshard " << reshard
                           << " prefetch " << prefetch << " accum " << accum << " ckpt " << ckpt);
                check_equivalent(c);
                ++cases;
              }
  }
  const std::vector<std::string> per_block = {"wrap.type=class", "wrap.classes=[\"GPT2Block\"]"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> s = per_block;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  for (const Case& c :
       {Case{"gpt2-tiny", with({"reshard_after_forward=2"}), 4},
        Case{"gpt2-tiny", with({"shard_group_size=2"}), 4},
        Case{"gpt2-tiny", with({"shard_group_size=1"}), 4},
        Case{"gpt2-tiny", with({"flavor=fsdp1", "backward_prefetch=post"}), 4},
        Case{"gpt2-tiny", with({"forward_prefetch=2"}), 4},
        Case{"gpt2-tiny",
             with({"flavor=fsdp1", "forward_prefetch=true", "limit_all_gathers=false"}), 2},
        Case{"gpt2-tiny", with({"cpu_offload=true"}), 2},
        Case{"gpt2-tiny", with({"grad_clip_norm=0.5"}), 2},
        Case{"gpt2-tiny", with({"activation_checkpointing={\"every\":2}"}), 2},
        Case{"gpt2-tiny", with({"activation_checkpointing={\"preset\":\"torchtitan\"}"}), 2},
        Case{"gpt2-tiny",
             with({"grad_accum_steps=2",
                   "activation_checkpointing={\"save_ops\":[\"linear\",\"residual\"],"
                   "\"every\":2,\"offset\":1}"}),
             4},
        Case{"gpt2-tiny", with({"shard_group_size=2", "flavor=fsdp1"}), 4}}) {
    INFO(c.model << " world " << c.world << " " << c.sets.back());
    check_equivalent(c);
    ++cases;
  }
  CHECK(cases == 2 * (2 * 2 * 2 * 2 * 2 + 2 * 2 * 2 * 2) + 12);
  std::printf(
      "equivalence grid: %d policies, worst relative loss difference %.3g, worst "
      "relative parameter difference %.3g\n",
      cases, g_worst_loss, g_worst_param);
}

// Checkpoints: save -> load -> continue gives bit-identical losses to an
// uninterrupted run; loading onto another world size continues with the same
// losses within 1e-5; a truncated shard file is refused naming the file.
TEST_CASE("save, load and continue equals an uninterrupted run", "[exec][checkpoint]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const std::string dir = "/tmp/shardscope-ckpt-test-" + std::to_string(::getpid());
  const std::vector<std::string> sets = {"batch_size=2", "seq_len=16", "wrap.type=class",
                                         "wrap.classes=[\"GPT2Block\"]"};
  engine::exec::TrainConfig c = config_for(g, make_policy(sets), 2);
  c.steps = 4;
  const auto straight = engine::exec::train_threads(c, {});

  c.steps = 2;
  c.save_dir = dir;
  (void)engine::exec::train_threads(c, {});
  c.save_dir.clear();
  c.load_path = dir;
  const auto resumed = engine::exec::train_threads(c, {});
  REQUIRE(resumed[0].losses.size() == 2);
  CHECK(resumed[0].losses[0] == straight[0].losses[2]);  // bit-identical
  CHECK(resumed[0].losses[1] == straight[0].losses[3]);

  // Another world size (and flavor): 1 rank with the same global batch.
  std::vector<std::string> one = {"batch_size=4", "seq_len=16", "flavor=fsdp1"};
  engine::exec::TrainConfig c1 = config_for(g, make_policy(one), 1);
  c1.steps = 2;
  c1.load_path = dir;
  const auto other = engine::exec::train_threads(c1, {});
  for (size_t i = 0; i < 2; ++i)
    CHECK(std::abs(other[0].losses[i] - straight[0].losses[i + 2]) <=
          1e-5 * std::abs(straight[0].losses[i + 2]));

  // A truncated shard file is refused with the file named.
  std::ifstream latest(dir + "/latest");
  std::string step;
  latest >> step;
  const std::string shard = dir + "/" + step + "/shard-1-of-2.bin";
  REQUIRE(::truncate(shard.c_str(), 100) == 0);
  try {
    (void)engine::exec::train_threads(c, {});
    FAIL("a truncated checkpoint loaded");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("shard-1-of-2.bin") != std::string::npos);
  }
  (void)std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("training on N ranks equals single-rank training: qwen3, gemma, gemma2, phi3 tiny",
          "[exec][hf]") {
  // Per-head q/k norms (qwen3); normalizer, (1 + w) norms, GeGLU, MQA (gemma);
  // sandwich norms, attention and logit soft-capping, a sliding window of 8
  // over 16 tokens (gemma2, phi3); packed GQA qkv and gate_up (phi3).
  const std::pair<const char*, const char*> models[] = {{"qwen3-tiny", "Qwen3DecoderLayer"},
                                                        {"gemma-tiny", "GemmaDecoderLayer"},
                                                        {"gemma2-tiny", "Gemma2DecoderLayer"},
                                                        {"phi3-tiny", "Phi3DecoderLayer"}};
  for (const auto& [file, layer] : models) {
    INFO(file);
    const std::string path = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + file + ".json";
    const std::vector<std::string> per_layer = {"wrap.type=class",
                                                "wrap.classes=[\"" + std::string(layer) + "\"]"};
    check_equivalent(Case{path, per_layer, 2});
    std::vector<std::string> fsdp1 = per_layer;
    fsdp1.push_back("flavor=fsdp1");
    fsdp1.push_back("activation_checkpointing=\"full\"");
    check_equivalent(Case{path, fsdp1, 3});
  }
}

TEST_CASE("training on N ranks equals single-rank training: llama-tiny with per-unit overrides",
          "[exec][overrides]") {
  const std::vector<std::string> per_layer = {"wrap.type=class",
                                              "wrap.classes=[\"LlamaDecoderLayer\"]"};
  // torchtitan's last block kept unsharded after forward.
  std::vector<std::string> last = per_layer;
  last.push_back("overrides=[{\"units\": [\"model.layers.1\"], \"reshard_after_forward\": false}]");
  check_equivalent(Case{"llama-tiny", last, 2});
  // fsdp2 on 4 ranks: block 0 keeps a 1/2 slice, the root reshards after forward.
  std::vector<std::string> mixed = per_layer;
  mixed.push_back(
      "overrides=[{\"units\": \"model\\\\.layers\\\\.0\", \"reshard_after_forward\": 2}, "
      "{\"units\": [\"<root>\"], \"reshard_after_forward\": true}]");
  check_equivalent(Case{"llama-tiny", mixed, 4});
}

TEST_CASE("a bf16 override on every unit trains exactly like a bf16 policy", "[exec][overrides]") {
  // Per-unit compute dtype: ops and activations take their unit's
  // param_dtype, so "fp32 with every unit overridden to bf16" is the same
  // step as "bf16", bit for bit.
  const plan::Graph g = plan::load_model("llama-tiny");
  const std::vector<std::string> base = {"batch_size=2", "seq_len=16", "wrap.type=class",
                                         "wrap.classes=[\"LlamaDecoderLayer\"]"};
  std::vector<std::string> a = base, b = base, c = base;
  a.push_back("mixed_precision={\"param_dtype\": \"bf16\"}");
  b.push_back("overrides=[{\"units\": \".*\", \"mixed_precision\": {\"param_dtype\": \"bf16\"}}]");
  c.push_back(
      "overrides=[{\"units\": \"model.*\", \"mixed_precision\": {\"param_dtype\": \"bf16\"}}]");
  const auto ra = engine::exec::train_threads(config_for(g, make_policy(a), 2), {});
  const auto rb = engine::exec::train_threads(config_for(g, make_policy(b), 2), {});
  const auto rc = engine::exec::train_threads(config_for(g, make_policy(c), 2), {});
  REQUIRE(ra[0].losses.size() == 3);
  CHECK(ra[0].losses == rb[0].losses);
  CHECK(ra[0].peak_allocated_bytes == rb[0].peak_allocated_bytes);
  // Blocks in bf16 under an fp32 root: other losses (the root's ops in fp32)
  // and more memory than all-bf16.
  CHECK(rc[0].losses != ra[0].losses);
  CHECK(rc[0].peak_allocated_bytes > ra[0].peak_allocated_bytes);
}

TEST_CASE("training on N ranks equals single-rank training: mixtral and qwen2_moe tiny",
          "[exec][hf][moe]") {
  // Routed experts (4, top-2), Mixtral's renormalised weights, Qwen2-MoE's
  // raw top-k weights, shared expert and sigmoid gate, one dense layer. The
  // forced routing assigns each sequence's tokens alone (exec_moe_ops.h), so
  // 2 ranks of batch 2 route as one rank of batch 4; real top-k routing is
  // per token.
  const std::pair<const char*, const char*> models[] = {{"mixtral-tiny", "MixtralDecoderLayer"},
                                                        {"qwen2_moe-tiny", "Qwen2MoeDecoderLayer"}};
  for (const auto& [file, layer] : models) {
    INFO(file);
    const std::string path = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + file + ".json";
    const std::vector<std::string> per_layer = {"wrap.type=class",
                                                "wrap.classes=[\"" + std::string(layer) + "\"]"};
    check_equivalent(Case{path, per_layer, 2});
    std::vector<std::string> fsdp1 = per_layer;
    fsdp1.push_back("flavor=fsdp1");
    fsdp1.push_back("activation_checkpointing=\"full\"");
    check_equivalent(Case{path, fsdp1, 3});
    std::vector<std::string> skewed = per_layer;
    skewed.push_back("token_balance={\"weights\": [0.5, 0.25, 0.125, 0.125]}");
    check_equivalent(Case{path, skewed, 2});
    std::vector<std::string> topk = per_layer;
    topk.push_back("moe_routing=topk");
    check_equivalent(Case{path, topk, 2});
  }
}
