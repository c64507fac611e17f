// Small inputs that asked for unbounded memory or time (a config.json with a
// million experts, a 1 GiB policy of whitespace, a latency of 2^63-1 ns):
// refused with exit 2 and a message naming the file, the key, the value and
// the limit, under a 1 GiB address-space limit (before: std::bad_alloc after
// gigabytes, or minutes of work).
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using shardscope::test::run_cli;

namespace {

// The command runs with at most 1 GiB of memory: 1 GiB of address space, or,
// in sanitizer builds (ASan reserves terabytes of address space for its
// shadow, so no `ulimit -v` lets it start), ASan's own hard limit on the
// resident set, which aborts the process (exit 134, not 2) when reached.
#if defined(__SANITIZE_ADDRESS__)
#define SHARDSCOPE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDSCOPE_TEST_ASAN 1
#endif
#endif
#ifdef SHARDSCOPE_TEST_ASAN
const std::string kOneGiB = "ASAN_OPTIONS=hard_rss_limit_mb=1024";
#else
const std::string kOneGiB = "ulimit -v 1048576;";
#endif

json tiny(const std::string& name) {
  std::ifstream in(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/" + name + ".json");
  REQUIRE(in.good());
  return json::parse(in);
}

}  // namespace

TEST_CASE("config.json sizes that would exhaust memory exit 2 naming key, value and limit",
          "[cli][limits]") {
  shardscope::test::TempDir dir;
  json mixtral = tiny("mixtral-tiny");
  mixtral["num_local_experts"] = 1000000;
  const std::string experts = dir.write("experts.json", mixtral);
  auto r = run_cli("plan --model " + experts, kOneGiB);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(experts + ": key 'num_local_experts': 1000000 exceeds the "
                                                 "limit 4096 (published mixture-of-experts"));

  json qwen = tiny("qwen2-tiny");
  qwen["num_hidden_layers"] = 10000000;
  const std::string layers = dir.write("layers.json", qwen);
  r = run_cli("simulate --model " + layers, kOneGiB);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(layers + ": key 'num_hidden_layers': 10000000 exceeds the "
                                                "limit 1024 ("));

  // 100,000 experts ran past 120 s (time quadratic in experts).
  mixtral["num_local_experts"] = 100000;
  r = run_cli("simulate --model " + dir.write("e100k.json", mixtral), kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("'num_local_experts': 100000 exceeds the limit 4096"));

  // Was "Poly *: overflow", naming neither file nor key.
  qwen = tiny("qwen2-tiny");
  qwen["num_attention_heads"] = int64_t{1} << 62;
  qwen["head_dim"] = 16;
  const std::string heads = dir.write("heads.json", qwen);
  r = run_cli("plan --model " + heads, kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(heads + ": key 'num_attention_heads': 4611686018427387904 "
                                               "exceeds the limit 4096"));
}

TEST_CASE("a batch_size of 2^62 exits 2 naming the key and the limit", "[cli][limits]") {
  // Was "tensor '...': element count overflows int64".
  auto r = run_cli("plan --model gpt2-tiny --set batch_size=4611686018427387904", kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("policy: batch_size: 4611686018427387904 exceeds the limit "
                                       "1048576"));
}

TEST_CASE("1 GiB policy, grid, hardware and model files exit 2 naming the file, size and cap",
          "[cli][limits]") {
  shardscope::test::TempDir dir;
  const std::string big = (dir.path / "big.json").string();
  { std::ofstream(big) << " "; }
  std::filesystem::resize_file(big, uintmax_t{1} << 30);  // sparse: no disk used
  const std::string over = "'" + big + "' is 1073741824 bytes, over the limit of ";
  auto r = run_cli("plan --model gpt2-tiny --policy " + big, kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--policy: " + over + "67108864 bytes (64 MiB)"));
  r = run_cli("simulate --model gpt2-tiny --hw " + big, kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("hardware: " + over + "67108864 bytes (64 MiB)"));
  r = run_cli("sweep --model gpt2-tiny --grid " + big, kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("grid: " + over + "67108864 bytes (64 MiB)"));
  r = run_cli("plan --model " + big, kOneGiB);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("model: " + over + "268435456 bytes (256 MiB)"));
}

TEST_CASE("a hardware latency of 2^63-1 ns exits 2 naming the file, key and limit",
          "[cli][limits]") {
  // Was "event with a negative or overflowing duration".
  shardscope::test::TempDir dir;
  for (const char* key : {"op_dispatch_ns", "collective_latency_ns"}) {
    const std::string hw =
        dir.write(std::string(key) + ".json",
                  json{{"base", "h100-sxm"}, {key, int64_t{9223372036854775807}}});
    auto r = run_cli("simulate --model gpt2-tiny --hw " + hw);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("hardware '" + hw + "': " + key +
                                         " = 9223372036854775807 exceeds the limit "
                                         "1000000000000 ns"));
  }
}
