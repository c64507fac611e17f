// The hardware key table (sim/hardware_keys.h): every key has one row, and
// hardware_from_json, hardware_to_json and validate() all follow it.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "sim/hardware.h"
#include "sim/hardware_keys.h"

using namespace shardscope;
using nlohmann::json;

namespace {

// Every top-level key set away from the h100-sxm preset's value.
json every_key_set() {
  return {{"base", "a100-sxm"},
          {"name", "every-key"},
          {"device", "sm_80"},
          {"peak_flops_fp32", 1e13},
          {"peak_flops_bf16", 2e14},
          {"peak_flops_fp16", 3e14},
          {"hbm_bytes_per_s", 1e12},
          {"memory_bytes", 1e10},
          {"nvlink_bus_bytes_per_s", 2e11},
          {"nvlink_latency_ns", 1500},
          {"ib_bytes_per_s", 2e10},
          {"ib_latency_ns", 4000},
          {"collective_latency_ns", 9000},
          {"all_reduce_algorithm", "tree"},
          {"collectives",
           {{{"kind", "all_gather"},
             {"ranks", 8},
             {"multi_node", false},
             {"latency_ns", 7000},
             {"bus_bytes_per_s", 1.5e11},
             {"small", {{"max_bytes", 65536}, {"latency_ns", 5000}, {"bus_bytes_per_s", 1e10}}}}}},
          {"pcie_bytes_per_s", 2e10},
          {"host_memory_bytes_per_s", 5e10},
          {"efficiency", {{"linear", 0.5}}},
          {"dtype_efficiency", {{"bf16", {{"attention", 0.4}}}}},
          {"efficiency_curves", {{"bf16", {{"linear", {{1e9, 0.3}, {1e11, 0.6}}}}}}},
          {"memory_ops", {{"grad_cast", {{"fixed_ns", 20000}, {"bandwidth_efficiency", 0.4}}}}},
          {"launch_overhead_ns", 6000},
          {"op_dispatch_ns", 3000},
          {"launch_queue_depth", 64},
          {"contention_factor", 1.25},
          {"gpus_per_node", 4},
          {"blas_workspace_bytes", 1 << 20},
          {"blas_workspaces", 3},
          {"nccl_channels", 12},
          {"nccl_buffsize_bytes", 1 << 21},
          {"op_level", {{"sustained_clock_fraction", 0.9}}},
          {"fitted", {{"bf16", {"linear"}}}}};
}

}  // namespace

TEST_CASE("hardware_to_json writes exactly the rows, four only when set", "[sim][hw][keys]") {
  std::set<std::string> rows;
  for (const sim::HardwareKey& k : sim::hardware_keys()) {
    CHECK(rows.insert(k.name).second);  // one row per key
    CHECK(sim::find_hardware_key(k.name) == &k);
    CHECK(k.read != nullptr);
    CHECK(k.write != nullptr);
  }
  CHECK(sim::find_hardware_key(sim::kHardwareBaseKey) == nullptr);  // read before the rows
  CHECK(sim::find_hardware_key("bogus") == nullptr);
  sim::HardwareModel h = sim::hardware_preset("h100-sxm");
  h.dtype_efficiency.clear();
  h.efficiency_curves.clear();
  h.memory_ops.clear();
  h.fitted = {};
  const json written = sim::hardware_to_json(h);
  const std::set<std::string> only_when_set{"dtype_efficiency", "efficiency_curves", "memory_ops",
                                            "fitted"};
  for (const auto& [key, value] : written.items()) CHECK(rows.count(key) == 1);
  for (const std::string& r : rows) CHECK(written.contains(r) == (only_when_set.count(r) == 0));
  CHECK(rows.size() == written.size() + only_when_set.size());
}

TEST_CASE("every hardware row reads back what it writes", "[sim][hw][keys]") {
  const json doc = every_key_set();
  const json once = sim::hardware_to_json(sim::hardware_from_json(doc, "doc.json"));
  const json base = sim::hardware_to_json(sim::hardware_preset("h100-sxm"));
  for (const sim::HardwareKey& k : sim::hardware_keys()) {
    INFO(k.name);
    REQUIRE(doc.contains(k.name));  // the document sets every row
    REQUIRE(once.contains(k.name));
    CHECK(once.at(k.name) != base.value(k.name, json()));  // ... to a value the base lacks
  }
  CHECK(once.at("nvlink_bus_bytes_per_s") == 2e11);
  CHECK(once.at("collectives")[0].at("small").at("max_bytes") == 65536);
  CHECK(once.at("efficiency").at("linear") == 0.5);
  CHECK(once.at("op_level").at("sustained_clock_fraction") == 0.9);
  CHECK(once.at("fitted") == json{{"bf16", {"linear"}}});
  // Read again over the same base, the written document gives itself back
  // (over another base, maps such as op_level.memory_efficiency merge).
  json again = once;
  again["base"] = "a100-sxm";
  CHECK(sim::hardware_to_json(sim::hardware_from_json(again, "doc.json")) == once);
}

TEST_CASE("validate reports the first field out of range in table order", "[sim][hw][keys]") {
  json doc = {{"op_dispatch_ns", -1}, {"contention_factor", 0.5}};
  CHECK_THROWS_WITH(sim::hardware_from_json(doc, "hw.json"),
                    "hardware 'hw.json': op_dispatch_ns must be >= 0");
  doc["peak_flops_fp32"] = 0;
  CHECK_THROWS_WITH(sim::hardware_from_json(doc, "hw.json"),
                    "hardware 'hw.json': peak_flops_fp32 must be > 0");
  doc = {{"blas_workspaces", -2}, {"nvlink_latency_ns", -1}};
  CHECK_THROWS_WITH(sim::hardware_from_json(doc, "hw.json"),
                    "hardware 'hw.json': blas_workspaces must be >= 0, not -2");
  CHECK_THROWS_WITH(sim::hardware_from_json(json{{"launch_queue_depth", 0}}, "hw.json"),
                    "hardware 'hw.json': launch_queue_depth must be >= 1");
  CHECK_THROWS_WITH(sim::hardware_from_json(json{{"nvlink_bus", 1e9}}, "hw.json"),
                    "hw.json: unknown hardware key 'nvlink_bus'");
  CHECK_THROWS_WITH(sim::hardware_from_json(json{{"base", 7}}, "hw.json"),
                    "hw.json: hardware key 'base' has the wrong type");
}
