// `shardscope sweep`: what-if policy sweep over a grid of policy values and
// world sizes, simulated on a thread pool (sim/sweep.h), ranked, with the
// Pareto front of throughput (tokens/s) vs peak reserved memory and a recommendation.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_inputs.h"
#include "cli/sim_flags.h"
#include "plan/models.h"
#include "sim/sweep.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope sweep --model M --grid G [--world N[,N...]] [--policy P] [--set K=V]...\n"
    "                 [--hw H] [--mem-limit BYTES] [--threads T] [--top K] [--out FILE] "
    "[--json]\n\n"
    "  --grid G           grid JSON: policy keys (dotted for nested) -> arrays of values\n"
    "  --world N,...      world sizes to sweep (default 8)\n"
    "  --policy/--set     the base policy the grid's values are applied to\n"
    "  --hw H             h100-sxm (default), h200-sxm, a100-sxm, cpu-local or a hardware JSON\n"
    "  --mem-limit BYTES  device memory a configuration must fit (default: the hardware's)\n"
    "  --threads T        worker threads (default: every core)\n"
    "  --top K            rows of the ranked table (default 10)\n"
    "  --out FILE         every configuration: CSV, or JSON when FILE ends in .json\n"
    "  --json             print the sweep JSON (ARCHITECTURE.md \"Output contracts\")";

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

// A configuration that does not fit stopped at the failed allocation: its
// times and throughput predict nothing and are written as null (CSV: empty);
// its peaks are those up to the failure. A rejected one was never simulated.
nlohmann::json time_or_null(bool timed, double v) {
  return timed ? nlohmann::json(v) : nlohmann::json();
}

nlohmann::json metrics_json(const sim::SweepPoint& p) {
  if (p.rejected) return nlohmann::json();
  const traces::MetricValues& m = p.metrics;
  return {{"step_time_ms", time_or_null(p.fits, m.step_time_ms)},
          {"peak_allocated_bytes", m.peak_allocated_bytes},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"compute_ms", time_or_null(p.fits, m.compute_ms)},
          {"comm_ms", time_or_null(p.fits, m.comm_ms)},
          {"exposed_comm_ms", time_or_null(p.fits, m.exposed_comm_ms)},
          {"overlap", time_or_null(p.fits, m.overlap)},
          {"idle_ms", time_or_null(p.fits, m.idle_ms)}};
}

// The configurations simulated (rejected ones are counted, not listed), and
// the index of the best among them.
nlohmann::json sweep_json(const sim::SweepResult& r, const std::string& model,
                          const std::string& hw, const std::vector<int64_t>& worlds,
                          int64_t mem_limit) {
  nlohmann::json configs = nlohmann::json::array();
  int64_t best = -1;
  for (const sim::SweepPoint& p : r.points) {
    if (p.rejected) continue;
    if (static_cast<int64_t>(p.config) == r.best) best = static_cast<int64_t>(configs.size());
    nlohmann::json c = {{"world", p.world},
                        {"policy", p.policy},
                        {"metrics", metrics_json(p)},
                        {"fits", p.fits},
                        {"pareto", p.pareto},
                        {"tokens_per_step", p.tokens_per_step},
                        {"tokens_per_s", time_or_null(p.fits, p.tokens_per_s)}};
    if (!p.fits) c["oom_buffer"] = p.oom_buffer;
    configs.push_back(std::move(c));
  }
  nlohmann::json j = {{"model", model},
                      {"hw", hw},
                      {"worlds", worlds},
                      {"memory_limit_bytes", mem_limit},
                      {"configs", configs},
                      {"rejected", r.rejected},
                      {"best", best < 0 ? nlohmann::json() : nlohmann::json(best)}};
  if (r.has_baseline) {
    const sim::SweepPoint& b = r.baseline;
    j["baseline"] = {{"world", b.world},
                     {"policy", b.policy},
                     {"rejected", b.rejected},
                     {"fits", b.fits},
                     {"tokens_per_step", b.tokens_per_step},
                     {"tokens_per_s", time_or_null(b.fits, b.tokens_per_s)},
                     {"metrics", metrics_json(b)}};
    if (!b.rejected && !b.fits) j["baseline"]["oom_buffer"] = b.oom_buffer;
  }
  return j;
}

// The value at a dotted key of a policy document, null when absent.
nlohmann::json value_at(const nlohmann::json& doc, const std::string& dotted) {
  std::string p = "/" + dotted;
  for (char& c : p)
    if (c == '.') c = '/';
  const nlohmann::json::json_pointer ptr(p);
  return doc.contains(ptr) ? doc.at(ptr) : nlohmann::json();
}

