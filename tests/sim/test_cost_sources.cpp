// Which costs came from the base preset rather than a fit (issue 31, item 3):
// calibrate records what it fitted (hardware JSON "fitted"), simulate lists
// the graph-op costs it used that were not fitted, in text and JSON.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/hardware.h"
#include "tests/cli/run_cli.h"
#include "tests/plan/toy_graph.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("costs_from_base lists the schedule's unfitted op type, dtype and direction",
          "[sim][hw][calibrate]") {
  const plan::Graph g = test::toy_graph();
  plan::Schedule s;
  s.workload = plan::Workload{1, 4};
  s.streams = {"host", "compute"};
  s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute};
  plan::ScheduleOp op;
  op.stream = 1;
  op.kind = plan::OpKind::forward;
  op.graph_op = 1;  // blocks.0.fc, linear
  op.dtype = plan::DType::bf16;
  s.ops.push_back(op);
  op.kind = plan::OpKind::backward;
  s.ops.push_back(op);
  op.kind = plan::OpKind::forward;
  op.graph_op = 4;  // head.loss, cross_entropy
  op.dtype = plan::DType::f32;
  s.ops.push_back(op);
  op.graph_op = -1;  // not a graph op: never listed
  op.kind = plan::OpKind::optimizer;
  s.ops.push_back(op);

  sim::HardwareModel hw = sim::hardware_preset("h200-sxm");
  CHECK(sim::costs_from_base(hw, g, s).empty());  // a preset: nothing to contrast with a fit
  hw = sim::hardware_from_json(json{{"base", "h200-sxm"}, {"fitted", {{"bf16", {"linear"}}}}},
                               "fit.json");
  CHECK(hw.fitted.calibrated);
  CHECK(sim::costs_from_base(hw, g, s) ==
        std::vector<std::string>{"cross_entropy f32 forward", "linear bf16 backward"});
  CHECK(sim::hardware_to_json(hw)["fitted"] == json{{"bf16", {"linear"}}});
}

TEST_CASE("bad fitted entries are errors naming the key", "[sim][hw][calibrate]") {
  const auto error = [](const json& fitted) {
    try {
      sim::hardware_from_json(json{{"fitted", fitted}}, "fit.json");
    } catch (const sim::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"bf16", {"softmax"}}}) ==
        "fit.json: hardware key 'fitted.bf16[0]' must be an op type (linear, attention, ... "
        "optionally with '.backward'), got \"softmax\"");
  CHECK(error({{"bf16", "linear"}}) == "fit.json: hardware key 'fitted.bf16' must be an array");
  CHECK(error({{"int3", json::array()}}).find("fitted.int3") != std::string::npos);
  CHECK(error(json::array()) ==
        "fit.json: hardware key 'fitted' must be an object {dtype: [op type, ...]}");
}

TEST_CASE("calibrated on a bf16 run, simulate says the fp32 costs came from the base preset",
          "[sim][calibrate][recorded][h200]") {
  test::TempDir dir;
  const std::string fit = (dir.path / "fit.json").string();
  const std::string trace =
      std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/h200/grid-base.trace.gz";
  REQUIRE(test::run_cli("calibrate " + trace + " --base h200-sxm --out " + fit).status == 0);
  const std::string run = "simulate --model gpt2-small --world 8 --hw " + fit + " --set ";
  const test::CliResult fp32 = test::run_cli(run + "mixed_precision.param_dtype=fp32");
  INFO(fp32.output);
  REQUIRE(fp32.status == 0);
  CHECK(fp32.output.find("from the base preset, not fitted: ") != std::string::npos);
  CHECK(fp32.output.find("linear f32 forward") != std::string::npos);
  CHECK(fp32.output.find("efficiencies fitted for ") != std::string::npos);
  const test::CliResult bf16 = test::run_cli(run + "mixed_precision.param_dtype=bf16 --json");
  REQUIRE(bf16.status == 0);
  const json j = json::parse(bf16.output)["cost_sources"];
  CHECK(j["calibrated"] == true);
  CHECK(j["fitted"]["bf16"].size() > 0);
  for (const auto& k : j["from_base"])
    CHECK(k.get<std::string>().find(" bf16 ") != std::string::npos);
  for (const auto& k : j["from_base"]) CHECK(k.get<std::string>().rfind("linear", 0) != 0);
  const test::CliResult preset =
      test::run_cli("simulate --model gpt2-small --world 8 --hw h200-sxm --json");
  REQUIRE(preset.status == 0);
  CHECK(json::parse(preset.output)["cost_sources"] == json{{"calibrated", false}});
}
