// `shardscope simulate`: one training step of a model under a policy, predicted
// by the discrete-event simulator (sim/) on a hardware model.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_inputs.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/simulator.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope simulate --model M [--policy P] [--set K=V]... [--world N] [--hw H]\n"
    "                    [--mem-limit BYTES] [--trace OUT] [--json]\n\n"
    "  --model M          preset (gpt2-tiny ... llama3-70b, mlp), HF config.json or graph JSON\n"
    "  --policy P         policy JSON (ARCHITECTURE.md keys); --set KEY=VALUE overrides a key\n"
    "  --world N          data-parallel world size (default 8)\n"
    "  --hw H             h100-sxm (default), h200-sxm, a100-sxm, cpu-local or a hardware JSON\n"
    "  --mem-limit BYTES  device memory for the allocator (default: the hardware's; 80GiB ...)\n"
    "  --trace OUT        write the simulated trace (native format)\n"
    "  --json             metrics JSON (ARCHITECTURE.md \"Output contracts\")";

}  // namespace

int cmd_simulate(int argc, char** argv) {
  Args args(argc, argv,
            plan_input_flags({{"world"}, {"hw"}, {"mem-limit"}, {"trace"}, {"json", false}}),
            false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  const int64_t world = args.get_int("world", 8, 1, 1 << 20);
  const std::string hw_spec = args.get("hw", "h100-sxm");
  sim::HardwareModel hw;
  try {
    hw = sim::load_hardware(hw_spec);
  } catch (const sim::Error& e) {
    throw UsageError(std::string("--hw: ") + e.what());
  }
  int64_t mem_limit = 0;
  if (args.has("mem-limit")) {
    mem_limit = parse_size(args.get("mem-limit"), "--mem-limit");
    if (mem_limit <= 0) throw UsageError("--mem-limit must be > 0");
  }
  PlanInputs in = load_plan_inputs(args, world);
  plan::UnitPlan units = plan::build_units(in.graph, in.policy, in.world);
  for (const std::string& w : units.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const plan::Schedule sched = plan::build_schedule(in.graph, in.policy, units, 0);

  sim::SimOptions options;
  options.memory_limit_bytes = mem_limit;
  options.model_name = args.require("model");
  options.policy_json = in.policy_doc.dump();
  options.hardware_name = hw_spec;
  const sim::SimResult r = sim::simulate(in.graph, units, sched, hw, options);
  const int64_t capacity = mem_limit > 0 ? mem_limit : hw.memory_bytes;

  if (args.has("trace")) traces::save_trace(r.trace, args.get("trace"));

  if (args.has("json")) {
    nlohmann::json j = traces::metrics_to_json(r.metrics);
    j["hw"] = hw.name;
    j["memory_limit_bytes"] = capacity;
    j["fits"] = r.fits;
    if (!r.fits) {
      j["oom_buffer"] = r.oom_buffer;
      j["oom_bytes"] = r.oom_bytes;
    }
    j["persistent_bytes"] = r.persistent_bytes;
    j["peak_breakdown"] = {{"by_category", r.peak.by_category}, {"by_unit", r.peak.by_unit}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("model %s on %s, world %lld (simulated rank 0 stands for all %lld)\n",
              options.model_name.c_str(), hw.name.c_str(), static_cast<long long>(world),
              static_cast<long long>(world));
  if (!r.fits) {
    std::printf("DOES NOT FIT in %s: allocating '%s' (%s) failed\n  %s\n",
                human_bytes(static_cast<double>(capacity)).c_str(), r.oom_buffer.c_str(),
                human_bytes(static_cast<double>(r.oom_bytes)).c_str(), r.oom_message.c_str());
    std::printf("(the figures below cover the step up to the failed allocation)\n");
  }
  const traces::MetricValues& m = r.metrics.total;
  std::printf("step time        %12.3f ms\n", m.step_time_ms);
  std::printf("compute          %12.3f ms\n", m.compute_ms);
  std::printf("communication    %12.3f ms (exposed %.3f ms, overlap %.1f%%)\n", m.comm_ms,
              m.exposed_comm_ms, 100.0 * m.overlap);
  std::printf("idle             %12.3f ms\n", m.idle_ms);
  std::printf("peak allocated   %12s   peak reserved %s   persistent %s\n",
              human_bytes(static_cast<double>(r.peak_allocated_bytes)).c_str(),
              human_bytes(static_cast<double>(r.peak_reserved_bytes)).c_str(),
              human_bytes(static_cast<double>(r.persistent_bytes)).c_str());
  if (r.fits)
    std::printf("memory           fits in %s (peak reserved %.1f%%)\n",
                human_bytes(static_cast<double>(capacity)).c_str(),
                100.0 * static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(capacity));
  std::printf("\npeak allocated by category (at %.3f ms):\n", r.peak.time.ms());
  for (const auto& [k, v] : r.peak.by_category)
    std::printf("  %-20s %14s\n", k.c_str(), human_bytes(static_cast<double>(v)).c_str());
  std::printf("peak allocated by unit:\n");
  for (const auto& [k, v] : r.peak.by_unit)
    std::printf("  %-20s %14s\n", k.c_str(), human_bytes(static_cast<double>(v)).c_str());
  return 0;
}

}  // namespace shardscope::cli
