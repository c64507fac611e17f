#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "io/output_error.h"
#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/models.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace shardscope::plan;
namespace fs = std::filesystem;
using shardscope::test::TempDir;

namespace {

// The plan::Error message graph_from_json throws for `j`.
std::string read_error(const json& j) {
  try {
    graph_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string mutated_error(const std::function<void(json&)>& mutate) {
  json j = graph_to_json(load_model("gpt2-tiny"));
  mutate(j);
  return read_error(j);
}

}  // namespace

TEST_CASE("graph JSON round trip is lossless for the tiny presets and the MLP",
          "[plan][graph_io]") {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "mlp"}) {
    INFO(name);
    const Graph g = load_model(name);
    const json first = graph_to_json(g);
    CHECK(first["format"] == "shardscope.graph");
    CHECK(first["version"] == 1);
    const Graph back = graph_from_json(first);
    const json second = graph_to_json(back);
    CHECK(first == second);
    CHECK(first.dump() == second.dump());
    CHECK(back.params_total() == g.params_total());
    REQUIRE(back.modules.size() == g.modules.size());
    for (size_t i = 0; i < g.modules.size(); ++i)
      CHECK(back.modules[i].children == g.modules[i].children);  // rebuilt from parents
    REQUIRE(back.ops.size() == g.ops.size());
    for (size_t i = 0; i < g.ops.size(); ++i) {
      CHECK(back.ops[i].fwd_flops == g.ops[i].fwd_flops);
      CHECK(back.ops[i].bwd_bytes == g.ops[i].bwd_bytes);
      CHECK(back.ops[i].attrs == g.ops[i].attrs);
    }
  }
}

TEST_CASE("graph file save/load round trip through a temp dir", "[plan][graph_io]") {
  TempDir dir;
  const std::string path = (dir.path / "llama-tiny.graph.json").string();
  const Graph g = load_model("llama-tiny");
  save_graph_file(g, path);
  save_graph_file(g, path);  // overwriting through rename works
  CHECK(graph_to_json(load_graph_file(path)) == graph_to_json(g));
  // load_model recognizes the graph JSON by its "format".
  CHECK(graph_to_json(load_model(path)) == graph_to_json(g));
  // Only the target file remains (the temporary was renamed).
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path)) files += entry.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("graph JSON errors name the JSON path of the bad field", "[plan][graph_io]") {
  CHECK_THAT(mutated_error([](json& j) { j["ops"][3]["fwd_flops"] = 5; }),
             Catch::Contains("graph JSON /ops/3/fwd_flops: expected a string like \"2*B*T*768\""));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][2]["colour"] = "red"; }),
             Catch::Contains("/ops/2/colour: unknown key"));
  CHECK_THAT(mutated_error([](json& j) { j["extra"] = 1; }),
             Catch::Contains("graph JSON /extra: unknown key"));
  CHECK_THAT(mutated_error([](json& j) { j["modules"][1]["a/b"] = 1; }),
             Catch::Contains("/modules/1/a~1b: unknown key"));
  CHECK_THAT(mutated_error([](json& j) { j["version"] = 2; }),
             Catch::Contains("/version: unsupported version 2"));
  CHECK_THAT(mutated_error([](json& j) { j["version"] = "1"; }), Catch::Contains("/version"));
  CHECK_THAT(mutated_error([](json& j) { j.erase("format"); }), Catch::Contains("/format"));
  CHECK_THAT(mutated_error([](json& j) { j["format"] = "other"; }), Catch::Contains("/format"));
  CHECK_THAT(mutated_error([](json& j) { j["max_seq_len"] = "128"; }),
             Catch::Contains("/max_seq_len: expected an integer"));
  CHECK_THAT(mutated_error([](json& j) { j["max_seq_len"] = 128.5; }),
             Catch::Contains("/max_seq_len: expected an integer"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][0].erase("type"); }),
             Catch::Contains("/ops/0/type: missing required key"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][4]["inputs"][0] = 9999; }),
             Catch::Contains("/ops/4/inputs/0: tensor index 9999 out of range"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][4]["params"][0] = -1; }),
             Catch::Contains("/ops/4/params/0: param index -1 out of range"));
  CHECK_THAT(mutated_error([](json& j) { j["params"][0]["module"] = 100000; }),
             Catch::Contains("/params/0/module: module index 100000 out of range"));
  CHECK_THAT(mutated_error([](json& j) { j["modules"][3]["parent"] = 18446744073709551615ULL; }),
             Catch::Contains("/modules/3/parent: module index 18446744073709551615 out of range"));
  CHECK_THAT(mutated_error([](json& j) { j["loss"] = 12345; }), Catch::Contains("/loss"));
  CHECK_THAT(mutated_error([](json& j) { j["params"][0]["shape"][0] = 0; }),
             Catch::Contains("/params/0/shape/0"));
  CHECK_THAT(mutated_error([](json& j) { j["params"][0]["dtype"] = "f8"; }),
             Catch::Contains("/params/0/dtype") && Catch::Contains("unknown dtype 'f8'"));
  CHECK_THAT(mutated_error([](json& j) { j["tensors"][0]["shape"][1] = "T*X"; }),
             Catch::Contains("/tensors/0/shape/1") && Catch::Contains("position 2"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][1]["attrs"] = json::array(); }),
             Catch::Contains("/ops/1/attrs: expected an object"));
  CHECK_THAT(read_error(json::array()), Catch::Contains("graph JSON (root): expected an object"));
}

