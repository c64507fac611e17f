#include "profiler/cupti/process_trace.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <utility>

#include "traces/merge.h"

namespace shardscope::profiler {

namespace {

// A non-negative decimal integer below 2^31; false otherwise.
bool parse_non_negative(const char* text, int32_t* out) {
  if (!text || !*text) return false;
  int64_t n = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return false;
    n = n * 10 + (*c - '0');
    if (n > INT32_MAX) return false;
  }
  *out = static_cast<int32_t>(n);
  return true;
}

// The first of `names` that is set: (name, value); ("", nullptr) when none is.
std::pair<const char*, const char*> first_set(GetEnvFn getenv_fn,
                                              std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* value = getenv_fn(name)) return {name, value};
  return {"", nullptr};
}

int64_t first_time(const traces::RankTrace& r) {
  int64_t t = INT64_MAX;
  for (const traces::Event& e : r.events) t = std::min(t, e.start_ns);
  for (const traces::MemoryEvent& m : r.memory) t = std::min(t, m.time_ns);
  return t;
}

uint64_t count_of(const traces::Trace& t, const char* key) {
  auto it = t.meta.tool_versions.find(key);
  if (it == t.meta.tool_versions.end() || it->second.empty()) return 0;
  try {
    return std::stoull(it->second);
  } catch (const std::exception&) {
    return 0;  // not ours to validate: the count is informational
  }
}

std::string tool(const traces::Trace& t, const char* key) {
  auto it = t.meta.tool_versions.find(key);
  return it == t.meta.tool_versions.end() ? std::string() : it->second;
}

}  // namespace

