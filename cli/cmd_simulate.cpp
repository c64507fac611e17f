// `shardscope simulate`: one training step of a model under a policy, predicted
// by the discrete-event simulator (sim/) on a hardware model.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/cost_sources.h"
#include "cli/output_flags.h"
#include "cli/plan_inputs.h"
#include "cli/sim_flags.h"
#include "plan/schedule.h"
#include "plan/sdpa.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/memory_history.h"
#include "sim/nccl_buffers.h"
#include "sim/simulator.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope simulate --model M [--policy P] [--set K=V]... [--world N] [--hw H]\n"
    "                    [--mem-limit BYTES] [--trace OUT] [--memory-snapshot OUT.pickle]\n"
    "                    [--json]\n\n"
    "  --model M          preset (gpt2-tiny ... llama3-70b, mlp), HF config.json or graph JSON\n"
    "  --policy P         policy JSON (ARCHITECTURE.md keys); --set KEY=VALUE overrides a key\n"
    "  --world N          data-parallel world size (default 8)\n"
    "  --hw H             h100-sxm (default), h200-sxm, a100-sxm, h100-pcie, cpu-local or a "
    "hardware JSON\n"
    "  --mem-limit BYTES  device memory for the allocator (default: the hardware's; 80GiB ...)\n"
    "  --trace OUT        write the simulated trace (native format)\n"
    "  --memory-snapshot OUT.pickle\n"
    "                     write the predicted allocator trace of rank 0 in PyTorch's memory\n"
    "                     snapshot format (torch.cuda.memory._dump_snapshot), for\n"
    "                     python -m torch.cuda._memory_viz or pytorch.org/memory_viz\n"
    "  --json             metrics JSON (ARCHITECTURE.md \"Output contracts\")";

// "0-7,16-23": ascending rank ids as runs.
std::string rank_ranges(const std::vector<int32_t>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// Units by live bytes at the peak, largest first (ties by name); the first
// `top` printed, the rest summed on one line.
void print_units(const std::map<std::string, int64_t>& by_unit, size_t top) {
  std::vector<std::pair<std::string, int64_t>> v(by_unit.begin(), by_unit.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  int64_t rest = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i < top)
      std::printf("  %-28s %14s\n", v[i].first.c_str(),
                  human_bytes(static_cast<double>(v[i].second)).c_str());
    else
      rest += v[i].second;
  }
  if (v.size() > top)
    std::printf("  (%zu more units)%*s %14s\n", v.size() - top, 12, "",
                human_bytes(static_cast<double>(rest)).c_str());
}

// Attention ops grouped by the SDPA kernel they run and why the kernels
// PyTorch tries first refused (the same reason: the same layer kind).
struct AttentionKernelGroup {
  plan::SdpaKernel kernel = plan::SdpaKernel::none;
  std::string refused;
  std::vector<std::string> ops;
};

std::vector<AttentionKernelGroup> attention_kernel_groups(
    const plan::Graph& g, const std::vector<plan::SdpaChoice>& choices) {
  std::vector<AttentionKernelGroup> groups;
  for (size_t o = 0; o < choices.size(); ++o) {
    if (choices[o].kernel == plan::SdpaKernel::none) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const AttentionKernelGroup& x) {
      return x.kernel == choices[o].kernel && x.refused == choices[o].refused;
    });
    if (it == groups.end()) {
      groups.push_back({choices[o].kernel, choices[o].refused, {}});
      it = groups.end() - 1;
    }
    it->ops.push_back(g.ops[o].name);
  }
  return groups;
}

nlohmann::json attention_kernels_json(const std::vector<AttentionKernelGroup>& groups) {
  nlohmann::json out = nlohmann::json::array();
  for (const AttentionKernelGroup& x : groups)
    out.push_back({{"kernel", plan::sdpa_kernel_name(x.kernel)},
                   {"ops", x.ops},
                   {"refused", x.refused.empty() ? nlohmann::json() : nlohmann::json(x.refused)}});
  return out;
}

