// `--set vocab_pad_to=K` (plan/vocab_padding.h) through the CLI: plan,
// simulate and run follow the padded sizes (hand-computed bytes), run's
// losses are the unpadded ones, bad values and a sweep grid key exit 2
// naming the key, and a checkpoint resumes only with its own padding.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using shardscope::test::run_cli;

namespace {

json json_of(const std::string& output) {
  const size_t at = output.rfind("\n{\n");
  const size_t start = output.rfind("{\n", 0) == 0 ? 0 : (at == std::string::npos ? 0 : at + 1);
  return json::parse(output.substr(start));
}

json cli_json(const std::string& args) {
  const auto r = run_cli(args + " --json");
  INFO(args << "\n" << r.output);
  REQUIRE(r.status == 0);
  return json_of(r.output);
}

}  // namespace

TEST_CASE("plan and simulate follow the padded sizes of gpt2-tiny, byte for byte",
          "[cli][vocab_padding]") {
  // gpt2-tiny: 141,056 parameters, V = 512, C = 64. vocab_pad_to 96 pads the
  // tied wte to 576 rows: 4,096 more elements, 145,152 in all. World 2, one
  // unit (wrap none), fp32, AdamW, B = 2, T = 16 (32 tokens).
  const std::string common = "--model gpt2-tiny --world 2 --set vocab_pad_to=96";
  const json plan = cli_json("plan " + common);
  CHECK(plan.at("params_total") == 145152);
  CHECK(plan.at("units").at(0).at("shard_numel") == 145152 / 2);
  // One all-gather (the root keeps its parameters from forward to backward)
  // and one reduce-scatter of the unit, each (W - 1) / W of its fp32 bytes.
  CHECK(plan.at("comm_bytes_per_rank").at("all_gather").get<double>() == 145152 * 4 / 2);
  CHECK(plan.at("comm_bytes_per_rank").at("reduce_scatter").get<double>() == 145152 * 4 / 2);
  // fp32 shard, two AdamW moments.
  CHECK(plan.at("persistent_bytes_per_rank") == 3 * 145152 * 4 / 2);

  const std::string workload = " --set batch_size=2 --set seq_len=16";
  const json plain = cli_json("simulate --model gpt2-tiny --world 2" + workload);
  const json padded = cli_json("simulate " + common + workload);
  const json& a = plain.at("peak_breakdown").at("by_category");
  const json& b = padded.at("peak_breakdown").at("by_category");
  // At the peak (the lm_head's backward): the shard, its two moments, the
  // unsharded parameters and the unsharded gradient the reduce-scatter reads,
  // each at the padded size (all multiples of 512 B: no rounding) ...
  CHECK(b.at("parameters") == 145152 / 2 * 4);
  CHECK(b.at("optimizer_state") == 2 * 145152 / 2 * 4);
  CHECK(b.at("unsharded_params") == 145152 * 4);
  CHECK(b.at("comm_buffers") == 145152 * 4);
  // ... and two logits-sized activations, 32 tokens x 64 padded columns x 4 B more each.
  CHECK(b.at("activations").get<int64_t>() - a.at("activations").get<int64_t>() == 2 * 32 * 64 * 4);
  CHECK(padded.at("peak_allocated_bytes").get<int64_t>() -
            plain.at("peak_allocated_bytes").get<int64_t>() ==
        4096 * 4 / 2 + 2 * 4096 * 4 / 2 + 4096 * 4 + 4096 * 4 + 2 * 32 * 64 * 4);  // 73,728
}

TEST_CASE("bad vocab_pad_to values exit 2 naming the key", "[cli][vocab_padding]") {
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"plan --model gpt2-tiny --set vocab_pad_to=0", "vocab_pad_to"},
      {"plan --model gpt2-tiny --set vocab_pad_to=65537", "exceeds the limit 65536"},
      {"simulate --model gpt2-tiny --set vocab_pad_to=abc", "vocab_pad_to"},
      {"simulate --model gpt2-tiny --set vocab_pad_to=1.5", "vocab_pad_to"},
      {"plan --model mlp --set vocab_pad_to=128", "model 'mlp' has no vocabulary"},
      {"run --model gpt2-tiny --nproc 2 --steps 1 --set vocab_pad_to=-8", "vocab_pad_to"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const auto r = run_cli(c.args);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("vocab_pad_to") && Catch::Contains(c.needle));
  }
  // A sweep pads once: the key in a grid is refused, as world_size is.
  shardscope::test::TempDir dir;
  const std::string grid = dir.write("grid.json", json{{"vocab_pad_to", {1, 128}}});
  const auto r = run_cli("sweep --model gpt2-tiny --grid " + grid + " --world 2");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("vocab_pad_to") && Catch::Contains("not in the grid"));
}

TEST_CASE("run: a padded gpt2-tiny has the unpadded losses, and a resume needs the same padding",
          "[cli][vocab_padding][run]") {
  const std::string common = "run --model gpt2-tiny --nproc 2 --ranks-as-threads --set seq_len=16";
  const json plain = cli_json(common + " --steps 3");
  const json padded = cli_json(common + " --steps 3 --set vocab_pad_to=96");
  CHECK(padded.at("losses") == plain.at("losses"));
  CHECK(padded.at("peak_allocated_bytes").get<int64_t>() >
        plain.at("peak_allocated_bytes").get<int64_t>());

  const std::string dir = "/tmp/shardscope-cli-vocab-pad-" + std::to_string(::getpid());
  auto r = run_cli(common + " --steps 1 --set vocab_pad_to=96 --save " + dir);
  REQUIRE(r.status == 0);
  r = run_cli(common + " --steps 1 --set vocab_pad_to=96 --load " + dir);
  INFO(r.output);
  CHECK(r.status == 0);
  // 192 also pads 512 to 576: the same tensors, loaded.
  r = run_cli(common + " --steps 1 --set vocab_pad_to=192 --load " + dir);
  CHECK(r.status == 0);
  r = run_cli(common + " --steps 1 --load " + dir);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("tensor 'transformer.wte.weight' is [576, 64], the "
                                       "model's is [512, 64]") &&
                           Catch::Contains("saved with vocab_pad_to = 96, this run has "
                                           "vocab_pad_to = 1"));
  (void)std::system(("rm -rf " + dir).c_str());
}
