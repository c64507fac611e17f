// Exported graphs (python/ exporter, docs/models.md "Exported graphs"): op
// type aten, tensor requires_grad, dtypes bool and u8, graph keys
// default_wrap_classes, buffers and exporter. The fixture
// tests/data/exported/tiny-mlp.graph.json is a hand-made 2-layer MLP:
//   x [B,16] -> layers.0: addmm (+bias) -> relu -> layers.1: mm -> relu
//   -> head: mm [B,10] -> _log_softmax -> nll_loss_forward (loss, total_weight)
// with the relus in the MLPLayer modules themselves (non-leaf modules).
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/error.h"
#include "plan/graph_io.h"
#include "plan/models.h"

using nlohmann::json;
using namespace shardscope::plan;

namespace {

const std::string kTinyMlp =
    std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/exported/tiny-mlp.graph.json";

json tiny_mlp_json() {
  std::ifstream in(kTinyMlp);
  REQUIRE(in);
  return json::parse(in);
}

std::string read_error(const json& j) {
  try {
    graph_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string mutated_error(const std::function<void(json&)>& mutate) {
  json j = tiny_mlp_json();
  mutate(j);
  return read_error(j);
}

}  // namespace

TEST_CASE("exported graph: the tiny-mlp fixture reads and writes back unchanged (golden)",
          "[plan][graph_io][exported]") {
  const json file = tiny_mlp_json();
  const Graph g = load_model(kTinyMlp);
  CHECK(graph_to_json(g) == file);  // every key, including exporter, kept as written
  CHECK(g.is_exported());
  CHECK(g.default_wrap_classes == std::vector<std::string>{"MLPLayer"});
  CHECK(g.buffers.empty());
  CHECK(json::parse(g.exporter) == file["exporter"]);
  REQUIRE(g.ops.size() == 7);
  CHECK(g.ops[0].type == OpType::aten);
  CHECK(g.ops[0].attrs.aten == "aten.addmm.default");
  CHECK(g.ops[0].attrs.kind == "gemm");
  CHECK(g.ops[6].attrs.aten == "aten.nll_loss_forward.default");
  // relu runs in the MLPLayer module itself (module 2 has a child): accepted.
  CHECK(g.modules[static_cast<size_t>(g.ops[1].module)].class_name == "MLPLayer");
  CHECK_FALSE(g.modules[static_cast<size_t>(g.ops[1].module)].children.empty());
  CHECK_FALSE(g.tensors[9].requires_grad);  // total_weight
  CHECK(g.tensors[8].requires_grad);        // loss: key absent
  CHECK(g.params_total() == 32 * 16 + 32 + 32 * 32 + 10 * 32);
}

TEST_CASE("exported graph: buffers, bool and u8 tensors round-trip", "[plan][graph_io][exported]") {
  json j = tiny_mlp_json();
  // A bool mask and a u8 tensor read by the relu, and an fp32 buffer.
  j["tensors"].push_back({{"name", "mask"}, {"shape", {"B", "32"}}, {"dtype", "bool"}});
  j["tensors"].push_back({{"name", "bytes"}, {"shape", {"7"}}, {"dtype", "u8"}});
  j["tensors"].push_back(
      {{"name", "inv_freq"}, {"shape", {"4"}}, {"dtype", "f32"}, {"requires_grad", false}});
  j["buffers"] = {10, 11, 12};
  j["ops"][1]["inputs"] = {2, 10, 11, 12};
  const Graph g = graph_from_json(j);
  CHECK(g.buffers == std::vector<int>{10, 11, 12});
  CHECK(g.tensors[10].dtype == DType::boolean);
  CHECK(g.tensors[11].dtype == DType::u8);
  CHECK(dtype_bytes(DType::boolean) == 1);
  CHECK(dtype_bytes(DType::u8) == 1);
  CHECK_FALSE(is_floating(DType::boolean));
  CHECK(std::string(dtype_name(DType::boolean)) == "bool");
  CHECK(graph_to_json(g) == j);
  CHECK(parse_dtype("uint8", "f") == DType::u8);
}

TEST_CASE("native graphs carry none of the exported keys", "[plan][graph_io][exported]") {
  for (const char* name : {"gpt2-tiny", "llama-tiny", "mlp"}) {
    INFO(name);
    const json j = graph_to_json(load_model(name));
    CHECK_FALSE(j.contains("default_wrap_classes"));
    CHECK_FALSE(j.contains("buffers"));
    CHECK_FALSE(j.contains("exporter"));
    for (const json& t : j["tensors"]) CHECK_FALSE(t.contains("requires_grad"));
  }
}

TEST_CASE("exported graph JSON errors name the JSON path", "[plan][graph_io][exported]") {
  CHECK_THAT(mutated_error([](json& j) { j["ops"][3]["attrs"]["kind"] = "foo"; }),
             Catch::Contains("graph JSON /ops/3/attrs/kind: unknown kind 'foo' (one of gemm, "
                             "attention, memory)"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][2]["attrs"].erase("aten"); }),
             Catch::Contains("/ops/2/attrs/aten: missing required key for an aten op"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][2]["attrs"]["aten"] = ""; }),
             Catch::Contains("/ops/2/attrs/aten: empty"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][2]["attrs"].erase("kind"); }),
             Catch::Contains("/ops/2/attrs/kind: missing required key for an aten op"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][2].erase("attrs"); }),
             Catch::Contains("/ops/2/attrs: missing required key"));
  // A native attribute on an aten op is an unknown key, like a misspelt one.
  CHECK_THAT(mutated_error([](json& j) { j["ops"][0]["attrs"]["in_features"] = 16; }),
             Catch::Contains("/ops/0/attrs/in_features: unknown key for a aten op (expected one "
                             "of: aten, kind)"));
  CHECK_THAT(mutated_error([](json& j) { j["ops"][0]["attrs"]["kind"] = 3; }),
             Catch::Contains("/ops/0/attrs/kind: expected a string"));
  CHECK_THAT(mutated_error([](json& j) { j["tensors"][9]["requires_grad"] = "no"; }),
             Catch::Contains("/tensors/9/requires_grad: expected true or false"));
  CHECK_THAT(mutated_error([](json& j) { j["tensors"][2]["dtype"] = "bool8"; }),
             Catch::Contains("/tensors/2/dtype") && Catch::Contains("bool or u8"));
  CHECK_THAT(mutated_error([](json& j) { j["default_wrap_classes"] = "MLPLayer"; }),
             Catch::Contains("/default_wrap_classes: expected an array"));
  CHECK_THAT(mutated_error([](json& j) { j["default_wrap_classes"] = json::array(); }),
             Catch::Contains("/default_wrap_classes: empty"));
  CHECK_THAT(mutated_error([](json& j) { j["default_wrap_classes"][0] = ""; }),
             Catch::Contains("/default_wrap_classes/0: empty class name"));
  CHECK_THAT(mutated_error([](json& j) { j["exporter"] = "torch 2.9"; }),
             Catch::Contains("/exporter: expected an object"));
  CHECK_THAT(mutated_error([](json& j) { j["buffers"] = {99}; }),
             Catch::Contains("/buffers/0: tensor index 99 out of range"));
}

