// Step time against real PyTorch on the H200 (issue 31, item 4): the PyTorch
// profiles recorded under CUPTI in tests/recorded/h200/ (measured by
// `report`) against `simulate` on the uncalibrated h200-sxm preset for the
// same model, batch and precision. bench/recorded/accuracy_gpu.py prints the
// same comparison class by class; docs/accuracy.md holds the figures.
//
// The bound is 15% uncalibrated, its goal 10%. Eager B = 48 is
// +0.9%; one-GPU FSDP2 B = 8 is -10.7% since attention is costed by the
// cuDNN kernel PyTorch runs (-3.9% before: the FlashAttention-2 curve priced
// its attention at +191%, hiding the rest of the gap); both held at the
// issue's 15%. -22.4% before host dispatch was modelled, -61% and -63%
// before the op-level model. The host figures were read off the FSDP2
// profile's forward and the attention figures off the eager profile, so
// neither bound is an independent check (docs/accuracy.md). The calibrated bound (5%)
// has no test: calibrate needs FLOPs, and these profiles have no shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

using nlohmann::json;

namespace {

const std::string kDir = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/recorded/h200/";

json run_json(const std::string& args) {
  const shardscope::test::CliResult r = shardscope::test::run_cli(args);
  INFO("shardscope " << args << "\n" << r.output);
  REQUIRE(r.status == 0);
  return json::parse(r.output);
}

// (predicted - measured) / measured of the step time.
double step_error(const std::string& profile, const std::string& sets) {
  const double measured =
      run_json("report " + kDir + profile + " --json")["step_time_ms"].get<double>();
  const double predicted = run_json("simulate --model gpt2-small --world 1 --hw h200-sxm " + sets +
                                    " --json")["step_time_ms"]
                               .get<double>();
  INFO(profile << ": measured " << measured << " ms, predicted " << predicted << " ms");
  return (predicted - measured) / measured;
}

}  // namespace

TEST_CASE("uncalibrated h200-sxm predicts PyTorch eager GPT-2 B=48 within 15%",
          "[recorded][h200][accuracy]") {
  const double e =
      step_error("profile-torch-eager-b48.trace.gz",
                 "--set mixed_precision.param_dtype=bf16 --set batch_size=48 --set seq_len=1024");
  INFO("error " << 100 * e << "%");
  CHECK(std::fabs(e) < 0.15);
}

TEST_CASE("uncalibrated h200-sxm on PyTorch one-GPU FSDP2 B=8 (host-bound) within 15%",
          "[recorded][h200][accuracy]") {
  const double e = step_error("profile-torch-fsdp2-b8.trace.gz",
                              "--set mixed_precision.param_dtype=bf16 --set batch_size=8 --set "
                              "seq_len=1024 --set wrap.type=class --set "
                              "'wrap.classes=[\"GPT2Block\"]'");
  INFO("error " << 100 * e << "%");
  CHECK(std::fabs(e) < 0.15);
}

TEST_CASE("calibrate on a profile without shapes says why it cannot fit",
          "[recorded][h200][calibrate]") {
  const shardscope::test::CliResult r = shardscope::test::run_cli(
      "calibrate " + kDir + "profile-torch-eager-b48.trace.gz --base h200-sxm --out /dev/null");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("no compute events with FLOPs and no collectives: nothing to calibrate "
                      "from (its ") != std::string::npos);
  CHECK(r.output.find("compute events carry no FLOPs: a trace without shapes") !=
        std::string::npos);
  CHECK(r.output.find("record_shapes=True") != std::string::npos);
}
