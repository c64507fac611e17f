// The policy grid of tests/sim/policy_grid.h planned and simulated on
// gpt2-small and llama3-8b, once per binary and hardware model, for the
// property tests (test_properties.cpp, test_properties_closed_forms.cpp; what
// they assert and why every run has a 1 PiB memory limit: test_properties.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "alloc/policy.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "sim/simulator.h"
#include "tests/plan/planned.h"
#include "tests/sim/policy_grid.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

#include <catch2/catch.hpp>

namespace property_test {

using namespace shardscope;
using nlohmann::json;

constexpr int64_t kHugeMemory = int64_t{1} << 50;  // 1 PiB: the allocator never runs out
constexpr int64_t kMiB = int64_t{1} << 20;

inline const std::vector<test::GridModel>& grid_models() {
  // gpt2-small: GPT2Block holds 7.1M parameters, its MLP 4.7M, attention 2.4M;
  // 3M wraps each MLP (13 units, the root keeps embeddings and attention),
  // unlike the class policy. llama3-8b: PyTorch's default 1e8 wraps each
  // decoder layer's MLP (176M), the embedding and lm_head (525M each) and the
  // model's remainder. Contexts are 3-wise covering on gpt2-small, 2-wise on
  // llama3-8b (four times slower to plan and simulate).
  static const std::vector<test::GridModel> models = {
      {"gpt2-small", "GPT2Block", 3000000, 4, 1024, 3},
      {"llama3-8b", "LlamaDecoderLayer", 100000000, 1, 2048, 2}};
  return models;
}

inline sim::HardwareModel h100() {
  return sim::hardware_preset("h100-sxm");
}

// PyTorch eager: 20 us of host time per launch, and NCCL slowing compute more.
inline sim::HardwareModel h100_eager() {
  sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  hw.name = "h100-sxm-eager";
  hw.launch_overhead_ns = 20000;
  hw.contention_factor = 1.3;
  return hw;
}

inline sim::HardwareModel doubled_links(sim::HardwareModel hw) {
  hw.name += "-2x-links";
  hw.nvlink_bus_bytes_per_s *= 2;
  hw.ib_bytes_per_s *= 2;
  for (sim::CollectiveFit& fit : hw.collectives) fit.bus_bytes_per_s *= 2;
  return hw;
}

using test::Planned;

inline Planned plan_for(const plan::Graph& graph, const json& doc, int64_t world) {
  return test::plan_model(graph, doc, world);
}

inline sim::SimOptions fast_options() {
  sim::SimOptions o;
  o.memory_limit_bytes = kHugeMemory;
  o.record_trace = false;
  return o;
}

// h100-sxm whose host may run at most 2 launches ahead of the device.
inline sim::HardwareModel shallow_queue(sim::HardwareModel hw) {
  hw.name += "-queue-2";
  hw.launch_queue_depth = 2;
  return hw;
}

// The hardware models every configuration is simulated on.
enum Hw { kH100, kH100Fast, kEager, kEagerFast, kShallowQueue, kHwCount };

struct Outcome {
  json policy;
  int64_t world = 0;
  bool fits[kHwCount] = {};
  sim::TimeNs step[kHwCount];
  int64_t allocated_on[kHwCount] = {};  // peak allocated per hardware model
  int64_t reserved_on[kHwCount] = {};   // peak reserved per hardware model
  int64_t peak_allocated = 0;           // on h100-sxm
  // Host-order replay of the schedule's allocs and frees (docs/schedule.md
  // rule 4) at the allocator's rounded request sizes: the peak of what the
  // schedule asks for, independent of which cached block serves a request;
  // and that plus 1 MiB per live large-pool request (the most an unsplit
  // block can carry), an upper bound of the allocator's peak.
  int64_t requested_peak = 0;
  int64_t requested_upper = 0;
  int64_t peak_reserved = 0;
  int64_t persistent_bytes = 0;
  int64_t largest_all_gather_bytes = 0;  // the largest unit's all-gather output, param dtype
  std::map<std::string, int64_t> peak_by_category;
  // From the plan.
  int64_t units = 0;
  int64_t shard_numel = 0;  // Psi/N with padding: per-rank elements of every unit
  int64_t persistent_device_bytes = 0;
  int64_t persistent_host_bytes = 0;
  int64_t persistent_buffers = 0;     // on the device
  int64_t persistent_rounded = 0;     // their sizes rounded up to 512 B
  int64_t persistent_large_pool = 0;  // how many are large-pool requests (> 1 MiB)
};

inline std::string key_of(const json& policy, int64_t world) {
  return policy.dump() + " @ world " + std::to_string(world);
}

struct ModelRuns {
  test::GridModel model;
  plan::Graph graph;
  std::vector<Outcome> outcomes;
  std::map<std::string, size_t> index;

