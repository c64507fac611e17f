// simulate --memory-snapshot's content (sim/memory_history.h): the simulated
// allocator's history as PyTorch's snapshot, read back by our pickle reader
// with the keys memory_viz reads, its segments equal to the allocator's end
// state, and imported back with the simulator's own peaks.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "plan/models.h"
#include "plan/schedule.h"
#include "sim/hardware.h"
#include "sim/memory_history.h"
#include "sim/simulator.h"
#include "traces/memory_snapshot.h"
#include "traces/metrics.h"
#include "traces/pickle_read.h"

using namespace shardscope;

namespace {

std::set<std::string> keys(const traces::pickle::Document& d,
                           const traces::pickle::Document::Node& dict) {
  std::set<std::string> out;
  for (size_t i = 0; i < dict.items.size(); i += 2) out.insert(d.node(dict.items[i]).text);
  return out;
}

}  // namespace

TEST_CASE("simulate's memory snapshot: memory_viz's keys, the allocator's end state and peaks") {
  const plan::Graph graph = plan::load_model("gpt2-tiny");
  const nlohmann::json doc = {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}},
                              {"batch_size", 2},
                              {"seq_len", 128}};
  const plan::Policy policy = plan::policy_from_json(doc);
  const plan::World world = plan::validate_policy(policy, graph, 2);
  const plan::UnitPlan units = plan::build_units(graph, policy, world);
  const plan::Schedule sched = plan::build_schedule(graph, policy, units, 0);
  sim::AllocatorHistory history;
  sim::SimOptions options;
  options.allocator_history = &history;
  const sim::SimResult r =
      sim::simulate(graph, units, sched, sim::hardware_preset("h200-sxm"), options);
  REQUIRE(r.fits);
  REQUIRE(history.events.size() == history.buffers.size());
  REQUIRE(!history.events.empty());

  const traces::MemorySnapshot snap = sim::memory_snapshot(history, graph, units, sched);
  const std::string bytes = traces::memory_snapshot_pickle(snap);
  const traces::pickle::Document d = traces::pickle::read_pickle(bytes, "sim.pickle");
  const auto& root = d.node(d.root());
  CHECK(keys(d, root) == std::set<std::string>{"segments", "device_traces"});
  const auto& segments = *d.find(root, "segments");
  REQUIRE(!segments.items.empty());
  const std::set<std::string> segment_keys = {
      "device", "address",      "total_size",    "allocated_size", "active_size", "requested_size",
      "stream", "segment_type", "is_expandable", "frames",         "blocks"};
  const std::set<std::string> block_keys = {"address", "size", "requested_size", "state", "frames"};
  const std::set<std::string> entry_keys = {"action", "addr",    "size",
                                            "stream", "time_us", "frames"};
  int64_t reserved = 0, allocated = 0;
  for (uint32_t id : segments.items) {
    const auto& seg = d.node(id);
    CHECK(keys(d, seg) == segment_keys);
    reserved += d.find(seg, "total_size")->integer;
    allocated += d.find(seg, "allocated_size")->integer;
    int64_t tiled = 0;
    for (uint32_t b : d.find(seg, "blocks")->items) {
      CHECK(keys(d, d.node(b)) == block_keys);
      tiled += d.find(d.node(b), "size")->integer;
    }
    CHECK(tiled == d.find(seg, "total_size")->integer);
  }
  // The segments are the allocator's state after the step.
  CHECK(reserved == static_cast<int64_t>(history.events.back().counters.reserved.current));
  CHECK(allocated == static_cast<int64_t>(history.events.back().counters.allocated.current));

  const auto& traces_list = *d.find(root, "device_traces");
  REQUIRE(traces_list.items.size() == 1);
  const auto& entries = d.node(traces_list.items[0]);
  REQUIRE(entries.items.size() == history.events.size());
  std::map<std::string, int> actions;
  for (uint32_t id : entries.items) {
    const auto& e = d.node(id);
    CHECK(keys(d, e) == entry_keys);
    ++actions[d.find(e, "action")->text];
    const auto& frames = *d.find(e, "frames");
    if (d.find(e, "action")->text == "alloc") {
      REQUIRE(frames.items.size() == 1);
      const auto& f = d.node(frames.items[0]);
      CHECK(keys(d, f) == std::set<std::string>{"filename", "line", "name"});
      CHECK(d.find(f, "filename")->text.rfind("shardscope ", 0) == 0);
    }
  }
  CHECK(actions["alloc"] > 0);
  CHECK(actions["free_requested"] == actions["free_completed"]);
  CHECK(actions["segment_alloc"] == static_cast<int>(segments.items.size()));
  CHECK(actions.count("segment_free") == 0);  // nothing released: the step fits

  // Imported back: the simulator's peaks, to the byte.
  traces::Trace t;
  traces::SnapshotImportSummary sum;
  traces::add_memory_snapshot_rank(t, traces::memory_snapshot_from_pickle(d, "sim.pickle"), 0,
                                   "sim.pickle", &sum);
  CHECK(sum.initial_allocated == 0);
  CHECK(sum.initial_reserved == 0);
  const traces::Metrics m = traces::compute_metrics(t);
  CHECK(m.total.peak_reserved_bytes == r.peak_reserved_bytes);
  // The snapshot holds every allocation, the two cuBLAS workspaces (2 x 32 MiB
  // on h200-sxm, placed by the warm-up) too: torch.cuda's max_memory_allocated.
  REQUIRE(r.blas_workspace_bytes == 2 * (int64_t{32} << 20));
  CHECK(m.total.peak_allocated_bytes == r.peak_allocated_bytes + r.blas_workspace_bytes);
}

