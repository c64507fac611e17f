#include "cli/run_common.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "plan/policy.h"
#include "traces/binary_format.h"
#include "traces/merge.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr size_t kChunk = size_t{3} << 20;  // store values stay under its 4 MiB message limit

// Metrics of the merged trace (median over steps 2..S, ARCHITECTURE.md) plus the run's figures.
nlohmann::json result_json(const traces::Trace& trace, const std::vector<double>& losses,
                           const std::vector<double>& step_seconds, int64_t tokens) {
  nlohmann::json j = traces::metrics_to_json(traces::compute_metrics(trace));
  j["losses"] = losses;
  std::vector<double> s(step_seconds.begin() + (step_seconds.size() > 1 ? 1 : 0),
                        step_seconds.end());
  std::sort(s.begin(), s.end());
  const double median = s.empty() ? 0 : s[s.size() / 2];
  j["tokens_per_s"] = median > 0 ? static_cast<double>(tokens) / median : 0.0;
  j["tokens_per_step"] = tokens;
  return j;
}

std::string summary_text(const nlohmann::json& j, int64_t persistent, int64_t peak) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "step time %.2f ms (median after the first step), %.0f tokens/s\n"
                "peak allocated %s per rank (persistent %s), peak reserved %s\n"
                "compute %.2f ms, communication %.2f ms, exposed %.2f ms, overlap %.1f%%\n",
                j.value("step_time_ms", 0.0), j.value("tokens_per_s", 0.0),
                human_bytes(static_cast<double>(peak)).c_str(),
                human_bytes(static_cast<double>(persistent)).c_str(),
                human_bytes(j.value("peak_reserved_bytes", 0.0)).c_str(),
                j.value("compute_ms", 0.0), j.value("comm_ms", 0.0),
                j.value("exposed_comm_ms", 0.0), 100 * j.value("overlap", 0.0));
  return buf;
}

// Sends this rank's trace and clock offset to rank 0 through the store.
void publish_trace(engine::launch::TcpStore& store, int rank, const traces::Trace& trace) {
  const std::string bytes = traces::trace_to_binary(trace);
  const std::string me = std::to_string(rank);
  const size_t chunks = (bytes.size() + kChunk - 1) / kChunk;
  for (size_t i = 0; i < chunks; ++i)
    store.set("trace/" + me + "/" + std::to_string(i), bytes.substr(i * kChunk, kChunk));
  store.set("trace/" + me + "/chunks", std::to_string(chunks));
  store.set("offset/" + me, std::to_string(store.clock_offset_ns()));
}

// Rank 0: every rank's trace from the store, on rank 0's store clock.
traces::Trace gather_traces(engine::launch::TcpStore& store, int world,
                            const traces::Metadata& meta) {
  traces::Trace merged;
  merged.meta = meta;
  merged.meta.clock_alignment = "tcp store (min-RTT offset to rank 0's store clock)";
  for (int r = 0; r < world; ++r) {
    const std::string k = std::to_string(r);
    const size_t n = std::stoul(store.get("trace/" + k + "/chunks"));
    std::string data;
    for (size_t i = 0; i < n; ++i) data += store.get("trace/" + k + "/" + std::to_string(i));
    const traces::Trace t = traces::read_trace_binary(data.data(), data.size(), "rank " + k);
    traces::merge_ranks(merged, t, std::stoll(store.get("offset/" + k)));
  }
  return merged;
}