TEST_CASE("graph JSON semantic errors name the module, op, param or tensor", "[plan][graph_io]") {
  // Ops out of forward order: the ln_1 op would read the embed_add output before it exists.
  CHECK_THAT(mutated_error([](json& j) { std::swap(j["ops"][2], j["ops"][3]); }),
             Catch::Contains("op 'transformer.h.0.ln_1' reads tensor 'transformer.embed_add.out'"));
  // A parameter no op uses.
  CHECK_THAT(mutated_error([](json& j) {
               j["ops"][1]["params"] = json::array();  // wpe stops reading its weight
             }),
             Catch::Contains("param 'transformer.wpe.weight' is not used by any op"));
  CHECK_THAT(mutated_error([](json& j) { j["modules"][2]["name"] = "transformer.x.y"; }),
             Catch::Contains("module 2 'transformer.x.y'"));
  CHECK_THAT(mutated_error([](json& j) { j["modules"][5]["parent"] = 7; }),
             Catch::Contains("module 5 'transformer.h.0'"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][0]["type"] = "conv2d"; }),
             Catch::Contains("op 'transformer.wte': unknown op type 'conv2d'"));
  CHECK_THAT(mutated_error([](json& j) { j["tensors"][3]["name"] = j["tensors"][2]["name"]; }),
             Catch::Contains("duplicate tensor name"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][0]["fwd_flops"] = "-2*B"; }),
             Catch::Contains("op 'transformer.wte': fwd_flops \"-2*B\" has a negative"));
}

TEST_CASE("graph file errors name the file", "[plan][graph_io]") {
  TempDir dir;
  const std::string missing = (dir.path / "missing.json").string();
  CHECK_THROWS_WITH(load_graph_file(missing), Catch::Contains(missing));
  const std::string bad = (dir.path / "bad.json").string();
  std::ofstream(bad) << "{\"format\": ";
  CHECK_THROWS_WITH(load_graph_file(bad),
                    Catch::Contains(bad) && Catch::Contains("not valid JSON"));
  const std::string wrong = (dir.path / "wrong.json").string();
  json j = graph_to_json(load_model("gpt2-tiny"));
  j["ops"][0]["outputs"] = "x";
  std::ofstream(wrong) << j.dump();
  CHECK_THROWS_WITH(load_graph_file(wrong),
                    Catch::Contains(wrong) && Catch::Contains("/ops/0/outputs"));
  // Output paths are io::OutputFile's (io/output_target.h): refused by name.
  const std::string nowhere = (dir.path / "no/such/dir/g.json").string();
  CHECK_THROWS_AS(save_graph_file(load_model("mlp"), nowhere), shardscope::io::OutputTargetError);
  CHECK_THROWS_WITH(save_graph_file(load_model("mlp"), nowhere),
                    Catch::Contains(nowhere) && Catch::Contains("does not exist"));
}