  const Outcome* find(const json& policy, int64_t world) const {
    auto it = index.find(key_of(policy, world));
    return it == index.end() ? nullptr : &outcomes[it->second];
  }
};

inline Outcome run_point(const plan::Graph& graph, const test::GridPoint& point) {
  Outcome o;
  o.policy = point.policy;
  o.world = point.world;
  const Planned p = plan_for(graph, point.policy, point.world);
  o.units = static_cast<int64_t>(p.units.units.size());
  o.shard_numel = p.units.total_shard_numel();
  for (const plan::Unit& u : p.units.units)
    o.largest_all_gather_bytes =
        std::max(o.largest_all_gather_bytes,
                 u.padded_numel * plan::dtype_bytes(p.policy.mixed_precision.param_dtype));
  o.persistent_device_bytes = p.schedule.persistent_device_bytes();
  o.persistent_host_bytes = p.schedule.persistent_host_bytes();
  for (const plan::Buffer& b : p.schedule.buffers) {
    if (!b.persistent || b.on_host) continue;
    ++o.persistent_buffers;
    const uint64_t rounded = alloc::round_size(static_cast<uint64_t>(b.bytes));
    o.persistent_rounded += static_cast<int64_t>(rounded);
    if (!alloc::is_small_size(rounded)) ++o.persistent_large_pool;
  }
  int64_t requested = 0, large = 0;
  auto account = [&](const plan::Buffer& b, int64_t sign) {
    if (b.on_host) return;
    const auto rounded = static_cast<int64_t>(alloc::round_size(static_cast<uint64_t>(b.bytes)));
    requested += sign * rounded;
    if (!alloc::is_small_size(static_cast<uint64_t>(rounded))) large += sign;
    o.requested_peak = std::max(o.requested_peak, requested);
    o.requested_upper = std::max(o.requested_upper, requested + large * kMiB);
  };
  for (const plan::Buffer& b : p.schedule.buffers)
    if (b.persistent) account(b, 1);
  for (const plan::Action& a : p.schedule.actions) {
    if (a.kind == plan::ActionKind::alloc)
      account(p.schedule.buffers[static_cast<size_t>(a.buffer)], 1);
    if (a.kind == plan::ActionKind::free)
      account(p.schedule.buffers[static_cast<size_t>(a.buffer)], -1);
  }
  const sim::HardwareModel hws[kHwCount] = {h100(), doubled_links(h100()), h100_eager(),
                                            doubled_links(h100_eager()), shallow_queue(h100())};
  const sim::SimOptions options = fast_options();
  for (int h = 0; h < kHwCount; ++h) {
    sim::SimResult r = sim::simulate(graph, p.units, p.schedule, hws[h], options);
    o.fits[h] = r.fits;
    o.step[h] = r.step_time;
    o.allocated_on[h] = r.peak_allocated_bytes;
    o.reserved_on[h] = r.peak_reserved_bytes;
    if (h != kH100) continue;
    o.peak_allocated = r.peak_allocated_bytes;
    o.peak_reserved = r.peak_reserved_bytes;
    o.persistent_bytes = r.persistent_bytes;
    o.peak_by_category = r.peak.by_category;
  }
  return o;
}

// Plans and simulates the whole grid of `name` once per test binary run.
inline const ModelRuns& model_runs(const std::string& name) {
  static std::map<std::string, ModelRuns> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  ModelRuns runs;
  for (const test::GridModel& m : grid_models())
    if (m.name == name) runs.model = m;
  runs.graph = plan::load_model(name);
  for (const test::GridPoint& point : test::property_policy_grid(runs.model)) {
    runs.index[key_of(point.policy, point.world)] = runs.outcomes.size();
    runs.outcomes.push_back(run_point(runs.graph, point));
  }
  return cache.emplace(name, std::move(runs)).first->second;
}

inline bool is_fsdp1(const Outcome& o) {
  return o.policy.at("flavor") == "fsdp1";
}

// A configuration's counterpart differing in one knob; must be in the grid.
inline const Outcome& counterpart(const ModelRuns& runs, const Outcome& o, const std::string& knob,
                                  const json& value) {
  json policy = o.policy;
  policy[knob] = value;
  const Outcome* other = runs.find(policy, o.world);
  INFO("counterpart " << key_of(policy, o.world));
  REQUIRE(other != nullptr);
  return *other;
}

inline std::string describe(const Outcome& o) {
  return key_of(o.policy, o.world) + ": peak requested " + std::to_string(o.requested_peak) +
         ", allocated " + std::to_string(o.peak_allocated) + ", reserved " +
         std::to_string(o.peak_reserved);
}

// Pairs (lower, higher) whose peak allocated must satisfy lower <= higher.
struct MemoryPair {
  const Outcome* lower;
  const Outcome* higher;
  int64_t slack = 0;  // bytes by which `higher` may fall short of `lower` (stated per pair)
};

inline void check_memory_pairs(const std::vector<MemoryPair>& pairs) {
  for (const MemoryPair& p : pairs) {
    INFO("expected not above: " << describe(*p.lower));
    INFO("expected not below: " << describe(*p.higher));
    REQUIRE(p.lower->fits[kH100]);
    REQUIRE(p.higher->fits[kH100]);
    // The property, exactly, on the bytes the schedule requests.
    CHECK(p.lower->requested_peak <= p.higher->requested_peak + p.slack);
    // On peak_allocated_bytes it holds only up to the lower run's caching
    // slack: allocated counts allocator blocks, and a large-pool block reused
    // from the cache is not split when less than 1 MiB would remain, so a
    // request can be charged up to 1 MiB more than its rounded size depending
    // on the run's allocation history (PyTorch's allocated_bytes counts block
    // sizes the same way). E.g. fsdp2 reshard_after_forward true vs false on
    // gpt2-small with wrap size 3e6 and full checkpointing: equal requested
    // peaks, allocated 1 MiB higher for true. So: allocated(higher) >=
    // requested(lower), i.e. allocated(lower) - its slack <= allocated(higher).
    CHECK(p.lower->requested_peak <= p.higher->peak_allocated + p.slack);
  }
}

inline std::vector<MemoryPair> reshard_pairs(const ModelRuns& runs) {
  // false keeps every unit's parameters from forward to backward; true frees
  // them after forward. fsdp2's integer k keeps a 1/k slice and sits between.
  std::vector<MemoryPair> pairs;
  for (const Outcome& o : runs.outcomes) {
    if (o.policy.at("reshard_after_forward") != true) continue;
    pairs.push_back({&o, &counterpart(runs, o, "reshard_after_forward", false)});
  }
  return pairs;
}

inline std::vector<MemoryPair> reshard_k_pairs(const ModelRuns& runs) {
  // fsdp2 k (1 < k < N): true <= k <= false.
  std::vector<MemoryPair> pairs;
  for (const Outcome& o : runs.outcomes) {
    if (is_fsdp1(o) || !o.policy.at("reshard_after_forward").is_number_integer()) continue;
    pairs.push_back({&counterpart(runs, o, "reshard_after_forward", true), &o});
    // k <= false up to one all-gather output: a k run gathers each unit
    // again in backward, and while the copy-out runs the all-gather output
    // and the unsharded parameters both exist; a false run never gathers in
    // backward. With fsdp2's per-parameter gradients arriving late this
    // moment can set the peak (size-wrapped llama3-8b under checkpointing:
    // k = 2 above false by 58 MB, against 1 GB for the largest unit's
    // output).
    pairs.push_back(
        {&o, &counterpart(runs, o, "reshard_after_forward", false), o.largest_all_gather_bytes});
  }
  return pairs;
}

inline std::vector<MemoryPair> limit_pairs(const ModelRuns& runs) {
  std::vector<MemoryPair> pairs;
  for (const Outcome& o : runs.outcomes) {
    if (!is_fsdp1(o) || o.policy.at("limit_all_gathers") != true) continue;
    pairs.push_back({&o, &counterpart(runs, o, "limit_all_gathers", false)});
  }
  return pairs;
}

inline std::vector<MemoryPair> forward_prefetch_pairs(const ModelRuns& runs) {
  // fsdp1: false -> true; fsdp2: 0 (implicit run-ahead) -> 1 -> 2 units ahead.
  std::vector<MemoryPair> pairs;
  for (const Outcome& o : runs.outcomes) {
    const json& f = o.policy.at("forward_prefetch");
    if (is_fsdp1(o)) {
      if (f == false) pairs.push_back({&o, &counterpart(runs, o, "forward_prefetch", true)});
    } else if (f.get<int64_t>() < 2) {
      pairs.push_back({&o, &counterpart(runs, o, "forward_prefetch", f.get<int64_t>() + 1)});
    }
  }
  return pairs;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace property_test
