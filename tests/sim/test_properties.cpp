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
#include "tests/sim/property_grid_runs.h"

using namespace property_test;

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