std::string short_value(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void write_csv(const sim::SweepResult& r, const sim::SweepGrid& grid, std::ostream& out) {
  out << "config,world";
  for (const sim::SweepAxis& a : grid.axes) out << ',' << csv_quote(a.key);
  out << ",rejected,fits,pareto,tokens_per_step,tokens_per_s,step_time_ms,peak_allocated_bytes,"
         "peak_reserved_bytes,compute_ms,comm_ms,exposed_comm_ms,overlap,idle_ms,oom_buffer,"
         "policy\n";
  // Empty fields: a rejected configuration has no metrics; one that does not
  // fit has its peaks (up to the failure) and no time or throughput.
  auto field = [&](bool present, const char* format, double v) {
    char buf[64] = "";
    if (present) std::snprintf(buf, sizeof buf, format, v);
    out << ',' << buf;
  };
  for (const sim::SweepPoint& p : r.points) {
    out << p.config << ',' << p.world;
    for (const sim::SweepAxis& a : grid.axes)
      out << ',' << csv_quote(short_value(value_at(p.policy, a.key)));
    const traces::MetricValues& m = p.metrics;
    const bool simulated = !p.rejected;
    const bool timed = simulated && p.fits;
    out << ',' << (p.rejected ? 1 : 0) << ',' << (p.fits ? 1 : 0) << ',' << (p.pareto ? 1 : 0);
    out << ',';
    if (simulated) out << p.tokens_per_step;
    field(timed, "%.3f", p.tokens_per_s);
    field(timed, "%.6f", m.step_time_ms);
    out << ',';
    if (simulated) out << m.peak_allocated_bytes;
    out << ',';
    if (simulated) out << m.peak_reserved_bytes;
    field(timed, "%.6f", m.compute_ms);
    field(timed, "%.6f", m.comm_ms);
    field(timed, "%.6f", m.exposed_comm_ms);
    field(timed, "%.6f", m.overlap);
    field(timed, "%.6f", m.idle_ms);
    out << ',';
    if (simulated && !p.fits) out << csv_quote(p.oom_buffer);
    out << ',' << csv_quote(p.policy.dump()) << '\n';
  }
}

// "fsdp1 / bf16 / true": the grid values of a configuration, short.
std::string axis_values(const sim::SweepPoint& p, const sim::SweepGrid& grid) {
  std::string s;
  for (const sim::SweepAxis& a : grid.axes) {
    if (!s.empty()) s += " ";
    s += a.key + "=" + short_value(value_at(p.policy, a.key));
  }
  return s.empty() ? "(base policy)" : s;
}

void print_report(const sim::SweepResult& r, const sim::SweepGrid& grid, const std::string& model,
                  const std::string& hw, int64_t capacity, size_t top, double seconds) {
  const size_t total = r.points.size();
  const size_t do_not_fit = total - r.rejected - r.ranking.size();
  std::printf(
      "sweep of %s on %s: %zu configurations, %zu rejected by validation, %zu fit in %s, %zu do "
      "not fit\n",
      model.c_str(), hw.c_str(), total, r.rejected, r.ranking.size(),
      human_bytes(static_cast<double>(capacity)).c_str(), do_not_fit);
  std::printf("simulated in %.2f s (%.0f configurations/s, %s events)\n", seconds,
              seconds > 0 ? static_cast<double>(total) / seconds : 0.0,
              with_commas(static_cast<int64_t>(r.sim_events)).c_str());
  if (r.rejected) {
    // The reasons, most frequent first (validation names the key).
    std::map<std::string, size_t> reasons;
    for (const sim::SweepPoint& p : r.points)
      if (p.rejected) ++reasons[p.reason];
    std::vector<std::pair<size_t, std::string>> by_count;
    for (const auto& [reason, n] : reasons) by_count.emplace_back(n, reason);
    std::stable_sort(by_count.begin(), by_count.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::printf("rejected:\n");
    for (size_t i = 0; i < by_count.size() && i < 5; ++i)
      std::printf("  %6zu x %s\n", by_count[i].first, by_count[i].second.c_str());
    if (by_count.size() > 5) std::printf("  ... %zu more reasons\n", by_count.size() - 5);
  }
  if (do_not_fit) {
    // No numbers but why: a step that runs out of memory predicts no time.
    std::printf(
        "\ndo not fit in %s (out of memory: no step time or throughput is predicted):\n"
        "  %6s %6s  %-12s  %s\n",
        human_bytes(static_cast<double>(capacity)).c_str(), "config", "world", "", "configuration");
    size_t shown = 0;
    for (const sim::SweepPoint& p : r.points) {
      if (p.rejected || p.fits) continue;
      if (shown++ == top) {
        std::printf("  ... %zu more (--out FILE lists every configuration)\n", do_not_fit - top);
        break;
      }
      std::printf("  %6zu %6lld  does not fit  %s  (out of memory at '%s')\n", p.config,
                  static_cast<long long>(p.world), axis_values(p, grid).c_str(),
                  p.oom_buffer.c_str());
    }
  }
  if (r.ranking.empty()) {
    std::printf("\nno configuration fits in %s\n",
                human_bytes(static_cast<double>(capacity)).c_str());
    return;
  }
  std::printf(
      "\nhighest throughput that fit (tokens/s = world x batch x seq x accum / step):\n"
      "  %4s %6s %12s %12s %12s %12s %8s  %s\n",
      "#", "world", "tokens/s", "step ms", "reserved", "allocated", "overlap", "configuration");
  for (size_t k = 0; k < r.ranking.size() && k < top; ++k) {
    const sim::SweepPoint& p = r.points[r.ranking[k]];
    std::printf("  %4zu %6lld %12.0f %12.3f %12s %12s %7.1f%%  %s%s\n", k + 1,
                static_cast<long long>(p.world), p.tokens_per_s, p.metrics.step_time_ms,
                human_bytes(static_cast<double>(p.metrics.peak_reserved_bytes)).c_str(),
                human_bytes(static_cast<double>(p.metrics.peak_allocated_bytes)).c_str(),
                100.0 * p.metrics.overlap, axis_values(p, grid).c_str(),
                p.pareto ? "  [pareto]" : "");
  }
  std::printf("\nPareto front (tokens/s vs peak reserved):\n");
  for (size_t i : r.ranking) {
    const sim::SweepPoint& p = r.points[i];
    if (!p.pareto) continue;
    std::printf("  %12.0f tokens/s %12.3f ms %12s  world %lld  %s\n", p.tokens_per_s,
                p.metrics.step_time_ms,
                human_bytes(static_cast<double>(p.metrics.peak_reserved_bytes)).c_str(),
                static_cast<long long>(p.world), axis_values(p, grid).c_str());
  }
  const sim::SweepPoint& best = r.points[static_cast<size_t>(r.best)];
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
                              {"json", false}}),
            false);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  const std::string model = args.require("model");
  const std::string grid_path = args.require("grid");
  const std::vector<int64_t> worlds = parse_worlds(args.get("world", "8"));
  const sim::HardwareModel hw = hardware_flag(args);
  const int64_t mem_limit = memory_limit_flag(args);
  const int threads = static_cast<int>(args.get_int("threads", 0, 0, 1024));
  const auto top = static_cast<size_t>(args.get_int("top", 10, 1, 1 << 20));
  sim::SweepGrid grid;
  try {
    grid = sim::load_grid(grid_path);
  } catch (const sim::Error& e) {
    throw UsageError(std::string("--grid: ") + e.what());
  }
  const plan::Graph graph = plan::load_model(model);

  sim::SweepOptions options;
  options.worlds = worlds;
  options.base_policy = load_policy_doc(args);
  options.memory_limit_bytes = mem_limit;
  options.threads = threads;
  const bool bar = isatty(STDERR_FILENO) != 0;
  size_t last_shown = 0;
  if (bar) {
    options.progress = [&](size_t done, size_t total) {
      if (done != total && done - last_shown < std::max<size_t>(1, total / 100)) return;
      last_shown = done;
      const int width = 40;
      const int filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\r[%s%s] %zu/%zu",
                   std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), ' ').c_str(), done, total);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  const sim::SweepResult r = sim::run_sweep(graph, grid, hw, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t capacity = mem_limit > 0 ? mem_limit : hw.memory_bytes;

  if (args.has("out")) {
    // Written beside the target and renamed over it: a failed write leaves
    // any previous file intact.
    const std::string out = args.get("out");
    const std::string tmp = out + ".tmp";
    {
      std::ofstream f(tmp);
      if (!f) throw UsageError("--out: cannot write '" + tmp + "'");
      const bool as_json = out.size() >= 5 && out.compare(out.size() - 5, 5, ".json") == 0;
      if (as_json)
        f << sweep_json(r, model, hw.name, worlds, capacity).dump(1) << '\n';
      else
        write_csv(r, grid, f);
      if (!f.flush()) {
        std::remove(tmp.c_str());
        throw UsageError("--out: writing '" + out + "' failed");
      }
    }
    if (std::rename(tmp.c_str(), out.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw UsageError("--out: cannot replace '" + out + "'");
    }
  }
  if (args.has("json")) {
    std::printf("%s\n", sweep_json(r, model, hw.name, worlds, capacity).dump(2).c_str());
    return 0;
  }
  print_report(r, grid, model, hw.name, capacity, top, seconds);
  return 0;
}

}  // namespace shardscope::cli