TEST_CASE("exported graph semantic errors: buffers and aten attrs", "[plan][graph_io][exported]") {
  // A buffer is resident from the start: no op may produce it.
  CHECK_THAT(mutated_error([](json& j) {
               j["tensors"][3]["requires_grad"] = false;
               j["buffers"] = {3};
             }),
             Catch::Contains("op 'layers.0.relu' writes tensor 'layers.0.relu', which is a graph "
                             "input, a buffer or already produced"));
  CHECK_THAT(mutated_error([](json& j) { j["buffers"] = {0}; }),
             Catch::Contains("buffer tensor 'x' is also a graph input"));
  CHECK_THAT(mutated_error([](json& j) {
               j["tensors"].push_back({{"name", "b"}, {"shape", {"4"}}, {"dtype", "f32"}});
               j["buffers"] = {10};
             }),
             Catch::Contains("buffer tensor 'b' must have requires_grad false"));
  CHECK_THAT(mutated_error([](json& j) {
               j["tensors"].push_back(
                   {{"name", "b"}, {"shape", {"4"}}, {"dtype", "f32"}, {"requires_grad", false}});
               j["buffers"] = {10, 10};
             }),
             Catch::Contains("buffer tensor 'b' listed twice"));
  // Without the buffers key, an op reading a producer-less tensor is an error.
  CHECK_THAT(mutated_error([](json& j) {
               j["tensors"].push_back(
                   {{"name", "b"}, {"shape", {"4"}}, {"dtype", "f32"}, {"requires_grad", false}});
               j["ops"][1]["inputs"] = {2, 10};
             }),
             Catch::Contains("op 'layers.0.relu' reads tensor 'b' before any op produces it"));
  // aten attrs only on aten ops.
  CHECK_THAT(read_error([] {
               json j = graph_to_json(load_model("mlp"));
               j["ops"][0]["attrs"]["aten"] = "aten.addmm.default";
               return j;
             }()),
             Catch::Contains("/ops/0/attrs/aten: unknown key for a linear op"));
  // Graphs built in code are checked by validate() too.
  Graph g = load_model(kTinyMlp);
  g.ops[2].attrs.kind = "blas";
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("op 'layers.1.fc.mm': attrs.kind: unknown kind "
                                                  "'blas' (one of gemm, attention, memory)"));
  g.ops[2].attrs.kind.reset();
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("an aten op needs attrs.kind"));
}