TEST_CASE("graph JSON reader survives random mutations with plan::Error only", "[plan][graph_io]") {
  const json base = graph_to_json(load_model("llama-tiny"));
  std::mt19937 rng(7);
  const json replacements[] = {json(nullptr),
                               json(-1),
                               json(0),
                               json(1),
                               json(1u << 31),
                               json(-9223372036854775807LL - 1),
                               json(18446744073709551615ULL),
                               json(0.5),
                               json("B*T"),
                               json("B^"),
                               json(""),
                               json::array(),
                               json::object(),
                               json(true),
                               json::array({0, 1, 2}),
                               json::array({"B", "x"})};
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    json j = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      // Walk down to a random value.
      json* v = &j;
      while ((v->is_object() || v->is_array()) && !v->empty() && rng() % 4 != 0) {
        auto it = v->begin();
        std::advance(it, rng() % v->size());
        v = &*it;
      }
      const unsigned action = rng() % 3;
      if (action == 0 && v->is_object() && !v->empty()) {
        v->erase(v->begin());
      } else if (action == 1 && v->is_array() && !v->empty()) {
        v->erase(v->size() - 1);
      } else {
        *v = replacements[rng() % (sizeof(replacements) / sizeof(replacements[0]))];
      }
    }
    try {
      const Graph g = graph_from_json(j);
      ++accepted;
      // Whatever is accepted is written back in a form that reads back identically.
      const json written = graph_to_json(g);
      CHECK(graph_to_json(graph_from_json(written)) == written);
    } catch (const Error&) {
    }
  }
  // Most mutations break the graph; some (e.g. an attrs value) are harmless.
  CHECK(accepted < 3000);
}

TEST_CASE("op types and attributes are typed: names round-trip, strangers are errors",
          "[plan][graph_io]") {
  for (OpType t : {OpType::embedding, OpType::linear, OpType::layernorm, OpType::rmsnorm,
                   OpType::attention, OpType::gelu, OpType::swiglu, OpType::residual,
                   OpType::cross_entropy, OpType::rope, OpType::relu})
    CHECK(parse_op_type(op_type_name(t), "type") == t);
  CHECK_THAT(
      [] {
        try {
          parse_op_type("conv2d", "ops[0].type");
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string("<no error>");
      }(),
      Catch::Contains("ops[0].type: unknown op type 'conv2d'"));
  // gpt2-tiny: op 3 is transformer.h.0.ln_1 (layernorm), op 4 its c_attn (linear).
  CHECK_THAT(mutated_error([](json& j) { j["ops"][3]["attrs"]["epsilon"] = 1e-5; }),
             Catch::Contains("/ops/3/attrs/epsilon: unknown key for a layernorm op"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][4]["attrs"]["eps"] = 1e-5; }),
             Catch::Contains("/ops/4/attrs/eps: unknown key for a linear op"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][3]["attrs"]["eps"] = "small"; }),
             Catch::Contains("/ops/3/attrs/eps: expected a number, got string"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][4]["attrs"]["in_features"] = 64.5; }),
             Catch::Contains("/ops/4/attrs/in_features: expected an integer"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][4]["attrs"]["bias"] = 1; }),
             Catch::Contains("/ops/4/attrs/bias: expected true or false"));
  // Absent attributes stay absent; a JSON-valued one (rope_scaling) keeps its value.
  json j = graph_to_json(load_model("gpt2-tiny"));
  j["ops"][4]["attrs"].erase("bias");
  j["ops"][5]["attrs"]["rope_scaling"] = {{"factor", 8.0}, {"rope_type", "llama3"}};
  CHECK(graph_to_json(graph_from_json(j)) == j);
}
