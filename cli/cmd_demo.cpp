// `shardscope demo`: the README's main job on an embedded default. GPT-2
// small on 8 H100s under four policies, side by side: the plan (units,
// communication, persistent memory) and the simulator's prediction (step
// time, peak reserved memory, overlap); then a what-if sweep of Llama-3-8B on
// 64 H100s with an 80 GiB limit and its recommended policy.
#include <chrono>
#include <cstdio>

#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/cost_sources.h"
#include "cli/plan_inputs.h"
#include "engine/exec/train.h"
#include "engine/run/accuracy.h"
#include "plan/models.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "sim/sweep.h"
#include "traces/chrome_export.h"
#include "traces/merge.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

// Part 1: the calibrate -> predict loop on this machine. gpt2-tiny trained
// for real on 2 CPU ranks (threads of this process sharing only the
// communicator) under three policies; the first policy's run calibrates a
// hardware model (cpu-local base), which then predicts all three. Traces and
// their Chrome exports are written under `dir`.
void measured_vs_predicted(const std::string& dir) {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const nlohmann::json blocks = {{"type", "class"}, {"classes", {"GPT2Block"}}};
  struct Variant {
    const char* label;
    const char* file;
    nlohmann::json policy;
  };
  // Steps of about 80 ms here: large enough that the host and the threads'
  // hand-offs do not dominate (docs/accuracy.md, the CPU loop).
  const std::vector<Variant> variants = {
      {"fsdp2, per block", "fsdp2-blocks", {{"wrap", blocks}, {"batch_size", 8}, {"seq_len", 128}}},
      {"fsdp1, per block, no reshard",
       "fsdp1-noreshard",
       {{"flavor", "fsdp1"},
        {"wrap", blocks},
        {"reshard_after_forward", false},
        {"batch_size", 8},
        {"seq_len", 128}}},
      {"fsdp2, per block, checkpointing",
       "fsdp2-blocks-ckpt",
       {{"wrap", blocks},
        {"activation_checkpointing", "full"},
        {"batch_size", 8},
        {"seq_len", 128}}},
  };

  const int world = 2;
  const int64_t steps = 10;
  const sim::HardwareModel preset = sim::hardware_preset("cpu-local");
  std::printf("measured: %s (%s parameters) trained on %d CPU ranks, %lld steps each\n",
              g.model_name.c_str(), with_commas(g.params_total()).c_str(), world,
              static_cast<long long>(steps));
  std::vector<engine::run::MeasuredRun> runs;
  for (const Variant& v : variants) {
    engine::run::MeasuredRun r;
    r.label = v.label;
    r.policy = v.policy;
    r.trace = engine::run::train_policy_threads(g, "gpt2-tiny", v.policy, world, steps);
    const std::string base = dir + "/" + v.file;
    traces::save_trace(r.trace, base + ".measured.trace");
    traces::export_chrome(r.trace, base + ".measured.json");
    runs.push_back(std::move(r));
  }
  // Calibrated on the first policy's run only.
  const sim::CalibrationResult fit =
      engine::run::calibrate_runs({runs[0]}, preset, "calibrated on " + runs[0].label);
  std::printf("calibrated on '%s' (its run only): op dispatch %.1f us, linear efficiency %.4f\n",
              runs[0].label.c_str(), static_cast<double>(fit.hw.op_dispatch_ns) / 1e3,
              fit.hw.efficiency_of("linear", plan::DType::f32, 1e7));
  std::printf("%s\n\n", cost_sources_text(fit.hw).c_str());
  std::printf("%-30s %10s %14s %17s %8s %22s %10s %14s\n", "policy", "measured", "uncalibrated",
              "calibrated (err)", "overlap", "comm: wait + transfer", "predicted", "peak alloc");
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    const engine::run::AccuracyRow raw = engine::run::accuracy_row(
        g, "gpt2-tiny", v.label, v.policy, {&runs[i].trace}, preset, world);
    const engine::run::AccuracyRow cal = engine::run::accuracy_row(
        g, "gpt2-tiny", v.label, v.policy, {&runs[i].trace}, fit.hw, world);
    // The calibrated prediction, as a trace beside the measured one.
    {
      const plan::Policy p = plan::policy_from_json(v.policy);
      const plan::World w = plan::validate_policy(p, g, world);
      const plan::UnitPlan units = plan::build_units(g, p, w);
      const plan::Schedule s = plan::build_schedule(g, p, units, 0);
      sim::SimOptions so;
      so.model_name = "gpt2-tiny";
      so.policy_json = v.policy.dump();
      const sim::SimResult pr = sim::simulate(g, units, s, fit.hw, so);
      const std::string base = dir + "/" + v.file;
      traces::save_trace(pr.trace, base + ".predicted.trace");
      traces::export_chrome(pr.trace, base + ".predicted.json");
    }
    std::printf(
        "%-30s %7.2f ms %11.2f ms %8.2f ms %+6.1f%% %7.1f%% %8.2f + %7.2f ms %7.2f ms %14s%s\n",
        v.label, cal.measured.step_time_ms, raw.predicted.step_time_ms, cal.predicted.step_time_ms,
        100 * cal.step_error, 100 * cal.measured.overlap, cal.measured.comm_wait_ms,
        cal.measured.comm_transfer_ms, cal.predicted.comm_transfer_ms,
        human_bytes(static_cast<double>(cal.measured.peak_allocated_bytes)).c_str(),
        cal.measured.peak_allocated_bytes == cal.predicted.peak_allocated_bytes
            ? " (= predicted)"
            : " (predicted differs)");
  }
  std::printf(
      "\nmeasured: median step after the first; peak allocated per rank from the engine's\n"
      "allocator (the simulator drives the same allocator in the same order, so the two agree\n"
      "exactly). Uncalibrated: the cpu-local preset; calibrated: fitted to the first run only\n"
      "(shardscope calibrate TRACE, or calibrate --measure --model M), then predicting all three.\n"
      "comm: per step and rank, the measured collectives split at each one's last arrival into\n"
      "waiting for the slower rank and the transfer, which is what the simulator predicts\n"
      "(calibrated); shardscope report TRACE --ranks names the slowest rank at each.\n"
      "traces and Chrome/Perfetto exports: %s/*.trace, %s/*.json\n\n",
      dir.c_str(), dir.c_str());
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  Args args(argc, argv, {}, false);
  if (args.help()) {
    std::printf(
        "usage: shardscope demo\n\nPlans and simulates GPT-2 small on 8 H100s under four FSDP "
        "policies,\nthen sweeps 32 policies of Llama-3-8B on 64 H100s under 80 GiB.\n");
    return 0;
  }
  struct Variant {
    const char* label;
    nlohmann::json policy;
  };
  const nlohmann::json blocks = {{"type", "class"}, {"classes", {"GPT2Block"}}};
  const std::vector<Variant> variants = {
      {"fsdp2, one unit (default)", nlohmann::json::object()},
      {"fsdp2, per block, bf16",
       {{"wrap", blocks}, {"mixed_precision", {{"param_dtype", "bf16"}}}}},
      {"fsdp1, per block, SHARD_GRAD_OP",
       {{"flavor", "fsdp1"}, {"wrap", blocks}, {"reshard_after_forward", false}}},
      {"DDP (shard_group_size 1)", {{"shard_group_size", 1}}},
  };
  const std::string dir = "shardscope-demo";
  mkdir(dir.c_str(), 0755);
  measured_vs_predicted(dir);

  const plan::Graph g = plan::load_model("gpt2-small");
  const int64_t world = 8;
  const sim::HardwareModel hw = sim::hardware_preset("h100-sxm");
  std::printf("shardscope demo: %s (%s parameters) on %lld x %s, batch 1 x seq 1024\n\n",
              g.model_name.c_str(), with_commas(g.params_total()).c_str(),
              static_cast<long long>(world), hw.name.c_str());
  std::printf("%-34s %5s %11s %11s %11s %11s %9s %11s %7s\n", "policy", "units", "all-gather",
              "red-scatter", "all-reduce", "persistent", "step ms", "peak resv", "overlap");
  for (const Variant& v : variants) {
    plan::Policy p = plan::policy_from_json(v.policy);
    plan::World w = plan::validate_policy(p, g, world);
    plan::UnitPlan units = plan::build_units(g, p, w);
    plan::Schedule s = plan::build_schedule(g, p, units, 0);
    plan::CommBytes c = plan::schedule_comm_bytes(s);
    sim::SimOptions so;
    so.record_trace = false;
    const sim::SimResult r = sim::simulate(g, units, s, hw, so);
    std::printf("%-34s %5zu %11s %11s %11s %11s ", v.label, units.units.size(),
                human_bytes(c.all_gather).c_str(), human_bytes(c.reduce_scatter).c_str(),
                human_bytes(c.all_reduce).c_str(),
                human_bytes(static_cast<double>(s.persistent_device_bytes())).c_str());
    if (r.fits)
      std::printf("%9.3f %11s %6.1f%%\n", r.metrics.total.step_time_ms,
                  human_bytes(static_cast<double>(r.peak_reserved_bytes)).c_str(),
                  100.0 * r.metrics.total.overlap);
    else  // the step stopped at the failed allocation: no time to predict
      std::printf("does not fit: out of memory allocating '%s'\n", r.oom_buffer.c_str());
  }
  std::printf(
      "\ncommunication is per rank per step; persistent = sharded fp32 parameters + AdamW state\n"
      "(12 bytes per shard element; gradients are freed by zero_grad(set_to_none=True), PyTorch's\n"
      "default, and allocated again by each backward); step time, peak reserved memory and\n"
      "compute/communication overlap are predicted by the simulator (uncalibrated presets).\n");

  // A what-if sweep: 2 x 2 x 2 x 2 x 2 = 32 policies of Llama-3-8B.
  const plan::Graph llama = plan::load_model("llama3-8b");
  const sim::SweepGrid grid =
      sim::grid_from_json({{"flavor", {"fsdp1", "fsdp2"}},
                           {"reshard_after_forward", {true, false}},
                           {"mixed_precision.param_dtype", {"bf16", "fp32"}},
                           {"activation_checkpointing", {"none", "full"}},
                           {"batch_size", {1, 2}}});
  sim::SweepOptions o;
  o.worlds = {64};
  o.base_policy = {{"wrap", {{"type", "class"}, {"classes", {"LlamaDecoderLayer"}}}}};
  o.memory_limit_bytes = int64_t{80} << 30;
  const auto t0 = std::chrono::steady_clock::now();
  const sim::SweepResult r = sim::run_sweep(llama, grid, hw, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nsweep: llama3-8b on 64 x %s, 80 GiB limit, %zu policies in %.2f s: %zu fit\n",
              hw.name.c_str(), r.points.size(), seconds, r.ranking.size());
  if (r.best >= 0) {
    const sim::SweepPoint& best = r.points[static_cast<size_t>(r.best)];
    std::printf(
        "  highest throughput that fits: %.0f tokens/s (%.1f ms per step), peak reserved %s\n",
        best.tokens_per_s, best.metrics.step_time_ms,
        human_bytes(static_cast<double>(best.metrics.peak_reserved_bytes)).c_str());
    for (const std::string& d : sim::policy_differences(o.base_policy, best.policy))
      std::printf("    %s\n", d.c_str());
  }
  std::printf(
      "\nNext:\n"
      "  shardscope plan --model gpt2-small --world 8 --set wrap.type=class \\\n"
      "      --set 'wrap.classes=[\"GPT2Block\"]'      # the unit table and schedule summary\n"
      "  shardscope simulate --model llama3-8b --world 64 --mem-limit 80GiB   # why this peak\n"
      "  shardscope sweep --model llama3-8b --world 64 --grid grid.json      # docs/sweep.md\n"
      "  shardscope run --model gpt2-tiny --nproc 2 --steps 20   # real rank processes\n"
      "  shardscope view shardscope-demo/fsdp2-blocks.measured.trace \\\n"
      "      shardscope-demo/fsdp2-blocks.predicted.trace         # timelines side by side\n");
  return 0;
}

}  // namespace shardscope::cli
