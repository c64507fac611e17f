// `shardscope sweep`: what-if policy sweep over a grid of policy values and
// world sizes, simulated on a thread pool (sim/sweep.h), ranked, with the
// Pareto front of throughput (tokens/s) vs peak reserved memory and a recommendation.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/cost_sources.h"
#include "cli/output_flags.h"
#include "cli/plan_inputs.h"
#include "cli/sim_flags.h"
#include "cli/sweep_output.h"
#include "cli/sweep_progress.h"
#include "io/output_stream.h"
#include "plan/models.h"
#include "plan/vocab_padding.h"
#include "sim/sweep.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope sweep --model M --grid G [--world N[,N...]] [--policy P] [--set K=V]...\n"
    "                 [--hw H] [--mem-limit BYTES] [--threads T] [--top K] [--out FILE] "
    "[--json] [--quiet]\n\n"
    "  --grid G           grid JSON: policy keys (dotted for nested) -> arrays of values\n"
    "  --world N,...      world sizes to sweep (default 8)\n"
    "  --policy/--set     the base policy the grid's values are applied to\n"
    "  --hw H             h100-sxm (default), h200-sxm, a100-sxm, h100-pcie, cpu-local or a "
    "hardware JSON\n"
    "  --mem-limit BYTES  device memory a configuration must fit (default: the hardware's)\n"
    "  --threads T        worker threads (default: every core)\n"
    "  --top K            rows of the ranked table (default 10)\n"
    "  --out FILE         every configuration: CSV, or JSON when FILE ends in .json\n"
    "  --json             print the sweep JSON (ARCHITECTURE.md \"Output contracts\")\n"
    "  --quiet            no progress or warning on stderr\n\n"
    "At most 10,000,000 configurations (grid x worlds); the count is checked first.\n"
    "Progress goes to stderr: one updating line on a terminal, else a line per tenth\n"
    "of sweeps of 10,000 configurations or more. Results stream to --out/--json:\n"
    "memory does not grow with the grid.";

std::vector<int64_t> parse_worlds(const std::string& text) {
  std::vector<int64_t> worlds;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1 || v > (1 << 20))
      throw UsageError("--world: '" + item + "' is not a world size in [1, 1048576]");
    worlds.push_back(v);
  }
  if (worlds.empty()) throw UsageError("--world: no world sizes");
  return worlds;
}

// "fsdp1 / bf16 / true": the grid values of a configuration, short.
std::string axis_values(const sim::SweepPoint& p, const sim::SweepGrid& grid) {
  std::string s;
  for (const sim::SweepAxis& a : grid.axes) {
    if (!s.empty()) s += " ";
    s += a.key + "=" + grid_value(p, a.key);
  }
  return s.empty() ? "(base policy)" : s;
}

