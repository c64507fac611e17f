// The simulator against closed forms and itself over the policy grid of
// tests/sim/policy_grid.h (the runs: property_grid_runs.h): persistent bytes are
// 12 Psi/N with AdamW, DDP matches the all-reduce closed form, two runs are
// byte-identical, and a report of the memory properties (not run by default).
#include "tests/sim/property_grid_runs.h"

using namespace property_test;

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
