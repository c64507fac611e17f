// allocator.expandable_segments as a policy key: simulate and sweep model it
// (alloc/expandable_segments.cpp), the engines refuse it.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/cli/simulate_json.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using nlohmann::json;
using shardscope::test::run_cli;
using shardscope::test::simulate_json;

namespace {

const char* kGpt2Small =
    "--model gpt2-small --world 8 --hw h200-sxm --set batch_size=8 --set seq_len=1024 "
    "--set mixed_precision.param_dtype=bf16";

}  // namespace

TEST_CASE("expandable segments save reserved memory on gpt2-small at B = 8", "[sim][cli]") {
  const json fixed = simulate_json(kGpt2Small);
  const json grown =
      simulate_json(std::string(kGpt2Small) + " --set allocator.expandable_segments=true");
  // Fixed segments: the loss's 1.6 GB blocks each hold a segment of their
  // own, and a segment split once never serves its full size again. One
  // growing segment per stream and pool reuses the space.
  const int64_t saved =
      fixed["peak_reserved_bytes"].get<int64_t>() - grown["peak_reserved_bytes"].get<int64_t>();
  CAPTURE(saved);
  CHECK(saved > 500'000'000);
  // Reserved is whole 20 MiB / 2 MiB pages, at least the allocated blocks.
  CHECK(grown["peak_reserved_bytes"].get<int64_t>() % (2 << 20) == 0);
  CHECK(grown["peak_reserved_bytes"].get<int64_t>() >=
        grown["peak_allocated_with_workspaces_bytes"].get<int64_t>());
  // The tensors are the same; allocated blocks differ only by the large
  // pool's split rule (>= 512 B with expandable segments, > 1 MiB without).
  CHECK(grown["peak_requested_bytes"] == fixed["peak_requested_bytes"]);
  CHECK(grown["peak_allocated_bytes"].get<int64_t>() <=
        fixed["peak_allocated_bytes"].get<int64_t>());
}

TEST_CASE("allocator.expandable_segments is a sweepable policy key", "[sim][cli]") {
  test::TempDir dir;
  const std::string grid = dir.write(
      "grid.json",
      json{{"allocator", {{{"expandable_segments", false}}, {{"expandable_segments", true}}}}});
  const auto r =
      run_cli("sweep --model gpt2-tiny --world 2 --hw h200-sxm --grid " + grid + " --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const json j = json::parse(r.output);
  REQUIRE(j["configs"].size() == 2);
  CHECK(j["configs"][0]["policy"]["allocator"]["expandable_segments"] !=
        j["configs"][1]["policy"]["allocator"]["expandable_segments"]);
  // gpt2-tiny's blocks are small: 20 MiB pages per stream reserve more than
  // its fixed 2 MiB and 20 MiB segments.
  CHECK(j["configs"][0]["metrics"]["peak_reserved_bytes"] !=
        j["configs"][1]["metrics"]["peak_reserved_bytes"]);
}

TEST_CASE("bad allocator keys and running expandable segments are refused with status 2",
          "[sim][cli]") {
  auto r = run_cli("simulate --model gpt2-tiny --set allocator.expandable=true");
  CHECK(r.status == 2);
  CHECK(r.output.find("allocator.expandable: unknown key") != std::string::npos);
  r = run_cli("simulate --model gpt2-tiny --set allocator.expandable_segments=3");
  CHECK(r.status == 2);
  CHECK(r.output.find("allocator.expandable_segments") != std::string::npos);
  r = run_cli("run --model gpt2-tiny --steps 1 --set allocator.expandable_segments=true");
  CHECK(r.status == 2);
  CHECK(r.output.find("allocator.expandable_segments = true: the engines' caching allocators "
                      "cannot grow a segment in place") != std::string::npos);
}
