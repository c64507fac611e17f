// Hardware presets, strict JSON and the collective closed forms (op costs:
// test_hardware_costs.cpp).
#include <catch2/catch.hpp>

#include <cmath>

#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "tests/plan/toy_graph.h"
#include "tests/sim/sim_fixtures.h"

using namespace shardscope;
using nlohmann::json;

TEST_CASE("every preset validates and round-trips through JSON", "[sim][hw]") {
  for (const std::string& name : sim::hardware_presets()) {
    sim::HardwareModel h = sim::hardware_preset(name);
    h.validate();
    json doc = sim::hardware_to_json(h);
    doc["base"] = name;
    sim::HardwareModel back = sim::hardware_from_json(doc, "x");
    CHECK(sim::hardware_to_json(back) == sim::hardware_to_json(h));
  }
  CHECK(sim::hardware_preset("h100-sxm").peak_flops(plan::DType::bf16) == 989e12);
  CHECK(sim::hardware_preset("h200-sxm").hbm_bytes_per_s == 4.8e12);
  CHECK(sim::hardware_preset("a100-sxm").peak_flops_bf16 == 312e12);
  CHECK(sim::hardware_preset("h100-sxm").ib_bytes_per_s == 50e9);  // 400 Gb/s
  CHECK_THROWS_AS(sim::hardware_preset("tpu-v9"), sim::Error);
}

TEST_CASE("a hardware JSON overrides the fields it names over its base", "[sim][hw]") {
  sim::HardwareModel h = sim::hardware_from_json(
      json{{"base", "a100-sxm"}, {"hbm_bytes_per_s", 1e12}, {"efficiency", {{"linear", 0.9}}}},
      "mine.json");
  CHECK(h.hbm_bytes_per_s == 1e12);
  CHECK(h.peak_flops_bf16 == 312e12);
  CHECK(h.efficiency_of("linear") == 0.9);
  CHECK(h.efficiency_of("attention") == 0.5);
  CHECK(h.efficiency_of("no_such_op") == 0.6);
}

TEST_CASE("an unknown hardware key is an error naming it", "[sim][hw]") {
  try {
    sim::hardware_from_json(json{{"hbm_bandwidth", 1e12}}, "bad.json");
    FAIL("no error");
  } catch (const sim::Error& e) {
    CHECK(std::string(e.what()).find("'hbm_bandwidth'") != std::string::npos);
  }
  CHECK_THROWS_AS(sim::hardware_from_json(json{{"contention_factor", 0.5}}), sim::Error);
  CHECK_THROWS_AS(sim::hardware_from_json(json{{"memory_bytes", "lots"}}), sim::Error);
}

TEST_CASE("integer hardware keys take integral numbers in range, nothing else", "[sim][hw]") {
  // 80e9 is an integral number written as a float: accepted exactly.
  CHECK(sim::hardware_from_json(json{{"memory_bytes", 80e9}}).memory_bytes == 80000000000);
  CHECK(sim::hardware_from_json(json{{"gpus_per_node", 4.0}}).gpus_per_node == 4);
  // A fraction, a value beyond int64 (found by fuzz_hardware_json: it was an
  // undefined float-to-integer conversion) and a huge unsigned are errors
  // naming the key.
  for (const json& bad : {json(1.5), json(8.4e38), json(-1e300), json(18446744073709551615u)}) {
    INFO(bad.dump());
    try {
      sim::hardware_from_json(json{{"memory_bytes", bad}}, "hw.json");
      FAIL("no error");
    } catch (const sim::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("hw.json") && Catch::Contains("'memory_bytes'"));
    }
  }
  CHECK_THROWS_AS(
      sim::hardware_from_json(json{
          {"collectives", {{{"kind", "all_gather"}, {"ranks", 2.5}, {"bus_bytes_per_s", 1e9}}}}}),
      sim::Error);
}

TEST_CASE("ring collective times follow the nccl-tests bus-bandwidth formulas", "[sim][hw]") {
  // One node, B = 1e9 B/s, C = 100 ns, hop 10 ns, S = 8000 B, n = 8:
  //   all-gather / reduce-scatter: 100 + 7 x 10 + 8000 x 7/8 = 7170 ns;
  //   all-reduce: 100 + 14 x 10 + 2 x 7000 = 14240 ns.
  sim::HardwareModel hw = test::unit_hardware();
  hw.collective_latency_ns = 100;
  hw.nvlink_latency_ns = 10;
  const sim::GroupSpan node{8, 1, 8, 8};
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 8000, node) == sim::TimeNs(7170));
  CHECK(sim::collective_time(hw, plan::OpKind::reduce_scatter, 8000, node) == sim::TimeNs(7170));
  CHECK(sim::collective_time(hw, plan::OpKind::all_reduce, 8000, node) == sim::TimeNs(14240));
  CHECK(sim::collective_time(hw, plan::OpKind::all_reduce, 8000, sim::GroupSpan{1, 1, 1, 1}) ==
        sim::TimeNs(0));
}

TEST_CASE("multi-node rings run one ring per NIC, capped by NVLink", "[sim][hw]") {
  // 16 ranks on 2 nodes (8 each): B = min(NVLink 1e9, 8 x IB 0.5e9) = 1e9.
  // 16 ranks on 16 nodes (1 each): B = IB 0.5e9. Hop 1000 ns across nodes, C 0.
  // All-gather of 16000 B: 15 x 1000 + 16000 x 15/16 / B.
  sim::HardwareModel hw = test::unit_hardware();
  hw.ib_latency_ns = 1000;
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 16000, sim::GroupSpan{16, 2, 8, 8}) ==
        sim::TimeNs(15000 + 15000));
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 16000, sim::GroupSpan{16, 16, 1, 1}) ==
        sim::TimeNs(15000 + 30000));
}

