// The simulator's properties over the policy grid of tests/sim/policy_grid.h
// on gpt2-small and llama3-8b (issue #4):
//   - reshard_after_forward=false never lowers peak memory;
//   - limit_all_gathers never raises fsdp1 peak memory;
//   - more forward prefetch never lowers peak memory;
//   - doubling link bandwidth never slows a step (h100-sxm, and h100-sxm with
//     PyTorch eager launch overhead and a higher contention factor);
//   - two runs give byte-identical traces and metrics;
//   - persistent bytes are 12 Psi/N with AdamW and zero_grad(set_to_none=True)
//     (FSDP_SEMANTICS.md section 9: 16 Psi/N less the gradients),
//     and DDP (shard_group_size = 1) matches the all-reduce closed form.
//
// Memory: every run uses a memory limit of 1 PiB, so the allocator never runs
// out (no synchronize-and-retry, every run fits) and the memory properties
// compare complete steps. The memory properties compare peak_allocated_bytes
// (PyTorch's max_memory_allocated); peak_reserved_bytes is not monotone in
// these knobs (caching effects) and is not asserted.
//
// Each grid configuration is planned once and simulated once per hardware
// model (record_trace = false: the metrics are still computed); the results
// are cached for every test case of this file.
#include <catch2/catch.hpp>

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

using namespace shardscope;
using nlohmann::json;

