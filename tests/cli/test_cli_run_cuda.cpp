// `shardscope run --backend cuda` on a machine without a GPU (CI, the
// development machine): the run fails before starting any process with the
// CUDA runtime's error named, and every flag error is reported (exit 2, the
// flag named) before the device is even looked at. The collective times of
// emulated peers are the simulator's closed form (checked by hand here).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/emulated_timing.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "tests/cli/run_cli.h"

using shardscope::test::run_cli;

namespace {

// A GPU is visible to this process (the driver's device node): the CUDA run
// is expected to work rather than fail.
bool gpu_present() {
  return access("/dev/nvidiactl", F_OK) == 0 && access("/dev/nvidia0", F_OK) == 0;
}

bool names_cuda_runtime_error(const std::string& out) {
  return out.find("cudaErrorInsufficientDriver") != std::string::npos ||
         out.find("cudaErrorNoDevice") != std::string::npos;
}

// The build has no CUDA parts: the error says so instead.
bool names_missing_cuda_build(const std::string& out) {
  return out.find("SHARDSCOPE_CUDA=OFF") != std::string::npos;
}

}  // namespace

TEST_CASE("run --backend cuda without a device names the runtime error and starts no rank",
          "[cli][run][cuda]") {
  const std::string small = "--model gpt2-tiny --set seq_len=16 --steps 2";
  if (gpu_present()) {
    // With a GPU (not CI): the same command trains and reports engine-cuda.
    const auto r = run_cli("run --backend cuda " + small + " --nproc 1 --json");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("\"source\": \"engine-cuda\"") != std::string::npos);
    return;
  }
  for (const std::string extra : {"", " --nproc 2", " --emulate-world 4 --rank 1", " --profile"}) {
    const auto r = run_cli("run --backend cuda " + small + extra);
    INFO("extra flags '" << extra << "': " << r.output);
    CHECK(r.status == 2);
    CHECK((names_cuda_runtime_error(r.output) || names_missing_cuda_build(r.output)));
    CHECK(r.output.find("--backend cuda") != std::string::npos);
    // The launcher prefixes every line of a rank with "[rank r] ": none started.
    CHECK(r.output.find("[rank ") == std::string::npos);
  }
}

TEST_CASE("run --backend cuda trains mixtral-tiny and prints the emulated rank's expert counts",
          "[cli][run][cuda][moe]") {
  const std::string cmd = "run --backend cuda --model " + std::string(SHARDSCOPE_SOURCE_DIR) +
                          "/tests/data/mixtral-tiny.json --set batch_size=2 --set seq_len=16"
                          " --steps 2 --emulate-world 4 --rank 1";
  if (!gpu_present()) {
    // No GPU (CI): refused before any rank starts, naming the runtime error
    // (the op coverage is checked after the device: test_cuda_support.cpp).
    const auto r = run_cli(cmd);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK((names_cuda_runtime_error(r.output) || names_missing_cuda_build(r.output)));
    return;
  }
  // Forced uniform routing: per layer 2 x 16 x 2 / 4 = 16 tokens per expert,
  // measured on the one emulated rank (1), as assumed.
  const auto r = run_cli(cmd + " --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  // The JSON object after the progress lines (stderr shares the output).
  const size_t at = r.output.rfind("\n{\n");
  const size_t start = r.output.rfind("{\n", 0) == 0 ? 0 : (at == std::string::npos ? 0 : at + 1);
  const nlohmann::json moe = nlohmann::json::parse(r.output.substr(start)).at("moe_routing");
  CHECK(moe.at("routing") == "forced");
  REQUIRE(moe.at("layers").size() == 2);
  for (const nlohmann::json& layer : moe.at("layers")) {
    CHECK(layer.at("assumed") == nlohmann::json({16, 16, 16, 16}));
    CHECK(layer.at("measured") == nlohmann::json({{16, 16, 16, 16}}));
  }
  const auto text = run_cli(cmd);
  INFO(text.output);
  CHECK(text.output.find("tokens per expert in the last step, rank 1, vs assumed") !=
        std::string::npos);
  CHECK(text.output.find("model.layers.0.block_sparse_moe.router: measured 16..16, assumed "
                         "16..16") != std::string::npos);
}

TEST_CASE("run --backend cuda flag errors exit 2 naming the flag, before any device check",
          "[cli][run][cuda]") {
  struct Case {
    std::string flags, named;
  };
  const std::vector<Case> cases = {
      {"--backend cuda --rank 0", "--rank"},
      {"--backend cuda --emulate-world 4 --rank 4", "--rank"},
      {"--backend cuda --emulate-world 4 --rank -1", "--rank"},
      {"--backend cuda --emulate-world 4 --rank one", "--rank"},
      {"--backend cuda --emulate-world 4", "--rank"},
      {"--backend cuda --emulate-world 0 --rank 0", "--emulate-world"},
      {"--backend cuda --nproc 2 --emulate-world 4 --rank 0", "--nproc"},
      {"--backend cuda --hw h100-sxm", "--hw"},
      {"--backend cuda --emulate-world 4 --rank 0 --profile", "--profile"},
      {"--backend cuda --attention-kernel flash", "--attention-kernel"},
      {"--backend cpu --attention-kernel simt", "--attention-kernel"},
      // fp32 params (the default policy): the tensor-core kernels take 16-bit operands.
      {"--backend cuda --emulate-world 2 --rank 0 --attention-kernel tensor-core",
       "mixed_precision.param_dtype"},
      // cuDNN's attention too; its deterministic backward only with it, cuda only.
      {"--backend cuda --emulate-world 2 --rank 0 --attention-kernel cudnn",
       "--attention-kernel cudnn needs mixed_precision.param_dtype"},
      {"--backend cuda --deterministic-attention", "--deterministic-attention"},
      {"--backend cuda --attention-kernel tensor-core --deterministic-attention",
       "needs --attention-kernel cudnn"},
      {"--backend cpu --deterministic-attention", "--deterministic-attention"},
      {"--backend cuda --emulate-world 8 --rank 0 --hw no-such-gpu", "--hw"},
      {"--backend cuda --save /tmp/shardscope-never-written", "--save"},
      {"--backend cuda --load /tmp/shardscope-never-read", "--load"},
      {"--backend cuda --ranks-as-threads", "--ranks-as-threads"},
      {"--backend cpu --emulate-world 2 --rank 0", "--emulate-world"},
      {"--emulate-world 2 --rank 0", "--emulate-world"},
      {"--backend cpu --profile", "--profile"},
      {"--backend cpu --cuda-graph", "--cuda-graph"},
      {"--backend tpu", "--backend"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli("run --model gpt2-tiny --steps 1 " + c.flags);
    INFO(c.flags << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(c.named) != std::string::npos);
    CHECK(!names_cuda_runtime_error(r.output));
    CHECK(r.output.find("[rank ") == std::string::npos);
  }
}

TEST_CASE("run --backend cuda checks model and policy before the device when the world is known",
          "[cli][run][cuda]") {
  // --emulate-world 8 fixes the world: a policy for 4 ranks is refused first.
  auto r =
      run_cli("run --backend cuda --model gpt2-tiny --emulate-world 8 --rank 3 --set world_size=4");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("world_size") != std::string::npos);
  CHECK(!names_cuda_runtime_error(r.output));

  r = run_cli("run --backend cuda --model no-such-model --nproc 1");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("no-such-model") != std::string::npos);
  CHECK(!names_cuda_runtime_error(r.output));
}

