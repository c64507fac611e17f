#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/graph_io.h"
#include "plan/models.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace shardscope::plan;
namespace fs = std::filesystem;
using shardscope::test::TempDir;

namespace {

int count_class(const Graph& g, const std::string& class_name) {
  int n = 0;
  for (const Module& m : g.modules) n += m.class_name == class_name;
  return n;
}

const Op& find_op(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops)
    if (op.name == name) return op;
  FAIL("no op " << name);
  throw 0;
}

// A GPT-2 variant as Hugging Face writes it, with keys we do not use.
json gpt2_hf_config() {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"n_layer", 3},
          {"n_embd", 96},
          {"n_head", 4},
          {"n_positions", 64},
          {"n_ctx", 64},
          {"vocab_size", 1000},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.1},
          {"summary_type", "cls_index"},
          {"task_specific_params", {{"text-generation", {{"do_sample", true}}}}}};
}

// A Llama GQA variant: 8 query heads of 16, 2 key/value heads.
json llama_hf_config() {
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 128},
          {"intermediate_size", 352},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 2},
          {"vocab_size", 1000},
          {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"bos_token_id", 1}};
}

std::string hf_error(const json& config) {
  TempDir dir;
  const std::string file = dir.write("config.json", config);
  try {
    load_model(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("preset parameter totals equal Hugging Face's published counts", "[plan][models]") {
  CHECK(load_model("gpt2-small").params_total() == 124439808);
  CHECK(load_model("gpt2-medium").params_total() == 354823168);
  CHECK(load_model("gpt2-large").params_total() == 774030080);
  CHECK(load_model("gpt2-xl").params_total() == 1557611200);
  CHECK(load_model("llama3-8b").params_total() == 8030261248LL);
  CHECK(load_model("llama3-70b").params_total() == 70553706496LL);
}

TEST_CASE("tiny presets: parameter totals computed by hand", "[plan][models]") {
  // gpt2-tiny (C=64, 2 layers, 128 positions, vocab 512, tied lm_head):
  //   wte 512*64 = 32768, wpe 128*64 = 8192,
  //   block: ln_1 128 + c_attn 64*192+192 = 12480 + c_proj 64*64+64 = 4160 + ln_2 128
  //          + c_fc 64*256+256 = 16640 + c_proj 256*64+64 = 16448 = 49984, x2 = 99968,
  //   ln_f 128  ->  32768 + 8192 + 99968 + 128 = 141056
  CHECK(load_model("gpt2-tiny").params_total() == 141056);
  // llama-tiny (C=64, F=176, 2 layers, 4 heads of 16, 2 kv heads, vocab 512, untied):
  //   embed 512*64 = 32768,
  //   layer: q 64*64 = 4096, k 64*32 = 2048, v 2048, o 4096, gate/up/down 3*64*176 = 33792,
  //          norms 2*64 = 128 -> 46208, x2 = 92416,
  //   norm 64, lm_head 512*64 = 32768  ->  32768 + 92416 + 64 + 32768 = 158016
  CHECK(load_model("llama-tiny").params_total() == 158016);
  // mlp: input_proj 64*256+256 = 16640,
  //   block: ln 512 + fc1 256*512+512 = 131584 + fc2 512*256+256 = 131328 = 263424, x4 = 1053696,
  //   head 256*10+10 = 2570  ->  1072906
  CHECK(load_model("mlp").params_total() == 1072906);
}

TEST_CASE("model presets are listed and unknown specs are errors listing them", "[plan][models]") {
  const std::vector<std::string> expected = {"gpt2-tiny",  "gpt2-small", "gpt2-medium",
                                             "gpt2-large", "gpt2-xl",    "llama-tiny",
                                             "llama3-8b",  "llama3-70b", "mlp"};
  CHECK(model_presets() == expected);
  CHECK(is_model_preset("llama3-8b"));
  CHECK_FALSE(is_model_preset("gpt3"));
  CHECK_THROWS_WITH(load_model("gpt3"), Catch::Contains("gpt3") && Catch::Contains("gpt2-tiny") &&
                                            Catch::Contains("llama3-70b") &&
                                            Catch::Contains("mlp"));
  TempDir dir;
  CHECK_THROWS_WITH(load_model(dir.path.string()), Catch::Contains("gpt2-small"));
  const std::string junk = (dir.path / "junk.json").string();
  std::ofstream(junk) << "not json";
  CHECK_THROWS_WITH(load_model(junk), Catch::Contains(junk) && Catch::Contains("not valid JSON"));
  CHECK_THAT(hf_error({{"model_type", "t5"}}), Catch::Contains("unsupported model_type 't5'"));
  CHECK_THAT(hf_error({{"foo", 1}}), Catch::Contains("not a recognized model config"));
}

TEST_CASE("module class names match Hugging Face for class-based wrapping", "[plan][models]") {
  const Graph medium = load_model("gpt2-medium");
  CHECK(count_class(medium, "GPT2Block") == 24);
  CHECK(count_class(medium, "GPT2Attention") == 24);
  CHECK(count_class(medium, "GPT2MLP") == 24);
  CHECK(count_class(medium, "Conv1D") == 96);
  CHECK(medium.modules[0].class_name == "GPT2LMHeadModel");
  const int h = medium.find_module("transformer.h");
  REQUIRE(h >= 0);
  CHECK(medium.modules[h].is_container);
  CHECK(medium.modules[h].class_name == "ModuleList");
  CHECK(medium.modules[h].children.size() == 24);
  CHECK(medium.modules[medium.find_module("transformer.h.23.mlp.c_fc")].class_name == "Conv1D");

  const Graph llama = load_model("llama3-8b");
  CHECK(count_class(llama, "LlamaDecoderLayer") == 32);
  CHECK(count_class(llama, "LlamaRMSNorm") == 65);
  CHECK(llama.modules[0].class_name == "LlamaForCausalLM");
  CHECK(llama.modules[llama.find_module("model")].class_name == "LlamaModel");
  CHECK(llama.modules[llama.find_module("model.layers.31.self_attn")].class_name ==
        "LlamaAttention");
  CHECK(llama.modules[llama.find_module("model.layers.0.mlp")].class_name == "LlamaMLP");
  CHECK(llama.modules[llama.find_module("model.layers")].is_container);

  CHECK(count_class(load_model("mlp"), "MLPBlock") == 4);
}

TEST_CASE("parameter names and shapes follow Hugging Face", "[plan][models]") {
  const Graph g = load_model("gpt2-small");
  // Conv1D stores its weight [in, out]: FSDP2 shards dim 0 = in.
  const Param& c_attn = g.params[g.find_param("transformer.h.0.attn.c_attn.weight")];
  CHECK(c_attn.shape == std::vector<int64_t>{768, 2304});
  CHECK(g.params[g.find_param("transformer.h.11.mlp.c_proj.weight")].shape ==
        std::vector<int64_t>{3072, 768});
  CHECK(g.params[g.find_param("transformer.wpe.weight")].shape == std::vector<int64_t>{1024, 768});
  CHECK(g.params[g.find_param("transformer.ln_f.bias")].shape == std::vector<int64_t>{768});

  const Graph llama = load_model("llama3-8b");
  // GQA: k/v project to 8 heads of 128; nn.Linear weights are [out, in].
  CHECK(llama.params[llama.find_param("model.layers.0.self_attn.k_proj.weight")].shape ==
        std::vector<int64_t>{1024, 4096});
  CHECK(llama.params[llama.find_param("model.layers.0.mlp.down_proj.weight")].shape ==
        std::vector<int64_t>{4096, 14336});
  CHECK(llama.find_param("model.layers.0.self_attn.q_proj.bias") == -1);
  CHECK(llama.params[llama.find_param("lm_head.weight")].shape ==
        std::vector<int64_t>{128256, 4096});
  const Op& attn = find_op(llama, "model.layers.0.self_attn.attention");
  CHECK(attn.attrs.n_kv_head == 8);
  CHECK(attn.attrs.rope == true);
  CHECK(attn.attrs.rope_theta == 500000.0);
}

TEST_CASE("GPT-2 lm_head uses the tied transformer.wte.weight and declares none",
          "[plan][models]") {
  const Graph g = load_model("gpt2-small");
  const int lm_head = g.find_module("lm_head");
  REQUIRE(lm_head >= 0);
  CHECK(g.modules[lm_head].class_name == "Linear");
  for (const Param& p : g.params) CHECK(p.module != lm_head);
  CHECK(g.find_param("lm_head.weight") == -1);
  const Op& op = find_op(g, "lm_head");
  REQUIRE(op.params.size() == 1);
  CHECK(g.params[op.params[0]].name == "transformer.wte.weight");
  CHECK(op.module == lm_head);
  // The same parameter is read by two ops (the embedding and lm_head).
  int users = 0;
  for (const Op& o : g.ops)
    for (int p : o.params) users += p == op.params[0];
  CHECK(users == 2);
}

TEST_CASE("GPT-2 block ops, order and saved tensors", "[plan][models]") {
  const Graph g = load_model("gpt2-tiny");
  std::vector<std::string> types;
  for (const Op& op : g.ops)
    if (op.name.rfind("transformer.h.0.", 0) == 0) types.push_back(op_type_name(op.type));
  CHECK(types == std::vector<std::string>{"layernorm", "linear", "attention", "linear", "residual",
                                          "layernorm", "linear", "gelu", "linear", "residual"});
  const Op& attn = find_op(g, "transformer.h.0.attn.attention");
  std::vector<std::string> saved;
  for (int t : attn.saved) saved.push_back(g.tensors[t].name);
  // SDPA keeps q, k, v (views of c_attn's output), its output (which
  // c_proj reads) and the log-sum-exp.
  CHECK(saved == std::vector<std::string>{"transformer.h.0.attn.c_attn.out",
                                          "transformer.h.0.attn.attention.out",
                                          "transformer.h.0.attn.attention.lse"});
  // The causal-mask buffers of both blocks (2 x 128 x 128 bools for
  // gpt2-tiny) kept by the position embedding through forward and backward.
  const Op& wpe = find_op(g, "transformer.wpe");
  REQUIRE(wpe.saved.size() == 1);
  CHECK(g.tensors[wpe.saved[0]].numel() == Poly::parse("8192"));  // 32768 B as fp32
  // Softmax stats are B*n_head*T fp32 floats, not a T x T matrix.
  CHECK(g.tensors[attn.outputs[1]].numel() == Poly::parse("4*B*T"));
  CHECK(g.tensors[attn.outputs[1]].precision == Precision::fp32);
  // gpt2-tiny's activation is gelu_new: NewGELUActivation's Python
  // expression saves x and three more tensors of its size.
  const Op& act = find_op(g, "transformer.h.0.mlp.act");
  CHECK(act.saved.size() == 4);
  for (int t : act.saved) CHECK(g.tensors[t].numel() == Poly::parse("256*B*T"));
  // The loss: log-probabilities in fp32, logits.float() in forward (below
  // fp32 only), two fp32 gradients in backward.
  const Op& loss = g.ops.back();
  CHECK(g.tensors[loss.outputs[1]].precision == Precision::fp32);
  REQUIRE(loss.fwd_temps.size() == 1);
  CHECK(loss.fwd_temps[0].precision == Precision::fp32_if_lowp);
  CHECK(loss.fwd_temps[0].numel == Poly::parse("512*B*T"));
  REQUIRE(loss.bwd_temps.size() == 2);
  // bf16: nll_loss's fp32 gradient, then log_softmax's (fp32), in that order.
  CHECK(precision_bytes(loss.bwd_temps[0].precision, 2) == 4);
  CHECK(precision_bytes(loss.bwd_temps[1].precision, 2) == 4);
  // fp32: log_softmax's gradient is the logits' gradient (the op's result).
  CHECK(precision_bytes(loss.bwd_temps[0].precision, 4) == 4);
  CHECK(precision_bytes(loss.bwd_temps[1].precision, 4) == 0);
  CHECK(std::string(op_type_name(g.ops.back().type)) == "cross_entropy");
  CHECK(g.tensors[g.loss].shape.empty());
  CHECK(g.tensors[find_op(g, "lm_head").outputs[0]].numel() == Poly::parse("512*B*T"));
}

TEST_CASE("FLOPs of one linear and one attention, checked by hand", "[plan][models]") {
  const Graph g = load_model("gpt2-small");
  const Op& c_attn = find_op(g, "transformer.h.0.attn.c_attn");
  // fwd: 2*N*in*out + N*out (bias) = (2*768*2304 + 2304) * B*T = 3541248 * B*T
  // bwd: 4*N*in*out (dX, dW) + N*out (db) = (4*768*2304 + 2304) * B*T = 7080192 * B*T
  CHECK(c_attn.fwd_flops.to_string() == "3541248*B*T");
  CHECK(c_attn.bwd_flops.to_string() == "7080192*B*T");
  CHECK(c_attn.fwd_flops.eval({4, 1024}) == 14504951808LL);
  // fwd bytes: read x (4*768) and write y (4*2304) per token, read W and b (4*(768*2304+2304))
  CHECK(c_attn.fwd_bytes == Poly::parse("12288*B*T + 7087104"));
  // Attention: QK^T and PV over the full T x T square, 4*B*T^2*C; backward 10*B*T^2*C.
  const Op& attn = find_op(g, "transformer.h.0.attn.attention");
  CHECK(attn.fwd_flops.to_string() == "3072*B*T^2");
  CHECK(attn.bwd_flops.to_string() == "7680*B*T^2");
  // Llama-3-8B: 4*B*T^2*4096 plus RoPE on q and k, 3*B*T*(32+8)*128.
  const Graph llama = load_model("llama3-8b");
  CHECK(find_op(llama, "model.layers.0.self_attn.attention").fwd_flops.to_string() ==
        "15360*B*T + 16384*B*T^2");
  CHECK(g.ops.size() == 2 + 1 + 12 * 10 + 1 + 2);  // wte, wpe, add, blocks, ln_f, lm_head, loss
}

TEST_CASE("Hugging Face GPT-2 config.json: a variant with a hand-computed count",
          "[plan][models]") {
  // n_layer 3, n_embd 96, n_head 4, n_positions 64, vocab 1000, tied:
  //   wte 1000*96 = 96000, wpe 64*96 = 6144,
  //   block: ln 2*2*96 = 384 + c_attn 96*288+288 = 27936 + c_proj 96*96+96 = 9312
  //          + c_fc 96*384+384 = 37248 + c_proj 384*96+96 = 36960 = 111840, x3 = 335520,
  //   ln_f 192  ->  437856
  TempDir dir;
  const Graph g = load_model(dir.write("config.json", gpt2_hf_config()));
  CHECK(g.params_total() == 437856);
  CHECK(g.family == "gpt2");
  CHECK(g.max_seq_len == 64);
  CHECK(g.vocab_size == 1000);
  CHECK(count_class(g, "GPT2Block") == 3);

  json untied = gpt2_hf_config();
  untied["tie_word_embeddings"] = false;
  const Graph u = load_model(dir.write("untied.json", untied));
  CHECK(u.params_total() == 437856 + 96000);
  CHECK(u.params[u.find_param("lm_head.weight")].shape == std::vector<int64_t>{1000, 96});

  // scale_attn_by_inverse_layer_idx divides layer i's scores by (i + 1) as well.
  json inverse = gpt2_hf_config();
  inverse["scale_attn_by_inverse_layer_idx"] = true;
  const Graph inv = load_model(dir.write("inverse.json", inverse));
  const double head_scale = 1.0 / std::sqrt(24.0);
  CHECK(find_op(inv, "transformer.h.0.attn.attention").attrs.scale.value() == Approx(head_scale));
  CHECK(find_op(inv, "transformer.h.2.attn.attention").attrs.scale.value() ==
        Approx(head_scale / 3));

  // Without model_type, n_layer/n_embd identify GPT-2; n_ctx stands in for n_positions.
  json bare = gpt2_hf_config();
  bare.erase("model_type");
  bare.erase("n_positions");
  CHECK(load_model(dir.write("bare.json", bare)).params_total() == 437856);
}

TEST_CASE("Hugging Face Llama config.json: GQA variant, tied and biased", "[plan][models]") {
  // hidden 128, ffn 352, 3 layers, 8 heads of 16, 2 kv heads (kv dim 32), vocab 1000, untied:
  //   embed 1000*128 = 128000,
  //   layer: q 128*128 = 16384, k 128*32 = 4096, v 4096, o 16384 (= 40960),
  //          mlp 3*128*352 = 135168, norms 2*128 = 256 -> 176384, x3 = 529152,
  //   norm 128, lm_head 128000  ->  128000 + 529152 + 128 + 128000 = 785280
  TempDir dir;
  const Graph g = load_model(dir.write("config.json", llama_hf_config()));
  CHECK(g.params_total() == 785280);
  CHECK(g.family == "llama");
  CHECK(g.max_seq_len == 256);
  CHECK(g.params[g.find_param("model.layers.2.self_attn.v_proj.weight")].shape ==
        std::vector<int64_t>{32, 128});

  // Tied: lm_head reads model.embed_tokens.weight and declares nothing: 785280 - 128000.
  json tied = llama_hf_config();
  tied["tie_word_embeddings"] = true;
  const Graph t = load_model(dir.write("tied.json", tied));
  CHECK(t.params_total() == 657280);
  CHECK(t.find_param("lm_head.weight") == -1);
  const Op& lm_head = find_op(t, "lm_head");
  REQUIRE(lm_head.params.size() == 1);
  CHECK(t.params[lm_head.params[0]].name == "model.embed_tokens.weight");

  // attention_bias: q 128 + k 32 + v 32 + o 128 = 320 per layer, x3 = 960.
  json abias = llama_hf_config();
  abias["attention_bias"] = true;
  CHECK(load_model(dir.write("abias.json", abias)).params_total() == 785280 + 960);
  // mlp_bias: gate 352 + up 352 + down 128 = 832 per layer, x3 = 2496.
  json mbias = llama_hf_config();
  mbias["mlp_bias"] = true;
  CHECK(load_model(dir.write("mbias.json", mbias)).params_total() == 785280 + 2496);

  // Mistral: same parameters, Mistral class names, sliding window recorded.
  json mistral = llama_hf_config();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4096;
  const Graph m = load_model(dir.write("mistral.json", mistral));
  CHECK(m.params_total() == 785280);
  CHECK(count_class(m, "MistralDecoderLayer") == 3);
  CHECK(m.modules[0].class_name == "MistralForCausalLM");
  CHECK(find_op(m, "model.layers.0.self_attn.attention").attrs.sliding_window == 4096);

  // rope_scaling changes no parameter; it is recorded for the attention op.
  json scaled = llama_hf_config();
  scaled["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  const Graph s = load_model(dir.write("scaled.json", scaled));
  CHECK(s.params_total() == 785280);
  CHECK(json::parse(find_op(s, "model.layers.1.self_attn.attention")
                        .attrs.rope_scaling.value())["factor"] == 8.0);
}

TEST_CASE("Hugging Face config errors name the key and the file", "[plan][models]") {
  json missing = llama_hf_config();
  missing.erase("num_hidden_layers");
  CHECK_THAT(hf_error(missing), Catch::Contains("config.json") &&
                                    Catch::Contains("'num_hidden_layers'") &&
                                    Catch::Contains("missing"));
  json wrong_type = llama_hf_config();
  wrong_type["hidden_size"] = "128";
  CHECK_THAT(hf_error(wrong_type),
             Catch::Contains("'hidden_size'") && Catch::Contains("expected an integer"));
  json act = llama_hf_config();
  act["hidden_act"] = "relu";
  CHECK_THAT(hf_error(act), Catch::Contains("'hidden_act'") && Catch::Contains("relu"));
  json gqa = llama_hf_config();
  gqa["num_key_value_heads"] = 3;
  CHECK_THAT(hf_error(gqa), Catch::Contains("'num_key_value_heads'"));
  json gpt2_missing = gpt2_hf_config();
  gpt2_missing.erase("n_embd");
  CHECK_THAT(hf_error(gpt2_missing), Catch::Contains("'n_embd'") && Catch::Contains("missing"));
  json cross = gpt2_hf_config();
  cross["add_cross_attention"] = true;
  CHECK_THAT(hf_error(cross), Catch::Contains("'add_cross_attention'"));
  json gpt2_act = gpt2_hf_config();
  gpt2_act["activation_function"] = "quick_gelu";
  CHECK_THAT(hf_error(gpt2_act), Catch::Contains("'activation_function'"));
  json heads = gpt2_hf_config();
  heads["n_head"] = 5;
  CHECK_THAT(hf_error(heads), Catch::Contains("'n_head'"));
  json zero = gpt2_hf_config();
  zero["n_layer"] = 0;
  CHECK_THAT(hf_error(zero), Catch::Contains("'n_layer'"));
}

TEST_CASE("every preset builds a valid graph that survives graph JSON", "[plan][models]") {
  for (const std::string& name : model_presets()) {
    INFO(name);
    const Graph g = load_model(name);
    CHECK_NOTHROW(g.validate());
    CHECK(g.model_name == name);
    // Every op cost is non-negative at a realistic workload and fits int64.
    for (const Op& op : g.ops) {
      CHECK(op.fwd_flops.eval({8, 1024}) >= 0);
      CHECK(op.bwd_bytes.eval({8, 1024}) >= 0);
    }
    if (name == "gpt2-tiny" || name == "llama-tiny" || name == "mlp")
      CHECK(graph_to_json(graph_from_json(graph_to_json(g))) == graph_to_json(g));
  }
}
