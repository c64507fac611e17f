#include "cli/run_output.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "cli/plan_inputs.h"
#include "engine/exec/numerics_check.h"

namespace shardscope::cli {

namespace {

// A number of the metrics JSON; NaN for null (a NaN handed from rank 0 to the
// launcher comes back as null).
double num(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return 0.0;
  if (it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  return it->get<double>();
}

std::string summary_text(const nlohmann::json& j, int64_t persistent, int64_t peak) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "step time %.2f ms (median after the first step), %.0f tokens/s\n"
                "peak allocated %s per rank (persistent %s), peak reserved %s\n"
                "compute %.2f ms, communication %.2f ms, exposed %.2f ms, overlap %.1f%%\n",
                num(j, "step_time_ms"), num(j, "tokens_per_s"),
                human_bytes(static_cast<double>(peak)).c_str(),
                human_bytes(static_cast<double>(persistent)).c_str(),
                human_bytes(num(j, "peak_reserved_bytes")).c_str(), num(j, "compute_ms"),
                num(j, "comm_ms"), num(j, "exposed_comm_ms"), 100 * num(j, "overlap"));
  return buf;
}

}  // namespace

namespace {

// "6.25384", or "nan" / "inf" / "-inf" (printf's NaN carries its sign bit: "-nan").
std::string loss_text(double loss) {
  if (!std::isfinite(loss)) return engine::exec::non_finite_name(loss);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.5f", loss);
  return buf;
}

}  // namespace

void print_progress(const engine::run::StepProgress& p) {
  const engine::exec::StepReport& r = p.step;
  const int64_t steps = p.steps;
  const double tps = r.seconds > 0 ? static_cast<double>(p.tokens_per_step) / r.seconds : 0.0;
  // r.step counts the steps a loaded checkpoint had done (--load).
  if (r.index == 0 && r.step > 0)
    std::fprintf(stderr,
                 "resumed from step %" PRId64 " (--load): steps %" PRId64 "..%" PRId64 " follow\n",
                 r.step, r.step + 1, r.step + steps);
  if (isatty(STDERR_FILENO)) {
    const int width = 24;
    const auto filled = static_cast<int>(width * (r.index + 1) / std::max<int64_t>(steps, 1));
    std::string bar(static_cast<size_t>(std::min(filled, width)), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] step %" PRId64 "/%" PRId64 "  loss %s  %.0f tokens/s%s",
                 bar.c_str(), r.index + 1, steps, loss_text(r.loss).c_str(), tps,
                 r.skipped ? " (skipped)" : "");
    if (r.index + 1 >= steps) std::fputc('\n', stderr);
    return;
  }
  std::fprintf(stderr, "step %" PRId64 "/%" PRId64 "  loss %s  %.1f ms  %.0f tokens/s%s\n",
               r.index + 1, steps, loss_text(r.loss).c_str(), r.seconds * 1e3, tps,
               r.skipped ? "  (overflow: step skipped)" : "");
}

namespace {

// Mixture of experts: per routed layer, the first measured rank's fewest and
// most tokens per expert in the last step against the stated balance's (rank
// 0; under emulated peers the one emulated rank, the only one measured).
std::string moe_text(const nlohmann::json& metrics) {
  const auto it = metrics.find("moe_routing");
  if (it == metrics.end() || !it->is_object()) return "";
  const auto emulated = metrics.find("emulated");
  const int64_t rank =
      emulated != metrics.end() && emulated->is_object() ? emulated->value("rank", int64_t{0}) : 0;
  std::string out = "experts (" + it->value("routing", std::string("?")) +
                    " routing): tokens per expert in the last step, rank " + std::to_string(rank) +
                    ", vs assumed\n";
  for (const nlohmann::json& layer : it->at("layers")) {
    const std::vector<int64_t> got = layer.at("measured").at(0).get<std::vector<int64_t>>();
    const std::vector<int64_t> want = layer.at("assumed").get<std::vector<int64_t>>();
    if (got.empty() || want.empty()) continue;
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "  %s: measured %" PRId64 "..%" PRId64 ", assumed %" PRId64 "..%" PRId64 "\n",
        layer.at("router").get<std::string>().c_str(), *std::min_element(got.begin(), got.end()),
        *std::max_element(got.begin(), got.end()), *std::min_element(want.begin(), want.end()),
        *std::max_element(want.begin(), want.end()));
    out += buf;
  }
  return out;
}

}  // namespace

std::string format_result(const engine::run::RunResult& r, bool json) {
  if (json) return r.metrics.dump(2) + "\n";
  return r.notes + summary_text(r.metrics, r.persistent_bytes, r.peak_allocated_bytes) +
         moe_text(r.metrics);
}

int print_result(const engine::run::RunResult& r, bool json) {
  if (r.exit_code != 0) {
    std::fprintf(stderr, "error: %s\n", r.error.c_str());
    // A run stopped by a non-finite loss still reports, without null numbers.
    if (json && r.has_report && r.failure.is_object())
      std::fputs((r.failure.dump(2) + "\n").c_str(), stdout);
    return r.exit_code;
  }
  if (r.has_report) std::fputs(format_result(r, json).c_str(), stdout);
  return 0;
}

}  // namespace shardscope::cli