TEST_CASE("emulated collective times are the simulator's ring formula on the engine's byte counts",
          "[cli][run][cuda]") {
  using shardscope::engine::run::emulated_collective_ns;
  using shardscope::engine::run::EmulatedCollective;
  // The analytical ring formula: without the preset's published all-reduce fit.
  shardscope::sim::HardwareModel hw = shardscope::sim::hardware_preset("h100-sxm");
  hw.collectives.clear();
  REQUIRE(hw.gpus_per_node == 8);
  const std::vector<int> node0 = {0, 1, 2, 3, 4, 5, 6, 7};
  const uint64_t per_rank = uint64_t{1} << 20;  // 1 MiB from each of 8 ranks
  const double s = 8.0 * static_cast<double>(per_rank);

  // All-gather of 1 MiB per rank on one node: S = 8 MiB,
  // t = C + 7 hop + S / B * 7/8.
  const double ag_ns = static_cast<double>(hw.collective_latency_ns + 7 * hw.nvlink_latency_ns) +
                       s / hw.nvlink_bus_bytes_per_s * 7.0 / 8.0 * 1e9;
  CHECK(std::abs(static_cast<double>(
                     emulated_collective_ns(hw, EmulatedCollective::all_gather, per_rank, node0)) -
                 ag_ns) <= 1.0);
  // Reduce-scatter: the engine passes the input (8 MiB) = S; same time as the all-gather.
  CHECK(emulated_collective_ns(hw, EmulatedCollective::reduce_scatter, 8 * per_rank, node0) ==
        emulated_collective_ns(hw, EmulatedCollective::all_gather, per_rank, node0));
  // All-reduce of an 8 MiB buffer on one node: ring, twice the hops and the data.
  const double ar_ns =
      static_cast<double>(hw.collective_latency_ns + 2 * 7 * hw.nvlink_latency_ns) +
      2.0 * s / hw.nvlink_bus_bytes_per_s * 7.0 / 8.0 * 1e9;
  CHECK(std::abs(static_cast<double>(emulated_collective_ns(hw, EmulatedCollective::all_reduce,
                                                            8 * per_rank, node0)) -
                 ar_ns) <= 1.0);
  // Broadcast of 8 MiB: the all-gather's latency terms, all of S through each link.
  const double bc_ns = static_cast<double>(hw.collective_latency_ns + 7 * hw.nvlink_latency_ns) +
                       s / hw.nvlink_bus_bytes_per_s * 1e9;
  CHECK(std::abs(static_cast<double>(emulated_collective_ns(hw, EmulatedCollective::broadcast,
                                                            8 * per_rank, node0)) -
                 bc_ns) <= 1.0);
  // Ranks 0 and 8 sit on two nodes: the IB terms (one GPU per node drives one NIC).
  const double two_nodes_ns = static_cast<double>(hw.collective_latency_ns + hw.ib_latency_ns) +
                              2.0 * static_cast<double>(per_rank) /
                                  std::min(hw.nvlink_bus_bytes_per_s, hw.ib_bytes_per_s) * 0.5 *
                                  1e9;
  CHECK(std::abs(static_cast<double>(
                     emulated_collective_ns(hw, EmulatedCollective::all_gather, per_rank, {0, 8})) -
                 two_nodes_ns) <= 1.0);
  // A group of one rank communicates with nobody.
  CHECK(emulated_collective_ns(hw, EmulatedCollective::all_reduce, 8 * per_rank, {5}) == 0);
}
