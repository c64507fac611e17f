// The per-process side of `shardscope profile`: who this process is (rank
// from the launcher's environment) and the trace it leaves behind
// (SHARDSCOPE_PROFILE_DIR/<pid>.trace), then the merge of every process's
// trace into one (cli/cmd_profile.cpp). No CUPTI or CUDA here: the injection
// library (profiler/cupti/inject.cpp) records, this code names and merges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/cupti/cupti_recorder.h"
#include "traces/trace.h"

namespace shardscope::profiler {

// Rank and world size as the launcher set them. Rank: RANK (torchrun,
// shardscope's launcher), else SLURM_PROCID (srun), else OMPI_COMM_WORLD_RANK
// (mpirun), else LOCAL_RANK, else 0. World size: WORLD_SIZE, else
// SLURM_NTASKS, else OMPI_COMM_WORLD_SIZE, else 0 (unknown).
struct ProcessIdentity {
  int32_t rank = 0;
  std::string rank_from;  // the variable the rank came from, "" = none (rank 0)
  int32_t world_size = 0;
  int64_t pid = 0;
};
using GetEnvFn = const char* (*)(const char*);
// Throws ProfilerError naming the variable and its value when a value is not
// a non-negative decimal integer below 2^31 (world size: >= 1).
ProcessIdentity process_identity_from_env(int64_t pid, GetEnvFn getenv_fn = nullptr);

// The trace of one profiled process: one rank (identity.rank) holding the
// recording; metadata records the recorder, the pid and where the rank came
// from (tool_versions "recorder", "pid", "rank_from").
traces::Trace process_trace(const Recording& recording, const ProcessIdentity& identity);

// The name of a process's trace file inside the profile directory: "<pid>.trace".
std::string process_trace_file_name(int64_t pid);

struct ProcessTraceFile {
  std::string path;  // for messages
  traces::Trace trace;
};

struct MergedProfile {
  traces::Trace trace;
  int processes = 0;                   // merged
  int processes_without_gpu_work = 0;  // left out: no events and no memory records
  uint64_t dropped_records = 0;        // summed over the merged processes
  std::vector<std::string> notes;      // renumbered ranks, processes left out
};

// Merges per-process traces (each holding exactly one rank) into one trace.
//  - Processes without any event or memory record (CUDA initialised, nothing
//    recorded: helper processes, compile workers) are left out, unless every
//    process is like that.
//  - Ranks: each process keeps the rank it claimed; when several claim the
//    same rank (processes started without a launcher, or helper processes
//    that inherited RANK), the one whose first event is earliest keeps it and
//    the others are numbered after the highest claimed rank, in the order of
//    their first events, each with a note naming its pid.
//  - Clocks: every process converted CUPTI's timestamps to CLOCK_MONOTONIC of
//    one host, so times are merged as they are (clock_alignment "host-monotonic").
//  - Metadata: source unknown (recorded by CUPTI, not by shardscope's engine or
//    Kineto), tool_versions "recorder", "cupti", "clock" (the first
//    process's), "cupti_dropped_records" and "cupti_untimed_records" (sums),
//    "process.rank<N>" = "pid <P>, rank from <VAR>"; world size the
//    largest recorded, at least the number of ranks; hardware the first
//    process's device name.
// Throws ProfilerError when `processes` is empty or a trace does not hold
// exactly one rank.
MergedProfile merge_process_traces(std::vector<ProcessTraceFile> processes);

}  // namespace shardscope::profiler