void print_report(const sim::SweepSummary& r, const sim::SweepGrid& grid, const std::string& model,
                  const std::string& hw, int64_t capacity, size_t top, double seconds) {
  const size_t total = r.total;
  const size_t do_not_fit = r.do_not_fit;
  std::printf(
      "sweep of %s on %s: %zu configurations, %zu rejected by validation, %zu fit in %s, %zu do "
      "not fit\n",
      model.c_str(), hw.c_str(), total, r.rejected, r.fit,
      human_bytes(static_cast<double>(capacity)).c_str(), do_not_fit);
  std::printf("simulated in %.2f s (%.0f configurations/s, %s events)\n", seconds,
              seconds > 0 ? static_cast<double>(total) / seconds : 0.0,
              with_commas(static_cast<int64_t>(r.sim_events)).c_str());
  if (r.rejected) {
    // The reasons, most frequent first (validation names the key).
    std::printf("rejected:\n");
    for (size_t i = 0; i < r.reasons.size() && i < 5; ++i)
      std::printf("  %6zu x %s\n", r.reasons[i].second, r.reasons[i].first.c_str());
    if (r.reasons.size() > 5) std::printf("  ... %zu more reasons\n", r.reasons.size() - 5);
    if (r.other_reasons)
      std::printf("  %6zu x reasons beyond the first %zu distinct ones, not told apart\n",
                  r.other_reasons, sim::kMaxSweepReasons);
  }
  if (do_not_fit) {
    // No numbers but why: a step that runs out of memory predicts no time.
    std::printf(
        "\ndo not fit in %s (out of memory: no step time or throughput is predicted):\n"
        "  %6s %6s  %-12s  %s\n",
        human_bytes(static_cast<double>(capacity)).c_str(), "config", "world", "", "configuration");
    for (const sim::SweepPoint& p : r.first_do_not_fit)
      std::printf("  %6zu %6lld  does not fit  %s  (out of memory at '%s')\n", p.config,
                  static_cast<long long>(p.world), axis_values(p, grid).c_str(),
                  p.oom_buffer.c_str());
    if (do_not_fit > top)
      std::printf("  ... %zu more (--out FILE lists every configuration)\n", do_not_fit - top);
  }
  if (r.top.empty()) {
    std::printf("\nno configuration fits in %s\n",
                human_bytes(static_cast<double>(capacity)).c_str());
    return;
  }
  std::printf(
      "\nhighest throughput that fit (tokens/s = world x batch x seq x accum / step):\n"
      "  %4s %6s %12s %12s %12s %12s %8s  %s\n",
      "#", "world", "tokens/s", "step ms", "reserved", "allocated", "overlap", "configuration");
  for (size_t k = 0; k < r.top.size() && k < top; ++k) {
    const sim::SweepPoint& p = r.top[k];
    std::printf("  %4zu %6lld %12.0f %12.3f %12s %12s %7.1f%%  %s%s\n", k + 1,
                static_cast<long long>(p.world), p.tokens_per_s, p.metrics.step_time_ms,
                human_bytes(static_cast<double>(p.metrics.peak_reserved_bytes)).c_str(),
                human_bytes(static_cast<double>(p.metrics.peak_allocated_bytes)).c_str(),
                100.0 * p.metrics.overlap, axis_values(p, grid).c_str(),
                p.pareto ? "  [pareto]" : "");
  }
  std::printf("\nPareto front (tokens/s vs peak reserved):\n");
  for (const sim::SweepPoint& p : r.pareto) {
    std::printf("  %12.0f tokens/s %12.3f ms %12s  world %lld  %s\n", p.tokens_per_s,
                p.metrics.step_time_ms,
                human_bytes(static_cast<double>(p.metrics.peak_reserved_bytes)).c_str(),
                static_cast<long long>(p.world), axis_values(p, grid).c_str());
  }
  const sim::SweepPoint& best = r.top.front();
  std::printf("\nrecommended (world %lld): %s\n", static_cast<long long>(best.world),
              best.policy.dump().c_str());
  std::printf(
      "  %.0f tokens/s, step %.3f ms, peak reserved %s, peak allocated %s, overlap %.1f%%\n",
      best.tokens_per_s, best.metrics.step_time_ms,
      human_bytes(static_cast<double>(best.metrics.peak_reserved_bytes)).c_str(),
      human_bytes(static_cast<double>(best.metrics.peak_allocated_bytes)).c_str(),
      100.0 * best.metrics.overlap);
  const sim::SweepPoint& base = r.baseline;
  if (base.rejected) {
    std::printf("  why: the base policy is not valid at world %lld (%s)\n",
                static_cast<long long>(best.world), base.reason.c_str());
  } else if (!base.fits) {
    std::printf("  why: the base policy does not fit in %s at world %lld (out of memory at '%s')\n",
                human_bytes(static_cast<double>(capacity)).c_str(),
                static_cast<long long>(best.world), base.oom_buffer.c_str());
  } else {
    const double gain = base.tokens_per_s > 0 ? best.tokens_per_s / base.tokens_per_s : 0.0;
    std::printf(
        "  why: vs the base policy (%.0f tokens/s, step %.3f ms, %s reserved): %.2fx the "
        "throughput, %s %s\n",
        base.tokens_per_s, base.metrics.step_time_ms,
        human_bytes(static_cast<double>(base.metrics.peak_reserved_bytes)).c_str(), gain,
        human_bytes(static_cast<double>(std::llabs(best.metrics.peak_reserved_bytes -
                                                   base.metrics.peak_reserved_bytes)))
            .c_str(),
        best.metrics.peak_reserved_bytes <= base.metrics.peak_reserved_bytes
            ? "less reserved memory"
            : "more reserved memory");
  }
  const std::vector<std::string> diffs = sim::policy_differences(base.policy, best.policy);
  if (diffs.empty()) std::printf("  the base policy is already the best\n");
  for (const std::string& d : diffs) std::printf("    %s\n", d.c_str());
}

}  // namespace