TEST_CASE(
    "simulate's memory snapshot with expandable segments: map/unmap events, one "
    "segment per mapped range, tiled by its blocks") {
  // gpt2-tiny on 2 ranks: its stream's small-pool segment grows by several
  // 2 MiB pages. CUDACachingAllocator records them as segment_map and
  // snapshot() reports one segment per contiguous mapped range
  // (is_expandable); a segment per page would leave blocks crossing its end,
  // which memory_viz's segment view cannot draw.
  const plan::Graph graph = plan::load_model("gpt2-tiny");
  const nlohmann::json doc = {{"allocator", {{"expandable_segments", true}}}};
  const plan::Policy policy = plan::policy_from_json(doc);
  const plan::World world = plan::validate_policy(policy, graph, 2);
  const plan::UnitPlan units = plan::build_units(graph, policy, world);
  const plan::Schedule sched = plan::build_schedule(graph, policy, units, 0);
  REQUIRE(sched.expandable_segments);
  sim::AllocatorHistory history;
  sim::SimOptions options;
  options.allocator_history = &history;
  REQUIRE(sim::simulate(graph, units, sched, sim::hardware_preset("h200-sxm"), options).fits);
  CHECK(history.expandable_segments);

  const traces::MemorySnapshot snap = sim::memory_snapshot(history, graph, units, sched);
  int maps = 0;
  for (const traces::SnapshotEvent& e : snap.device_traces.at(0)) {
    CHECK(e.action != "segment_alloc");
    CHECK(e.action != "segment_free");
    if (e.action == "segment_map") ++maps;
  }
  // More pages mapped than segments: some segment grew.
  CHECK(maps > static_cast<int>(snap.segments.size()));
  uint64_t reserved = 0;
  for (const traces::SnapshotSegment& s : snap.segments) {
    INFO("segment at " << s.address << ", " << s.total_size << " B");
    CHECK(s.is_expandable);
    // Whole pages: 2 MiB (small pool) or 20 MiB (large).
    CHECK(s.total_size % (s.segment_type == "small" ? (2u << 20) : (20u << 20)) == 0);
    uint64_t at = s.address;
    for (const traces::SnapshotBlock& b : s.blocks) {
      CHECK(b.address == at);
      at += b.size;
    }
    CHECK(at == s.address + s.total_size);
    reserved += s.total_size;
  }
  // The segments hold what the allocator has reserved at the end.
  CHECK(reserved == history.events.back().counters.reserved.current);
}
