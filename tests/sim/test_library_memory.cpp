// Memory outside the tensors (docs/allocator.md, "Memory outside the
// tensors"): the cuBLAS / cuBLASLt workspaces PyTorch holds in its caching
// allocator, and the estimate of NCCL's own buffers.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/hardware.h"
#include "sim/nccl_buffers.h"
#include "tests/cli/run_cli.h"
#include "tests/cli/simulate_json.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using nlohmann::json;
using shardscope::test::run_cli;

namespace {

// gpt2-tiny on 8 ranks, with `args`.
json tiny_simulate_json(const std::string& args) {
  return test::simulate_json("--model gpt2-tiny --world 8 " + args);
}

}  // namespace

TEST_CASE("the CUDA presets hold PyTorch's cuBLAS workspaces, cpu-local none", "[sim][hw]") {
  // CublasHandlePool.cpp: 4096 KiB x 8 on sm90, ":4096:2:16:8" before it.
  for (const char* hopper : {"h100-sxm", "h200-sxm"}) {
    CHECK(sim::hardware_preset(hopper).blas_workspace_bytes == 33554432);
    CHECK(sim::hardware_preset(hopper).blas_workspaces == 2);
  }
  CHECK(sim::hardware_preset("a100-sxm").blas_workspace_bytes == 4194304 * 2 + 16384 * 8);
  CHECK(sim::hardware_preset("cpu-local").blas_workspace_bytes == 0);
  CHECK(sim::hardware_preset("cpu-local").nccl_channels == 0);
  // NCCL's per-channel buffers: SIMPLE 4 MiB + LL 512 KiB + LL128 4800 KiB.
  CHECK(sim::hardware_preset("h200-sxm").nccl_buffsize_bytes == 4194304);
  CHECK(sim::kNcclLlBufferBytes == 524288);
  CHECK(sim::kNcclLl128BufferBytes == 4915200);
}

TEST_CASE("a negative workspace or NCCL field is refused naming it and its value", "[sim][hw]") {
  for (const char* key :
       {"blas_workspace_bytes", "blas_workspaces", "nccl_channels", "nccl_buffsize_bytes"}) {
    INFO(key);
    try {
      sim::hardware_from_json(json{{"base", "h200-sxm"}, {key, -3}}, "mine.json");
      FAIL("no error");
    } catch (const sim::Error& e) {
      CHECK(std::string(e.what()).find(std::string(key) + " must be >= 0, not -3") !=
            std::string::npos);
    }
  }
  test::TempDir dir;
  const std::string hw = dir.write("hw.json", json{{"base", "h200-sxm"}, {"blas_workspaces", -1}});
  const auto r = run_cli("simulate --model gpt2-tiny --hw " + hw);
  CHECK(r.status == 2);
  CHECK(r.output.find("blas_workspaces must be >= 0, not -1") != std::string::npos);
}

TEST_CASE("simulate holds the workspaces in reserved, outside the tensors' peak", "[sim][cli]") {
  const json h200 = tiny_simulate_json("--hw h200-sxm");
  CHECK(h200["blas_workspace_bytes"] == 2 * 33554432);
  CHECK(h200["peak_allocated_with_workspaces_bytes"].get<int64_t>() ==
        h200["peak_allocated_bytes"].get<int64_t>() + 2 * 33554432);
  // Each 32 MiB block is a segment of its own (>= 10 MiB: its size, 2 MiB-rounded).
  CHECK(h200["peak_reserved_bytes"].get<int64_t>() >=
        h200["peak_allocated_bytes"].get<int64_t>() + 2 * 33554432);
  // Without them the same hardware reserves 64 MiB less on this small model,
  // and the tensors are unchanged.
  test::TempDir dir;
  const std::string none =
      dir.write("none.json", json{{"base", "h200-sxm"}, {"blas_workspaces", 0}});
  const json bare = tiny_simulate_json("--hw " + none);
  CHECK(bare["blas_workspace_bytes"] == 0);
  CHECK(bare["peak_allocated_bytes"] == h200["peak_allocated_bytes"]);
  CHECK(bare["peak_reserved_bytes"].get<int64_t>() + 2 * 33554432 ==
        h200["peak_reserved_bytes"].get<int64_t>());
  // a100: two 8,519,680 B blocks (under 10 MiB) split one 20 MiB segment.
  const json a100 = tiny_simulate_json("--hw a100-sxm");
  CHECK(a100["blas_workspace_bytes"] == 2 * 8519680);
  const json cpu = tiny_simulate_json("--hw cpu-local");
  CHECK(cpu["blas_workspace_bytes"] == 0);
  CHECK(cpu["peak_allocated_with_workspaces_bytes"] == cpu["peak_allocated_bytes"]);
}

TEST_CASE("simulate estimates NCCL's buffers per communicator and channel", "[sim][cli]") {
  const int64_t per_channel = 4194304 + 524288 + 4915200;  // 9,633,792 B
  // Full sharding over 8 ranks: one communicator (the shard group).
  const json fsdp = tiny_simulate_json("--hw h200-sxm");
  CHECK(fsdp["nccl_communicators"] == 1);
  CHECK(fsdp["nccl_buffer_bytes"] == 16 * per_channel);
  // Hybrid: shard groups of 4, replicas across: two communicators.
  const json hsdp = tiny_simulate_json("--hw h200-sxm --set shard_group_size=4");
  CHECK(hsdp["nccl_communicators"] == 2);
  CHECK(hsdp["nccl_buffer_bytes"] == 2 * 16 * per_channel);
  CHECK(tiny_simulate_json("--hw cpu-local")["nccl_buffer_bytes"] == 0);
  const auto text = run_cli("simulate --model gpt2-tiny --world 8 --hw h200-sxm");
  REQUIRE(text.status == 0);
  CHECK(text.output.find("NCCL buffers 147.00 MiB, an estimate outside the caching allocator") !=
        std::string::npos);
}