ProcessIdentity process_identity_from_env(int64_t pid, GetEnvFn getenv_fn) {
  if (!getenv_fn) getenv_fn = [](const char* name) -> const char* { return std::getenv(name); };
  ProcessIdentity id;
  id.pid = pid;
  const auto [rank_var, rank_value] =
      first_set(getenv_fn, {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "LOCAL_RANK"});
  if (rank_value) {
    if (!parse_non_negative(rank_value, &id.rank))
      throw ProfilerError(std::string(rank_var) + "=\"" + rank_value +
                          "\" is not a non-negative integer: cannot tell this process's rank");
    id.rank_from = rank_var;
  }
  const auto [world_var, world_value] =
      first_set(getenv_fn, {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"});
  if (world_value && (!parse_non_negative(world_value, &id.world_size) || id.world_size < 1))
    throw ProfilerError(std::string(world_var) + "=\"" + world_value +
                        "\" is not a positive integer: cannot tell the world size");
  return id;
}

std::string process_trace_file_name(int64_t pid) {
  return std::to_string(pid) + ".trace";
}

traces::Trace process_trace(const Recording& recording, const ProcessIdentity& identity) {
  traces::Trace t;
  t.meta.source = traces::Source::unknown;
  t.meta.world_size = identity.world_size;
  t.meta.clock_alignment = "host-monotonic: CUPTI timestamps on this host's CLOCK_MONOTONIC";
  t.meta.tool_versions["recorder"] = "shardscope-inject (CUPTI)";
  t.meta.tool_versions["pid"] = std::to_string(identity.pid);
  t.meta.tool_versions["rank_from"] = identity.rank_from.empty() ? "none" : identity.rank_from;
  if (!recording.clock.empty()) t.meta.tool_versions["clock"] = recording.clock;
  traces::RankTrace& r = t.add_rank(identity.rank);
  append_recording(recording, TraceMapping{}, t, r);
  traces::sort_events(r);
  return t;
}

MergedProfile merge_process_traces(std::vector<ProcessTraceFile> processes) {
  if (processes.empty()) throw ProfilerError("merge: no process traces");
  for (const ProcessTraceFile& p : processes)
    if (p.trace.ranks.size() != 1)
      throw ProfilerError("merge: " + p.path + " holds " + std::to_string(p.trace.ranks.size()) +
                          " ranks; a process trace holds exactly one");

  MergedProfile out;
  auto has_work = [](const ProcessTraceFile& p) {
    return !p.trace.ranks[0].events.empty() || !p.trace.ranks[0].memory.empty();
  };
  const bool any_work = std::any_of(processes.begin(), processes.end(), has_work);
  std::vector<ProcessTraceFile*> kept;
  for (ProcessTraceFile& p : processes) {
    if (any_work && !has_work(p)) {
      ++out.processes_without_gpu_work;
      out.notes.push_back("left out " + p.path + " (pid " + tool(p.trace, "pid") +
                          "): CUDA initialised but no GPU work recorded");
      continue;
    }
    kept.push_back(&p);
  }
  // Claimed rank, then first activity, then pid: who keeps a contested rank.
  std::stable_sort(kept.begin(), kept.end(), [](ProcessTraceFile* a, ProcessTraceFile* b) {
    const traces::RankTrace& ra = a->trace.ranks[0];
    const traces::RankTrace& rb = b->trace.ranks[0];
    if (ra.rank != rb.rank) return ra.rank < rb.rank;
    const int64_t ta = first_time(ra), tb = first_time(rb);
    if (ta != tb) return ta < tb;
    return tool(a->trace, "pid") < tool(b->trace, "pid");
  });
  int32_t highest = -1;
  for (ProcessTraceFile* p : kept) highest = std::max(highest, p->trace.ranks[0].rank);
  // Extra claimants of a taken rank, numbered in the order of their first events.
  std::vector<ProcessTraceFile*> extra;
  std::map<int32_t, ProcessTraceFile*> owner;
  for (ProcessTraceFile* p : kept)
    if (!owner.emplace(p->trace.ranks[0].rank, p).second) extra.push_back(p);
  std::stable_sort(extra.begin(), extra.end(), [](ProcessTraceFile* a, ProcessTraceFile* b) {
    return first_time(a->trace.ranks[0]) < first_time(b->trace.ranks[0]);
  });
  for (ProcessTraceFile* p : extra) {
    traces::RankTrace& r = p->trace.ranks[0];
    const int32_t claimed = r.rank;
    r.rank = ++highest;
    out.notes.push_back("pid " + tool(p->trace, "pid") + " claimed rank " +
                        std::to_string(claimed) + " (from " + tool(p->trace, "rank_from") +
                        "), already taken by pid " + tool(owner[claimed]->trace, "pid") +
                        ": recorded as rank " + std::to_string(r.rank));
  }

  traces::Trace& t = out.trace;
  t.meta.source = traces::Source::unknown;
  t.meta.clock_alignment =
      "host-monotonic: every process's CUPTI timestamps on one host's CLOCK_MONOTONIC";
  t.meta.tool_versions["recorder"] = "shardscope-inject (CUPTI)";
  int32_t world = 0;
  uint64_t untimed = 0;
  for (ProcessTraceFile* p : kept) {
    const traces::Trace& pt = p->trace;
    traces::merge_ranks(t, pt);
    const int32_t rank = pt.ranks[0].rank;
    t.meta.tool_versions["process.rank" + std::to_string(rank)] =
        "pid " + tool(pt, "pid") + ", rank from " + tool(pt, "rank_from");
    out.dropped_records += count_of(pt, "cupti_dropped_records");
    if (t.meta.tool_versions.count("cupti") == 0 && !tool(pt, "cupti").empty())
      t.meta.tool_versions["cupti"] = tool(pt, "cupti");
    if (t.meta.tool_versions.count("clock") == 0 && !tool(pt, "clock").empty())
      t.meta.tool_versions["clock"] = tool(pt, "clock");
    untimed += count_of(pt, "cupti_untimed_records");
    // torch_ops.h's counts (profile --torch-shapes), summed over processes.
    for (const auto& [key, value] : pt.meta.tool_versions)
      if (key.rfind("torch_nvtx.", 0) == 0)
        t.meta.tool_versions[key] =
            std::to_string(count_of(t, key.c_str()) + count_of(pt, key.c_str()));
    if (t.meta.hardware.empty()) t.meta.hardware = pt.meta.hardware;
    world = std::max(world, pt.meta.world_size);
    ++out.processes;
  }
  t.meta.tool_versions["cupti_dropped_records"] = std::to_string(out.dropped_records);
  if (untimed > 0) t.meta.tool_versions["cupti_untimed_records"] = std::to_string(untimed);
  std::sort(t.ranks.begin(), t.ranks.end(),
            [](const traces::RankTrace& a, const traces::RankTrace& b) { return a.rank < b.rank; });
  t.meta.world_size = std::max(world, static_cast<int32_t>(t.ranks.size()));
  traces::validate(t, "merged profile");
  return out;
}

}  // namespace shardscope::profiler
