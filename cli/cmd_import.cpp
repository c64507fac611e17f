// shardscope import --kineto FILE... | --memory-snapshot FILE.pickle...
// --out OUT: PyTorch profiler traces (one per rank) and/or allocator
// snapshots (one per rank) into a shardscope trace.
#include <algorithm>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "traces/kineto_import.h"
#include "traces/memory_snapshot.h"
#include "traces/trace_io.h"

namespace shardscope::cli {

namespace {

constexpr const char* kUsage =
    "usage: shardscope import [--kineto FILE...] [--memory-snapshot FILE.pickle...] --out OUT\n\n"
    "Imports PyTorch profiler (Kineto) JSON traces, .json or .json.gz, one per\n"
    "rank (rank from distributedInfo.rank, else the position on the command\n"
    "line): device kernels (CUDA, ROCm, MTIA), NCCL collectives, memcpy/memset,\n"
    "host ops and runtime calls linked to the kernels they launched (FLOPs from\n"
    "record_shapes), [memory] events and ProfilerStep#N steps (docs/traces.md).\n"
    "Imports PyTorch memory snapshots (torch.cuda.memory._dump_snapshot pickles,\n"
    "plain data only), one per rank in command-line order: the allocator's\n"
    "alloc/free and segment actions as memory records; with --kineto, they\n"
    "replace the memory records of the Kineto ranks, in rank order.\n\n"
    "  --kineto FILE           a Kineto JSON; more files may follow it (or repeat --kineto)\n"
    "  --memory-snapshot FILE  a snapshot pickle (repeat the flag for more ranks)\n"
    "  --out OUT               the trace to write: native JSON when OUT ends in .json,\n"
    "                          else the binary form\n";

void print_snapshot_summary(const std::string& file, const traces::SnapshotImportSummary& s) {
  std::printf(
      "  %s: device %d, %lld segments, %lld trace entries (%lld alloc, %lld free_requested, "
      "%lld segment actions, %lld without a record); allocated %lld -> %lld bytes, reserved "
      "%lld -> %lld bytes\n",
      file.c_str(), s.device, static_cast<long long>(s.segments),
      static_cast<long long>(s.trace_entries), static_cast<long long>(s.allocations),
      static_cast<long long>(s.frees), static_cast<long long>(s.segment_events),
      static_cast<long long>(s.skipped), static_cast<long long>(s.initial_allocated),
      static_cast<long long>(s.final_allocated), static_cast<long long>(s.initial_reserved),
      static_cast<long long>(s.final_reserved));
  for (int32_t d : s.other_devices)
    std::printf("  %s: device %d not imported (one device per rank)\n", file.c_str(), d);
}

void save_import(const traces::Trace& trace, const std::string& out,
                 const traces::KinetoImportSummary& summary) {
  traces::save_trace(trace, out);
  std::printf("wrote %s (%zu ranks, %zu events)\n", out.c_str(), trace.ranks.size(),
              trace.event_count());
  std::printf(
      "  device events %lld (%lld linked to the host call that launched them, %lld not), host "
      "events %lld, kernels with FLOPs from input shapes %lld, memory records %lld\n",
      static_cast<long long>(summary.device_events), static_cast<long long>(summary.launch_links),
      static_cast<long long>(summary.unlinked_device), static_cast<long long>(summary.host_events),
      static_cast<long long>(summary.kernels_with_flops),
      static_cast<long long>(summary.memory_records));
  if (!summary.skipped.empty())
    std::printf("  not imported (Kineto categories without device or launch work): %s\n",
                traces::describe_skipped(summary.skipped).c_str());
}

}  // namespace

int cmd_import(int argc, char** argv) {
  Args args(argc, argv,
            {{"kineto", true, true}, {"memory-snapshot", true, true}, {"out", true, false}}, true);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  check_output_flag(args, "out");
  std::vector<std::string> files = args.all("kineto");
  const std::vector<std::string> snapshots = args.all("memory-snapshot");
  if (files.empty() && snapshots.empty())
    throw UsageError("missing --kineto FILE or --memory-snapshot FILE");
  for (const std::string& p : args.positionals()) {
    if (files.empty()) throw UsageError("'" + p + "': extra files follow --kineto only");
    files.push_back(p);
  }
  const std::string out = args.require("out");

  if (files.empty()) {
    std::vector<traces::SnapshotImportSummary> summaries;
    const traces::Trace trace = traces::import_memory_snapshots(snapshots, &summaries);
    traces::save_trace(trace, out);
    std::printf("wrote %s (%zu ranks, memory records only)\n", out.c_str(), trace.ranks.size());
    for (size_t i = 0; i < snapshots.size(); ++i)
      print_snapshot_summary(snapshots[i], summaries[i]);
    return 0;
  }

  traces::KinetoImportSummary summary;
  traces::Trace trace = traces::import_kineto(files, &summary);
  if (!snapshots.empty()) {
    if (snapshots.size() != trace.ranks.size())
      throw UsageError(std::to_string(snapshots.size()) + " memory snapshot(s) for " +
                       std::to_string(trace.ranks.size()) +
                       " Kineto rank(s): give one snapshot per rank");
    std::vector<traces::RankTrace*> ranks;
    for (traces::RankTrace& r : trace.ranks) ranks.push_back(&r);
    std::sort(
        ranks.begin(), ranks.end(),
        [](const traces::RankTrace* a, const traces::RankTrace* b) { return a->rank < b->rank; });
    std::vector<traces::SnapshotImportSummary> summaries(snapshots.size());
    for (size_t i = 0; i < snapshots.size(); ++i)
      traces::set_memory_from_snapshot(trace, *ranks[i], traces::load_memory_snapshot(snapshots[i]),
                                       snapshots[i], &summaries[i]);
    traces::validate(trace, out);
    summary.memory_records = 0;
    for (const traces::RankTrace& r : trace.ranks)
      summary.memory_records += static_cast<int64_t>(r.memory.size());
    save_import(trace, out, summary);
    for (size_t i = 0; i < snapshots.size(); ++i)
      print_snapshot_summary(snapshots[i], summaries[i]);
    return 0;
  }
  save_import(trace, out, summary);
  return 0;
}

}  // namespace shardscope::cli