void print_progress(const engine::exec::StepReport& r, int64_t steps, int64_t tokens) {
  const double tps = r.seconds > 0 ? static_cast<double>(tokens) / r.seconds : 0.0;
  if (isatty(STDERR_FILENO)) {
    const int width = 24;
    const auto filled = static_cast<int>(width * (r.index + 1) / std::max<int64_t>(steps, 1));
    std::string bar(static_cast<size_t>(std::min(filled, width)), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] step %" PRId64 "/%" PRId64 "  loss %.5f  %.0f tokens/s%s",
                 bar.c_str(), r.index + 1, steps, r.loss, tps, r.skipped ? " (skipped)" : "");
    if (r.index + 1 >= steps) std::fputc('\n', stderr);
    return;
  }
  std::fprintf(stderr, "step %" PRId64 "/%" PRId64 "  loss %.5f  %.1f ms  %.0f tokens/s%s\n",
               r.index + 1, steps, r.loss, r.seconds * 1e3, tps,
               r.skipped ? "  (overflow: step skipped)" : "");
}

}  // namespace

int64_t tokens_per_step(const PlanInputs& in, int world) {
  const int64_t t = in.graph.vocab_size > 0 ? plan::resolve_seq_len(in.policy, in.graph) : 1;
  return in.policy.batch_size * t * world * in.policy.grad_accum_steps;
}

engine::exec::TrainHooks progress_hooks(int64_t steps, int64_t tokens) {
  engine::exec::TrainHooks hooks;
  hooks.on_step = [steps, tokens](const engine::exec::StepReport& r) {
    print_progress(r, steps, tokens);
  };
  return hooks;
}

std::string finish_run(const Args& args, traces::Trace& merged, const engine::exec::RankRun& r0,
                       int64_t tokens, const RunReport& report) {
  merged.meta.source = report.source;
  if (!report.hardware.empty()) merged.meta.hardware = report.hardware;
  if (args.has("trace")) traces::save_trace(merged, args.get("trace"));
  nlohmann::json j = result_json(merged, r0.losses, r0.step_seconds, tokens);
  for (const auto& [key, value] : report.extra.items()) j[key] = value;
  if (args.has("json")) return j.dump(2) + "\n";
  return report.summary_lines + summary_text(j, r0.persistent_bytes, r0.peak_allocated_bytes);
}

int run_launched_rank(const Args& args, const engine::launch::RankEnv& env,
                      const RankTrainer& train) {
  using namespace std::chrono_literals;
  engine::launch::Rendezvous rv = engine::launch::rendezvous(env, 60s);
  RankOutcome out;
  try {
    out = train(rv);
  } catch (const std::exception& e) {
    rv.store->set("error/" + std::to_string(env.rank), e.what());
    throw;
  }
  publish_trace(*rv.store, env.rank, out.run.trace);
  if (env.rank == 0) {
    traces::Trace merged = gather_traces(*rv.store, env.world_size, out.run.trace.meta);
    const std::string text = finish_run(args, merged, out.run, out.tokens_per_step, out.report);
    if (args.has("run-dir")) {
      std::ofstream(args.get("run-dir") + "/result.txt") << text;
    } else {
      std::fputs(text.c_str(), stdout);
    }
  }
  rv.store->barrier("done");  // rank 0's server stays up until every rank has read
  return 0;
}

int launch_ranks(int argc, char** argv, int world) {
  char dir_template[] = "/tmp/shardscope-run-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) throw std::runtime_error("cannot create a run directory in /tmp");
  engine::launch::LaunchOptions lo;
  lo.nproc = world;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  self[n] = '\0';
  lo.argv.push_back(self);
  for (int i = 0; i < argc; ++i) lo.argv.push_back(argv[i]);  // argv[0] is "run"
  lo.argv.push_back("--run-dir");
  lo.argv.push_back(dir);
  const engine::launch::LaunchResult res = engine::launch::launch(lo);
  const std::string result_file = std::string(dir) + "/result.txt";
  if (res.exit_code != 0) {
    std::remove(result_file.c_str());
    rmdir(dir);
    std::fprintf(stderr, "error: %s\n", res.message.c_str());
    return res.exit_code;
  }
  std::ifstream result(result_file);
  std::stringstream ss;
  ss << result.rdbuf();
  std::fputs(ss.str().c_str(), stdout);
  std::remove(result_file.c_str());
  rmdir(dir);
  return 0;
}

}  // namespace shardscope::cli