namespace {

constexpr int64_t kHugeMemory = int64_t{1} << 50;  // 1 PiB: the allocator never runs out
constexpr int64_t kMiB = int64_t{1} << 20;

const std::vector<test::GridModel>& grid_models() {
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

sim::HardwareModel h100() {
  return sim::hardware_preset("h100-sxm");
}

// PyTorch eager: 20 us of host time per launch, and NCCL slowing compute more.
sim::HardwareModel h100_eager() {
  sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  hw.name = "h100-sxm-eager";
  hw.launch_overhead_ns = 20000;
  hw.contention_factor = 1.3;
  return hw;
}

sim::HardwareModel doubled_links(sim::HardwareModel hw) {
  hw.name += "-2x-links";
  hw.nvlink_bus_bytes_per_s *= 2;
  hw.ib_bytes_per_s *= 2;
  for (sim::CollectiveFit& fit : hw.collectives) fit.bus_bytes_per_s *= 2;
  return hw;
}

using test::Planned;

Planned plan_for(const plan::Graph& graph, const json& doc, int64_t world) {
  return test::plan_model(graph, doc, world);
}

sim::SimOptions fast_options() {
  sim::SimOptions o;
  o.memory_limit_bytes = kHugeMemory;
  o.record_trace = false;
  return o;
}

// h100-sxm whose host may run at most 2 launches ahead of the device.
sim::HardwareModel shallow_queue(sim::HardwareModel hw) {
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

std::string key_of(const json& policy, int64_t world) {
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

Outcome run_point(const plan::Graph& graph, const test::GridPoint& point) {
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
const ModelRuns& model_runs(const std::string& name) {
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

bool is_fsdp1(const Outcome& o) {
  return o.policy.at("flavor") == "fsdp1";
}

// A configuration's counterpart differing in one knob; must be in the grid.
const Outcome& counterpart(const ModelRuns& runs, const Outcome& o, const std::string& knob,
                           const json& value) {
  json policy = o.policy;
  policy[knob] = value;
  const Outcome* other = runs.find(policy, o.world);
  INFO("counterpart " << key_of(policy, o.world));
  REQUIRE(other != nullptr);
  return *other;
}

std::string describe(const Outcome& o) {
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

void check_memory_pairs(const std::vector<MemoryPair>& pairs) {
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

std::vector<MemoryPair> reshard_pairs(const ModelRuns& runs) {
  // false keeps every unit's parameters from forward to backward; true frees
  // them after forward. fsdp2's integer k keeps a 1/k slice and sits between.
  std::vector<MemoryPair> pairs;
  for (const Outcome& o : runs.outcomes) {
    if (o.policy.at("reshard_after_forward") != true) continue;
    pairs.push_back({&o, &counterpart(runs, o, "reshard_after_forward", false)});
  }
  return pairs;
}

std::vector<MemoryPair> reshard_k_pairs(const ModelRuns& runs) {
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

std::vector<MemoryPair> limit_pairs(const ModelRuns& runs) {
  std::vector<MemoryPair> pairs;
  for (const Outcome& o : runs.outcomes) {
    if (!is_fsdp1(o) || o.policy.at("limit_all_gathers") != true) continue;
    pairs.push_back({&o, &counterpart(runs, o, "limit_all_gathers", false)});
  }
  return pairs;
}

std::vector<MemoryPair> forward_prefetch_pairs(const ModelRuns& runs) {
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

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("the property grid covers every knob on gpt2-small and llama3-8b", "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    INFO(m.name);
    std::map<std::string, std::set<std::string>> seen;
    for (const Outcome& o : runs.outcomes) {
      for (const auto& [k, v] : o.policy.items())
        seen[o.policy.at("flavor").get<std::string>() + "." + k].insert(v.dump());
      seen["world"].insert(std::to_string(o.world) + "/" + o.policy.at("shard_group_size").dump());
      CHECK(o.units >= 1);
    }
    for (const char* f : {"fsdp1", "fsdp2"}) {
      const std::string p = std::string(f) + ".";
      CHECK(seen[p + "wrap"].size() == 3);
      CHECK(seen[p + "activation_checkpointing"].size() == 2);
      CHECK(seen[p + "mixed_precision"].size() == 2);
      CHECK(seen[p + "cpu_offload"].size() == 2);
      CHECK(seen[p + "shard_group_size"].size() == 2);
    }
    CHECK(seen["fsdp1.reshard_after_forward"].size() == 2);
    CHECK(seen["fsdp2.reshard_after_forward"].size() == 4);  // true, false, 2, 8
    CHECK(seen["fsdp1.backward_prefetch"].size() == 3);
    CHECK(seen["fsdp2.backward_prefetch"].size() == 2);
    CHECK(seen["fsdp1.forward_prefetch"].size() == 2);
    CHECK(seen["fsdp2.forward_prefetch"].size() == 3);
    CHECK(seen["fsdp1.limit_all_gathers"].size() == 2);
    CHECK(seen.count("fsdp2.limit_all_gathers") == 0);
    CHECK(seen["world"].size() == 3);
  }
}

TEST_CASE("reshard_after_forward=false never lowers peak memory", "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    const std::vector<MemoryPair> pairs = reshard_pairs(runs);
    CHECK(!pairs.empty());
    check_memory_pairs(pairs);
  }
}

TEST_CASE("fsdp2 integer reshard_after_forward sits between true and false in peak memory",
          "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const std::vector<MemoryPair> pairs = reshard_k_pairs(model_runs(m.name));
    CHECK(!pairs.empty());
    check_memory_pairs(pairs);
  }
}

TEST_CASE("limit_all_gathers never raises fsdp1 peak memory", "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    const std::vector<MemoryPair> pairs = limit_pairs(runs);
    CHECK(!pairs.empty());
    check_memory_pairs(pairs);
  }
}

TEST_CASE("more forward prefetch never lowers peak memory", "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    const std::vector<MemoryPair> pairs = forward_prefetch_pairs(runs);
    CHECK(!pairs.empty());
    check_memory_pairs(pairs);
  }
}

TEST_CASE("doubling link bandwidth never slows a step on the policy grid", "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    for (const Outcome& o : runs.outcomes) {
      INFO(m.name << " " << key_of(o.policy, o.world));
      CAPTURE(o.step[kH100].ns, o.step[kH100Fast].ns, o.step[kEager].ns, o.step[kEagerFast].ns);
      for (int h = 0; h < kHwCount; ++h) REQUIRE(o.fits[h]);
      CHECK(o.step[kH100].ns > 0);
      CHECK(o.step[kH100Fast] <= o.step[kH100]);
      CHECK(o.step[kEagerFast] <= o.step[kEager]);
    }
  }
}

TEST_CASE("fsdp2 peak memory is the same on every hardware model", "[sim][properties]") {
  // FSDP2 frees without record_stream and never blocks the host for memory
  // (FSDP_SEMANTICS.md section 10): blocks are reused in host order, so
  // bandwidth, launch overhead, contention and launch-queue depth, which move
  // only times, move neither peak.
  for (const test::GridModel& m : grid_models()) {
    int checked = 0;
    for (const Outcome& o : model_runs(m.name).outcomes) {
      if (is_fsdp1(o)) continue;
      INFO(m.name << " " << describe(o));
      for (int h = 0; h < kHwCount; ++h) {
        CAPTURE(h);
        CHECK(o.allocated_on[h] == o.allocated_on[kH100]);
        CHECK(o.reserved_on[h] == o.reserved_on[kH100]);
      }
      ++checked;
    }
    CHECK(checked > 10);
  }
}

TEST_CASE("fsdp2 reserved memory stays within the caching bound of allocated on llama3-8b",
          "[sim][properties]") {
  // Without delayed reuse, reserved exceeds allocated only by what the
  // caching allocator cannot hand from one request to another: each
  // stream's pool keeps its own segments (compute, ag_copy_in,
  // reduce_scatter), a large-pool request under 10 MiB takes a 20 MiB
  // segment, larger ones are rounded to 2 MiB, and a block freed in one size
  // serves a later request of another only where it fits (the rest is split
  // off or, under 1 MiB, wasted). Units of one shape (class wrapping of
  // identical decoder layers) reuse blocks exactly; unequal units (size
  // wrapping: 525M-parameter embedding and lm_head units next to 176M MLPs),
  // fp32 logits of 1 GiB and recomputed activations fragment, and gradient
  // shards allocated mid-backward on the reduce-scatter stream
  // (zero_grad_set_to_none) cannot reuse the compute pool's freed
  // activation blocks, the loss's fp32 temporaries (1 GiB each for
  // B x T x V = 2048 x 128256) leave holes other requests only partly fill,
  // and fsdp2's per-parameter unsharded gradients come in many sizes.
  // Measured over this grid (issue 15): at most 1.90 x allocated (fp32,
  // cpu_offload, class wrapping), 1.40 x for bf16 class-wrapped on the
  // device, the configuration of published Llama runs (1.18 x before the
  // loss temporaries, per-parameter gradients and transient gradient
  // shards). The bounds sit just
  // above; under
  // record_stream semantics (delayed reuse, the defect this guards) the
  // ratio reached 4.5 (51.9 GiB reserved for 11.7 GiB allocated).
  const ModelRuns& runs = model_runs("llama3-8b");
  int checked = 0, bf16_class = 0;
  for (const Outcome& o : runs.outcomes) {
    if (is_fsdp1(o)) continue;
    INFO(describe(o));
    const double ratio =
        static_cast<double>(o.peak_reserved) / static_cast<double>(o.peak_allocated);
    CHECK(ratio >= 1.0);
    CHECK(ratio <= 2.0);
    if (o.policy.at("mixed_precision").at("param_dtype") == "bf16" &&
        o.policy.at("wrap").at("type") == "class" && o.policy.at("cpu_offload") == false) {
      CHECK(ratio <= 1.45);
      ++bf16_class;
    }
    ++checked;
  }
  CHECK(checked > 50);
  CHECK(bf16_class > 5);
}

TEST_CASE("fsdp2 peak memory is the same for every memory limit above its peak",
          "[sim][properties]") {
  // The allocator only frees cached segments and retries when a request
  // does not fit; above the unconstrained reserved peak no request fails,
  // so the limit changes nothing.
  const ModelRuns& runs = model_runs("llama3-8b");
  int checked = 0;
  for (const Outcome& o : runs.outcomes) {
    if (is_fsdp1(o) || checked >= 6) continue;
    INFO(describe(o));
    const Planned p = plan_for(runs.graph, o.policy, o.world);
    for (const int64_t limit :
         {o.peak_reserved, o.peak_reserved + o.peak_reserved / 2, 4 * o.peak_reserved}) {
      CAPTURE(limit);
      sim::SimOptions options = fast_options();
      options.memory_limit_bytes = limit;
      const sim::SimResult r = sim::simulate(runs.graph, p.units, p.schedule, h100(), options);
      CHECK(r.fits);
      CHECK(r.peak_allocated_bytes == o.peak_allocated);
      CHECK(r.peak_reserved_bytes == o.peak_reserved);
    }
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("persistent bytes are 12 Psi/N with AdamW on gpt2-small and llama3-8b",
          "[sim][properties]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    for (const Outcome& o : runs.outcomes) {
      INFO(m.name << " " << describe(o));
      CAPTURE(o.persistent_bytes, o.shard_numel, o.peak_by_category);
      const bool offload = o.policy.at("cpu_offload") == true;
      auto category = [&](const char* name) {
        auto it = o.peak_by_category.find(name);
        return it == o.peak_by_category.end() ? int64_t{0} : it->second;
      };
      // zero_grad(set_to_none=True), the grid's default: gradients are
      // allocated by the step's reductions, so they are not persistent on
      // the device (on the host with offload they are).
      const int64_t persistent_blocks = category("parameters") + category("optimizer_state");
      CHECK(o.peak_allocated >= o.persistent_bytes);
      // Blocks are never smaller than the rounded request, and carry at most
      // 1 MiB more (large pool).
      CHECK(o.requested_peak <= o.peak_allocated);
      CHECK(o.peak_allocated <= o.requested_upper);
      if (offload) {
        // Sharded parameters, gradients and Adam state live on the host.
        CHECK(o.persistent_bytes == 0);
        CHECK(o.persistent_host_bytes == 16 * o.shard_numel);
        CHECK(persistent_blocks == 0);
        continue;
      }
      // 4 Psi/N parameters + 8 Psi/N Adam state, padded.
      CHECK(o.persistent_bytes == 12 * o.shard_numel);
      CHECK(o.persistent_device_bytes == o.persistent_bytes);
      CHECK(o.persistent_host_bytes == 0);
      // At the peak the persistent buffers are all live, as allocator blocks:
      // each rounded to 512 B; a large-pool block (> 1 MiB) also keeps the
      // rest of its segment when that is <= 1 MiB (not split).
      CHECK(persistent_blocks >= o.persistent_rounded);
      CHECK(persistent_blocks <= o.persistent_rounded + o.persistent_large_pool * kMiB);
      CHECK(category("parameters") >= 4 * o.shard_numel);
      CHECK(category("optimizer_state") >= 8 * o.shard_numel);
      CHECK(o.peak_allocated >= persistent_blocks);
    }
  }
}

TEST_CASE("DDP matches the all-reduce closed form on gpt2-small and llama3-8b",
          "[sim][properties]") {
  // shard_group_size = 1: no all-gather, no reduce-scatter; per step every
  // gradient is all-reduced once: 2 (W-1)/W x b_r x Psi wire bytes per rank.
  // Each all-reduce of S bytes over W ranks takes, with latency C and hop h:
  //   one node (W = 8):  ring  C + 2 (W-1) h_nvlink + 2 (S/B) (W-1)/W, B = NVLink bus bw
  //   8 nodes (W = 64):  ring  C + 2 (W-1) h_ib + transfer, B = min(NVLink, 8 x IB)
  //                      tree  C + 2 (7 h_nvlink + log2(8) h_ib) + transfer; auto: the faster
  // (the analytical model: the preset's published one-node all-reduce fit dropped)
  sim::HardwareModel hw = h100();
  hw.collectives.clear();
  for (const test::GridModel& m : grid_models()) {
    const plan::Graph graph = plan::load_model(m.name);
    for (int64_t world : {8, 64})
      for (const char* precision : {"fp32", "bf16"})
        for (bool offload : {false, true}) {
          const json doc = {
              {"shard_group_size", 1},
              {"wrap", {{"type", "class"}, {"classes", {m.block_class}}}},
              {"mixed_precision", {{"param_dtype", precision}, {"reduce_dtype", precision}}},
              {"cpu_offload", offload},
              {"batch_size", m.batch_size},
              {"seq_len", m.seq_len}};
          INFO(m.name << " world " << world << " " << doc.dump());
          const Planned p = plan_for(graph, doc, world);
          const sim::SimResult r = sim::simulate(graph, p.units, p.schedule, hw, fast_options());
          REQUIRE(r.fits);
          const double b_r = std::string(precision) == "fp32" ? 4 : 2;
          const double W = static_cast<double>(world);
          const plan::CommBytes comm = plan::schedule_comm_bytes(p.schedule);
          int64_t psi = 0;
          for (const plan::Unit& u : p.units.units) psi += u.numel;
          CHECK(psi == p.units.total_shard_numel());  // N = 1: no padding
          CHECK(comm.all_gather == 0);
          CHECK(comm.reduce_scatter == 0);
          CHECK(comm.all_reduce == Approx(2 * (W - 1) / W * b_r * static_cast<double>(psi)));
          // AdamW, zero_grad(set_to_none=True): parameters and state, 12 Psi.
          if (!offload) CHECK(r.persistent_bytes == 12 * psi);
          int all_reduces = 0;
          for (size_t i = 0; i < p.schedule.ops.size(); ++i) {
            const plan::ScheduleOp& op = p.schedule.ops[i];
            if (op.kind != plan::OpKind::all_reduce) continue;
            ++all_reduces;
            const double S = static_cast<double>(op.bytes);
            int64_t expected = 0;
            if (world == 8) {
              expected = hw.collective_latency_ns + 2 * 7 * hw.nvlink_latency_ns +
                         std::llround(2 * S / hw.nvlink_bus_bytes_per_s * 7 / 8 * 1e9);
            } else {
              const double bus = std::min(hw.nvlink_bus_bytes_per_s, 8 * hw.ib_bytes_per_s);
              const int64_t transfer = std::llround(2 * S / bus * 63 / 64 * 1e9);
              const int64_t ring = hw.collective_latency_ns + 2 * 63 * hw.ib_latency_ns + transfer;
              const int64_t tree = hw.collective_latency_ns +
                                   2 * (7 * hw.nvlink_latency_ns + 3 * hw.ib_latency_ns) + transfer;
              expected = std::min(ring, tree);
            }
            CAPTURE(i, op.bytes);
            CHECK((r.op_end[i] - r.op_start[i]).ns == expected);
          }
          CHECK(all_reduces == static_cast<int>(p.units.units.size()));
          // Doubling link bandwidth never slows DDP either.
          const sim::SimResult fast =
              sim::simulate(graph, p.units, p.schedule, doubled_links(hw), fast_options());
          CHECK(fast.step_time <= r.step_time);
        }
  }
}

TEST_CASE("two runs of grid configurations are byte-identical", "[sim][properties]") {
  // The first grid configuration of each flavor x wrap x world layout, with
  // traces recorded, alternately on h100-sxm and on the eager variant.
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    std::vector<const Outcome*> picked;
    std::set<std::string> corners;
    for (const Outcome& o : runs.outcomes) {
      const std::string corner = o.policy.at("flavor").dump() + o.policy.at("wrap").dump() +
                                 o.policy.at("shard_group_size").dump() + std::to_string(o.world);
      if (corners.insert(corner).second) picked.push_back(&o);
    }
    CHECK(picked.size() == 18);
    test::TempDir dir;
    int file = 0;
    for (size_t i = 0; i < picked.size(); ++i) {
      const Outcome& o = *picked[i];
      const bool eager = i % 2 == 1;
      const sim::HardwareModel hw = eager ? h100_eager() : h100();
      INFO(m.name << " on " << hw.name << ": " << key_of(o.policy, o.world));
      const Planned p = plan_for(runs.graph, o.policy, o.world);
      sim::SimOptions options;
      options.memory_limit_bytes = kHugeMemory;
      options.model_name = m.name;
      options.policy_json = o.policy.dump();
      const sim::SimResult a = sim::simulate(runs.graph, p.units, p.schedule, hw, options);
      const sim::SimResult b = sim::simulate(runs.graph, p.units, p.schedule, hw, options);
      CHECK(a.trace == b.trace);
      CHECK(a.op_start == b.op_start);
      CHECK(a.op_end == b.op_end);
      CHECK(traces::metrics_to_json(a.metrics) == traces::metrics_to_json(b.metrics));
      const std::string fa = (dir.path / (std::to_string(file++) + ".sstrace")).string();
      const std::string fb = (dir.path / (std::to_string(file++) + ".sstrace")).string();
      traces::save_trace(a.trace, fa);
      traces::save_trace(b.trace, fb);
      const std::string bytes = read_bytes(fa);
      CHECK(!bytes.empty());
      CHECK(bytes == read_bytes(fb));
      // Without a trace: the same step, the same peaks, the same metrics totals.
      sim::SimOptions fast = options;
      fast.record_trace = false;
      const sim::SimResult c = sim::simulate(runs.graph, p.units, p.schedule, hw, fast);
      CHECK(c.step_time == a.step_time);
      CHECK(c.op_end == a.op_end);
      CHECK(c.peak_allocated_bytes == a.peak_allocated_bytes);
      CHECK(c.peak_reserved_bytes == a.peak_reserved_bytes);
      CHECK(c.metrics.total.peak_allocated_bytes == a.metrics.total.peak_allocated_bytes);
      CHECK(c.metrics.total.peak_reserved_bytes == a.metrics.total.peak_reserved_bytes);
      CHECK(c.metrics.total.step_time_ms == Approx(a.metrics.total.step_time_ms));
      // And the cached grid run agrees.
      CHECK(o.step[eager ? kEager : kH100] == a.step_time);
      if (!eager) {
        CHECK(o.peak_allocated == a.peak_allocated_bytes);
        CHECK(o.peak_reserved == a.peak_reserved_bytes);
      }
    }
  }
}

// Not asserted: how often the memory properties fail for peak allocated
// bytes taken strictly (caching slack, see check_memory_pairs) and for peak
// reserved bytes (the caching allocator's segments), with examples; and where
// fsdp2's integer reshard_after_forward sits. Run: test_sim "[.properties-report]"
TEST_CASE("report: memory properties on allocated and reserved bytes", "[.properties-report]") {
  for (const test::GridModel& m : grid_models()) {
    const ModelRuns& runs = model_runs(m.name);
    const std::pair<const char*, std::vector<MemoryPair>> properties[] = {
        {"reshard_after_forward=false never lowers", reshard_pairs(runs)},
        {"limit_all_gathers never raises", limit_pairs(runs)},
        {"more forward prefetch never lowers", forward_prefetch_pairs(runs)},
        {"fsdp2 reshard true <= k <= false", reshard_k_pairs(runs)}};
    int fit80 = 0;
    for (const Outcome& o : runs.outcomes) fit80 += o.peak_reserved <= (int64_t{80} << 30);
    std::printf("%s: %zu configurations, %d within 80 GiB reserved\n", m.name.c_str(),
                runs.outcomes.size(), fit80);
    for (const auto& [name, pairs] : properties) {
      int requested = 0, allocated = 0, reserved = 0;
      std::vector<const MemoryPair*> examples[3];
      for (const MemoryPair& p : pairs) {
        const bool bad[3] = {p.lower->requested_peak > p.higher->requested_peak,
                             p.lower->peak_allocated > p.higher->peak_allocated,
                             p.lower->peak_reserved > p.higher->peak_reserved};
        requested += bad[0];
        allocated += bad[1];
        reserved += bad[2];
        for (int i = 0; i < 3; ++i)
          if (bad[i] && examples[i].size() < 2) examples[i].push_back(&p);
      }
      std::printf("  %s: %zu pairs; violations: %d requested, %d allocated, %d reserved\n", name,
                  pairs.size(), requested, allocated, reserved);
      const char* what[3] = {"requested", "allocated", "reserved"};
      for (int i = 0; i < 3; ++i)
        for (const MemoryPair* p : examples[i])
          std::printf("    [%s]\n      %s\n    > %s\n", what[i], describe(*p->lower).c_str(),
                      describe(*p->higher).c_str());
    }
  }
}