void print_attention_kernels(const std::vector<AttentionKernelGroup>& groups,
                             const plan::DeviceFamily& device) {
  if (groups.empty()) return;
  std::printf("attention kernels (scaled_dot_product_attention on %s):\n",
              plan::device_family_name(device).c_str());
  for (const AttentionKernelGroup& x : groups) {
    std::printf("  %-10s %zu op(s), e.g. %s\n", plan::sdpa_kernel_name(x.kernel), x.ops.size(),
                x.ops.front().c_str());
    if (!x.refused.empty()) std::printf("             refused: %s\n", x.refused.c_str());
  }
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  Args args(
      argc, argv,
      plan_input_flags(
          {{"world"}, {"hw"}, {"mem-limit"}, {"trace"}, {"memory-snapshot"}, {"json", false}}),
      false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  check_output_flag(args, "trace");
  check_output_flag(args, "memory-snapshot");
  const int64_t world = args.get_int("world", 8, 1, 1 << 20);
  const std::string hw_spec = args.get("hw", "h100-sxm");
  const sim::HardwareModel hw = hardware_flag(args);
  const int64_t mem_limit = memory_limit_flag(args);
  PlanInputs in = load_plan_inputs(args, world);
  in.policy.device = hw.device;  // the attention kernel PyTorch picks there (plan/sdpa.h)
  plan::UnitPlan units = plan::build_units(in.graph, in.policy, in.world);
  for (const std::string& w : units.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const plan::Schedule sched = plan::build_schedule(in.graph, in.policy, units, 0);
  const std::vector<AttentionKernelGroup> attention =
      attention_kernel_groups(in.graph, plan::sdpa_kernels(in.graph, in.policy, units));

  sim::SimOptions options;
  options.memory_limit_bytes = mem_limit;
  options.model_name = args.require("model");
  options.policy_json = in.policy_doc.dump();
  options.hardware_name = hw_spec;
  sim::AllocatorHistory history;
  if (args.has("memory-snapshot")) options.allocator_history = &history;
  const sim::SimResult r = sim::simulate(in.graph, units, sched, hw, options);
  const int64_t capacity = mem_limit > 0 ? mem_limit : hw.memory_bytes;
  const sim::NcclBufferEstimate nccl = sim::nccl_buffer_estimate(sched, hw);

  if (args.has("trace")) {
    traces::save_trace(r.trace, args.get("trace"));
    if (!r.fits)
      std::fprintf(stderr,
                   "note: the trace %s stops at the failed allocation; the step times that "
                   "report, diff or view compute from it are of a partial step and predict "
                   "nothing\n",
                   args.get("trace").c_str());
  }

  if (args.has("memory-snapshot"))
    traces::save_memory_snapshot(sim::memory_snapshot(history, in.graph, units, sched),
                                 args.get("memory-snapshot"));

  // A step that runs out of memory stops at the failed allocation: its times
  // predict nothing, so none is printed or written (the peaks are real, up to
  // the failure). One rank out of memory stops the whole job, so no class has
  // a step time then either.
  if (args.has("json")) {
    nlohmann::json j = traces::metrics_to_json(
        r.metrics, 50, r.fits ? traces::TimeFields::values : traces::TimeFields::withheld);
    j["hw"] = hw.name;
    j["memory_limit_bytes"] = capacity;
    j["fits"] = r.fits;
    j["peaks_up_to_failure"] = !r.fits;
    if (!r.fits) {
      j["oom_buffer"] = r.oom_buffer;
      j["oom_bytes"] = r.oom_bytes;
      j["oom_rank"] = r.oom_rank;
      j["oom_allocated_bytes"] = r.oom_allocated_bytes;
      j["oom_reserved_bytes"] = r.oom_reserved_bytes;
      j["oom_message"] = r.oom_message;
    }
    j["persistent_bytes"] = r.persistent_bytes;
    j["peak_requested_bytes"] = r.peak_requested_bytes;
    // Memory outside the tensors (docs/allocator.md): the cuBLAS workspaces
    // the caching allocator holds (in peak_reserved_bytes), PyTorch's
    // max_memory_allocated (tensors + workspaces), and NCCL's buffers outside
    // the allocator (an estimate).
    j["blas_workspace_bytes"] = r.blas_workspace_bytes;
    j["peak_allocated_with_workspaces_bytes"] = r.peak_allocated_bytes + r.blas_workspace_bytes;
    j["nccl_buffer_bytes"] = nccl.bytes;
    j["nccl_communicators"] = nccl.communicators;
    j["peak_breakdown"] = {{"by_category", r.peak.by_category}, {"by_unit", r.peak.by_unit}};
    nlohmann::json classes = nlohmann::json::array();
    for (const sim::RankClassResult& c : r.rank_classes)
      classes.push_back(
          {{"rank", c.rank},
           {"represents", c.represents},
           {"fits", c.fits},
           {"step_time_ms", r.fits ? nlohmann::json(c.step_time.ms()) : nlohmann::json()},
           {"peak_allocated_bytes", c.peak_allocated_bytes},
           {"peak_reserved_bytes", c.peak_reserved_bytes}});
    j["rank_classes"] = classes;
    j["sim_events"] = r.sim_events;
    j["device"] = plan::device_family_name(hw.device);
    j["attention_kernels"] = attention_kernels_json(attention);
    j["cost_sources"] = cost_sources_json(hw);
    if (hw.fitted.calibrated)
      j["cost_sources"]["from_base"] = sim::costs_from_base(hw, in.graph, sched);
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("model %s on %s, world %lld: %zu simulated rank(s) stand for all %lld (%s events)\n",
              options.model_name.c_str(), hw.name.c_str(), static_cast<long long>(world),
              r.rank_classes.size(), static_cast<long long>(world),
              with_commas(static_cast<int64_t>(r.sim_events)).c_str());
  std::printf("%s\n", cost_sources_text(hw).c_str());
  if (const std::string base = from_base_text(sim::costs_from_base(hw, in.graph, sched));
      !base.empty())
    std::printf("%s\n", base.c_str());
  if (r.rank_classes.size() > 1) {
    std::printf("  %-6s %-24s %12s %14s %14s\n", "rank", "stands for", "step ms", "peak alloc",
                "peak reserved");
    for (const sim::RankClassResult& c : r.rank_classes) {
      char step_ms[32] = "-";
      if (r.fits) std::snprintf(step_ms, sizeof step_ms, "%.3f", c.step_time.ms());
      std::printf("  %-6d %-24s %12s %14s %14s%s\n", c.rank, rank_ranges(c.represents).c_str(),
                  step_ms, human_bytes(static_cast<double>(c.peak_allocated_bytes)).c_str(),
                  human_bytes(static_cast<double>(c.peak_reserved_bytes)).c_str(),
                  c.fits ? "" : "  does not fit");
    }
  }
  if (!r.fits) {
    std::printf(
        "does not fit in %s: rank %d ran out of memory allocating '%s' (%s)\n"
        "  at the failure: allocated %s, reserved %s, limit %s\n"
        "  allocator: %s\n"
        "no step time, compute, communication, overlap or idle time: the step stops at the\n"
        "failed allocation, so it predicts none\n",
        human_bytes(static_cast<double>(capacity)).c_str(), r.oom_rank, r.oom_buffer.c_str(),
        human_bytes(static_cast<double>(r.oom_bytes)).c_str(),
        human_bytes(static_cast<double>(r.oom_allocated_bytes)).c_str(),
        human_bytes(static_cast<double>(r.oom_reserved_bytes)).c_str(),
        human_bytes(static_cast<double>(capacity)).c_str(), r.oom_message.c_str());
  } else {
    const traces::MetricValues& m = r.metrics.total;
    std::printf("step time        %12.3f ms\n", m.step_time_ms);
    std::printf("compute          %12.3f ms\n", m.compute_ms);
    std::printf("communication    %12.3f ms (exposed %.3f ms, overlap %.1f%%)\n", m.comm_ms,
                m.exposed_comm_ms, 100.0 * m.overlap);
    std::printf("idle             %12.3f ms\n", m.idle_ms);
  }
  std::printf("peak allocated   %12s   peak reserved %s   persistent %s%s\n",
              human_bytes(static_cast<double>(r.peak_allocated_bytes)).c_str(),
              human_bytes(static_cast<double>(r.peak_reserved_bytes)).c_str(),
              human_bytes(static_cast<double>(r.persistent_bytes)).c_str(),
              r.fits ? "" : "   (up to the failure)");
  std::printf(
      "outside tensors  cuBLAS workspaces %s (in peak reserved; allocated with them %s)\n",
      human_bytes(static_cast<double>(r.blas_workspace_bytes)).c_str(),
      human_bytes(static_cast<double>(r.peak_allocated_bytes + r.blas_workspace_bytes)).c_str());
  std::printf(
      "                 NCCL buffers %s, an estimate outside the caching allocator (%lld "
      "communicator(s) x %lld channels x %s)\n",
      human_bytes(static_cast<double>(nccl.bytes)).c_str(),
      static_cast<long long>(nccl.communicators), static_cast<long long>(hw.nccl_channels),
      human_bytes(static_cast<double>(hw.nccl_buffsize_bytes + sim::kNcclLlBufferBytes +
                                      sim::kNcclLl128BufferBytes))
          .c_str());
  if (r.fits) {
    std::printf("memory           fits in %s (peak reserved %.1f%%)\n",
                human_bytes(static_cast<double>(capacity)).c_str(),
                100.0 * static_cast<double>(r.peak_reserved_bytes) / static_cast<double>(capacity));
    std::printf("\npeak allocated by category (reached at host time %.3f ms):\n", r.peak.time.ms());
  } else {
    std::printf("\npeak allocated by category (up to the failure):\n");
  }
  for (const auto& [k, v] : r.peak.by_category)
    std::printf("  %-20s %14s\n", k.c_str(), human_bytes(static_cast<double>(v)).c_str());
  std::printf("peak allocated by unit (largest first):\n");
  print_units(r.peak.by_unit, 10);
  print_attention_kernels(attention, hw.device);
  return 0;
}

}  // namespace shardscope::cli
