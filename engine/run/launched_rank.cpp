// One rank of a launched world (Role::rank): the rendezvous, the training,
// every rank's trace gathered to rank 0 through the TCP store with its clock
// offset, and rank 0's result.
#include <chrono>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>

#include "engine/exec/exec_error.h"
#include "engine/run/run_internal.h"
#include "traces/binary_format.h"
#include "traces/merge.h"

namespace shardscope::engine::run::detail {

namespace {

constexpr size_t kChunk = size_t{3} << 20;  // store values stay under its 4 MiB message limit

// Sends this rank's trace and clock offset to rank 0 through the store.
void publish_trace(launch::TcpStore& store, int rank, const traces::Trace& trace) {
  const std::string bytes = traces::trace_to_binary(trace);
  const std::string me = std::to_string(rank);
  const size_t chunks = (bytes.size() + kChunk - 1) / kChunk;
  for (size_t i = 0; i < chunks; ++i)
    store.set("trace/" + me + "/" + std::to_string(i), bytes.substr(i * kChunk, kChunk));
  store.set("trace/" + me + "/chunks", std::to_string(chunks));
  store.set("offset/" + me, std::to_string(store.clock_offset_ns()));
}

// Rank 0: every rank's trace from the store, on rank 0's store clock.
traces::Trace gather_traces(launch::TcpStore& store, int world, const traces::Metadata& meta) {
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

// Rank 0's result for the launcher (run.h: why a file).
void hand_off(const std::string& dir, const RunResult& result) {
  const std::string path = dir + "/result.json";
  std::ofstream file(path);
  file << to_json(result).dump();
  file.close();
  if (!file) throw std::runtime_error("rank 0: cannot write its result to " + path);
}

// This rank's error for the launcher (store key "error/<rank>"), cut to fit
// well inside a store message (4 MiB): an error quoting a large file must
// still reach the launcher as itself. A store that cannot take it (the
// launcher gone) must not replace the error being reported.
void leave_error(launch::TcpStore& store, int rank, const std::string& message) {
  constexpr size_t kMaxErrorBytes = 64 << 10;
  std::string text = message;
  if (text.size() > kMaxErrorBytes)
    text = text.substr(0, kMaxErrorBytes) + "... (" + std::to_string(text.size() - kMaxErrorBytes) +
           " more bytes of the message cut)";
  try {
    store.set("error/" + std::to_string(rank), text);
  } catch (const std::exception&) {
    // The rank's own stderr still carries the error.
  }
}

}  // namespace

RunResult run_launched_rank(const RunRequest& request, const RankTrainer& train) {
  using namespace std::chrono_literals;
  if (!request.env) throw std::invalid_argument("engine::run: Role::rank needs request.env");
  const launch::RankEnv& env = *request.env;
  launch::Rendezvous rv = launch::rendezvous(env, request.timeout);
  RankOutcome out;
  try {
    if (request.rank_error) std::rethrow_exception(request.rank_error);
    out = train(rv);
  } catch (const exec::NumericsError& e) {
    // Every rank stopped at the same step: each exits 1; rank 0 reports
    // (or hands the report to the launcher).
    leave_error(*rv.store, env.rank, e.what());
    RunResult failed = numerics_failure(request, e);
    if (env.rank != 0) failed.has_report = false;
    if (env.rank == 0 && !request.handoff_dir.empty()) {
      hand_off(request.handoff_dir, failed);
      failed.has_report = false;
    }
    // No rank exits (and has the launcher stop the others) before rank 0's
    // report is written.
    rv.store->barrier("numerics");
    return failed;
  } catch (const std::exception& e) {
    leave_error(*rv.store, env.rank, e.what());
    throw;
  }
  publish_trace(*rv.store, env.rank, out.run.trace);
  RunResult result;
  if (env.rank == 0) {
    traces::Trace merged = gather_traces(*rv.store, env.world_size, out.run.trace.meta);
    result = make_result(request, merged, out.run, out.tokens_per_step, out.report);
    if (!request.handoff_dir.empty()) {
      hand_off(request.handoff_dir, result);  // the launcher reports (run.h: why a file)
      result = RunResult{};
    }
  }
  rv.store->barrier("done");  // rank 0's server stays up until every rank has read
  return result;
}

}  // namespace shardscope::engine::run::detail