int cmd_sweep(int argc, char** argv) {
  Args args(argc, argv,
            plan_input_flags({{"grid"},
                              {"world"},
                              {"hw"},
                              {"mem-limit"},
                              {"threads"},
                              {"top"},
                              {"out"},
                              {"json", false},
                              {"quiet", false}}),
            false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  check_output_flag(args, "out");
  const std::string model = args.require("model");
  const std::string grid_path = args.require("grid");
  const std::vector<int64_t> worlds = parse_worlds(args.get("world", "8"));
  const sim::HardwareModel hw = hardware_flag(args);
  const int64_t mem_limit = memory_limit_flag(args);
  const int threads = static_cast<int>(args.get_int("threads", 0, 0, 1024));
  const auto top = static_cast<size_t>(args.get_int("top", 10, 1, 1 << 20));
  const bool quiet = args.has("quiet");
  sim::SweepGrid grid;
  size_t total = 0;
  try {
    grid = sim::load_grid(grid_path);
    // Counted before anything else: a grid over the limit is refused at once.
    total = sim::count_configurations(grid, worlds.size());
  } catch (const sim::Error& e) {
    throw UsageError(std::string("--grid: ") + e.what());
  }
  sim::SweepOptions options;
  options.worlds = worlds;
  options.base_policy = load_policy_doc(args);
  // The vocabulary is padded once, by the base policy (the grid may not vary
  // vocab_pad_to: plan/policy_keys.cpp); its key alone is read here, the
  // whole policy with each configuration.
  int64_t vocab_pad_to = 1;
  if (const auto it = options.base_policy.find("vocab_pad_to"); it != options.base_policy.end())
    vocab_pad_to = plan::policy_from_json({{"vocab_pad_to", *it}}).vocab_pad_to;
  const plan::Graph graph = plan::pad_vocabulary(plan::load_model(model), vocab_pad_to);
  options.memory_limit_bytes = mem_limit;
  options.threads = threads;
  options.keep = top;
  if (!quiet && total >= kLongSweepFrom)
    std::fprintf(stderr,
                 "shardscope sweep: warning: %s configurations (the limit is %s): a long sweep; "
                 "progress and the time left follow on stderr (--quiet: none)\n",
                 with_commas(static_cast<int64_t>(total)).c_str(),
                 with_commas(static_cast<int64_t>(sim::kMaxSweepConfigurations)).c_str());
  SweepProgress progress(total, stderr, isatty(STDERR_FILENO) != 0);
  if (!quiet) options.progress = [&](size_t done, size_t) { progress.update(done); };
  // --out and --json need every configuration with its Pareto mark, known
  // at the end: they are kept on disk meanwhile, not in memory.
  const bool json_out = args.has("json");
  const std::string out = args.get("out", "");
  std::unique_ptr<SweepSpill> spill;
  if (json_out || !out.empty()) spill = std::make_unique<SweepSpill>();
  sim::SweepSink sink;
  if (spill) sink = [&](const sim::SweepPoint& p) { spill->add(p); };

  const auto t0 = std::chrono::steady_clock::now();
  const sim::SweepSummary r = sim::sweep_stream(graph, grid, hw, options, sink);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t capacity = mem_limit > 0 ? mem_limit : hw.memory_bytes;

  std::set<size_t> front;
  for (const sim::SweepPoint& p : r.pareto) front.insert(p.config);
  // The sweep JSON less its "configs", streamed from the spill.
  nlohmann::json head = {
      {"model", model},
      {"hw", hw.name},
      {"cost_sources", cost_sources_json(hw)},
      {"worlds", worlds},
      {"memory_limit_bytes", capacity},
      {"configs", nullptr},
      {"rejected", r.rejected},
      {"best",
       r.best_simulated_index < 0 ? nlohmann::json() : nlohmann::json(r.best_simulated_index)}};
  if (r.has_baseline) head["baseline"] = baseline_json(r.baseline);
  auto write_json = [&](int indent, std::ostream& to) {
    write_json_streamed(
        head, indent,
        [&](const std::function<void(const nlohmann::json&)>& each) {
          spill->replay(grid, options.base_policy, front, [&](const sim::SweepPoint& p) {
            if (!p.rejected) each(config_json(p));
          });
        },
        to);
  };

  if (!out.empty()) {
    // io::OutputStream: a new or regular file is written beside the target and
    // renamed over it (a failed or interrupted write leaves any previous file
    // intact and no temporary), a device or FIFO is written in place.
    io::OutputStream f(out);
    const bool as_json = out.size() >= 5 && out.compare(out.size() - 5, 5, ".json") == 0;
    if (as_json) {
      write_json(1, f);
      f << '\n';
    } else {
      write_csv_header(grid, f);
      spill->replay(grid, options.base_policy, front,
                    [&](const sim::SweepPoint& p) { write_csv_row(p, grid, f); });
    }
    f.commit();
  }
  if (json_out) {
    std::fflush(stdout);
    write_json(2, std::cout);
    std::cout << '\n';
    std::cout.flush();
    return 0;
  }
  print_report(r, grid, model, hw.name, capacity, top, seconds);
  std::printf("%s\n", cost_sources_text(hw).c_str());
  return 0;
}

}  // namespace shardscope::cli