TEST_CASE("all-reduce across nodes: tree latency grows with log2 of the nodes", "[sim][hw]") {
  // 64 ranks on 8 nodes of 8, C = 0, NVLink hop 10 ns, IB hop 1000 ns, S = 64000 B,
  // B = min(1e9, 8 x 0.5e9) = 1e9, transfer 2 x 64000 x 63/64 = 126000 ns.
  //   ring: 2 x 63 x 1000 = 126000 ns of latency -> 252000 ns
  //   tree: 2 x (7 x 10 + 3 x 1000) = 6140 ns of latency -> 132140 ns
  // auto takes the tree; a single node always uses the ring.
  sim::HardwareModel hw = test::unit_hardware();
  hw.nvlink_latency_ns = 10;
  hw.ib_latency_ns = 1000;
  const sim::GroupSpan span{64, 8, 8, 8};
  hw.all_reduce_algorithm = sim::CollectiveAlgorithm::ring;
  CHECK(sim::collective_time(hw, plan::OpKind::all_reduce, 64000, span) == sim::TimeNs(252000));
  hw.all_reduce_algorithm = sim::CollectiveAlgorithm::tree;
  CHECK(sim::collective_time(hw, plan::OpKind::all_reduce, 64000, span) == sim::TimeNs(132140));
  hw.all_reduce_algorithm = sim::CollectiveAlgorithm::automatic;
  CHECK(sim::collective_time(hw, plan::OpKind::all_reduce, 64000, span) == sim::TimeNs(132140));
  // All-gather is a ring whatever the setting.
  hw.all_reduce_algorithm = sim::CollectiveAlgorithm::tree;
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 64000, span) ==
        sim::TimeNs(63 * 1000 + 63000));
  // One node: tree does not apply. 8 ranks, 2 x 7 x 10 + 2 x 8000 x 7/8.
  CHECK(sim::collective_time(hw, plan::OpKind::all_reduce, 8000, sim::GroupSpan{8, 1, 8, 8}) ==
        sim::TimeNs(140 + 14000));
}

TEST_CASE("a collective fit replaces the analytical model where it matches", "[sim][hw]") {
  // all_gather over 8 ranks on one node fitted at 2000 ns + busbw 2e9:
  // 2000 + 8000 x 7/8 / 2 = 5500 ns. 16 ranks, or multi-node, do not match.
  sim::HardwareModel hw = test::unit_hardware();
  hw.collectives.push_back({plan::OpKind::all_gather, 8, false, 2000, 2e9});
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 8000, sim::GroupSpan{8, 1, 8, 8}) ==
        sim::TimeNs(5500));
  CHECK(sim::collective_time(hw, plan::OpKind::reduce_scatter, 8000, sim::GroupSpan{8, 1, 8, 8}) ==
        sim::TimeNs(7000));
  CHECK(sim::collective_time(hw, plan::OpKind::all_gather, 8000, sim::GroupSpan{8, 2, 4, 4}) ==
        sim::TimeNs(7000));
  // Round trip through JSON, and strict keys inside the list.
  const sim::HardwareModel back = sim::hardware_from_json(sim::hardware_to_json(hw));
  REQUIRE(back.collectives.size() == 1);
  CHECK(back.collectives[0].latency_ns == 2000);
  CHECK(back.collectives[0].bus_bytes_per_s == 2e9);
  try {
    sim::hardware_from_json(
        json{{"collectives", {{{"kind", "all_gather"}, {"ranks", 8}, {"busbw", 1e9}}}}}, "f.json");
    FAIL("no error");
  } catch (const sim::Error& e) {
    CHECK(std::string(e.what()).find("'collectives[0].busbw'") != std::string::npos);
  }
  CHECK_THROWS_AS(
      sim::hardware_from_json(
          json{{"collectives", {{{"kind", "broadcast"}, {"ranks", 8}, {"bus_bytes_per_s", 1e9}}}}}),
      sim::Error);
  CHECK_THROWS_AS(sim::hardware_from_json(json{{"all_reduce_algorithm", "nvls"}}), sim::Error);
}

TEST_CASE("group_span counts nodes and ranks per node", "[sim][hw]") {
  CHECK(sim::group_span({0, 1, 2, 3, 4, 5, 6, 7}, 8) == sim::GroupSpan{8, 1, 8, 8});
  CHECK(sim::group_span({6, 7, 8, 9, 10, 11}, 8) == sim::GroupSpan{6, 2, 2, 4});
  CHECK(sim::group_span({3, 11, 19}, 8) == sim::GroupSpan{3, 3, 1, 1});
}

TEST_CASE("durations round to the nearest nanosecond", "[sim][time]") {
  CHECK(sim::TimeNs::from_seconds(1.4e-9) == sim::TimeNs(1));
  CHECK(sim::TimeNs::from_seconds(1.6e-9) == sim::TimeNs(2));
  CHECK(sim::TimeNs::from_seconds(-1.0) == sim::TimeNs(0));
  CHECK(sim::TimeNs(3) + sim::TimeNs(4) == sim::TimeNs(7));
}
