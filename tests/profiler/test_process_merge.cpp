// The per-process side of `shardscope profile`: rank from the launcher's
// environment, the process trace, and the merge (duplicate ranks numbered,
// processes without GPU work left out).
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "profiler/cupti/process_trace.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using namespace shardscope;

namespace {

std::map<std::string, std::string> g_env;

const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

profiler::ProcessIdentity identity_with(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  return profiler::process_identity_from_env(42, fake_getenv);
}

// The trace of one process: one kernel at `first_ns` (none when first_ns < 0).
profiler::ProcessTraceFile process(int64_t pid, int32_t rank, int64_t first_ns,
                                   const char* rank_from = "RANK", uint64_t dropped = 0) {
  profiler::Recording rec;
  if (first_ns >= 0) {
    profiler::KernelRecord k;
    k.name = "kernel of pid " + std::to_string(pid);
    k.start_ns = first_ns;
    k.end_ns = first_ns + 100;
    rec.kernels.push_back(k);
  }
  rec.dropped_records = dropped;
  rec.untimed_records = 1;
  rec.clock = "host-monotonic (timestamp callback)";
  rec.cupti_api_version = 130001;
  rec.device_names[0] = "NVIDIA H100 80GB HBM3";
  profiler::ProcessIdentity id;
  id.pid = pid;
  id.rank = rank;
  id.rank_from = rank_from;
  id.world_size = 4;
  return profiler::ProcessTraceFile{std::to_string(pid) + ".trace",
                                    profiler::process_trace(rec, id)};
}

}  // namespace

TEST_CASE("process identity: rank and world size from the launcher's variables",
          "[profiler][process]") {
  auto torchrun = identity_with({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}});
  CHECK(torchrun.rank == 3);
  CHECK(torchrun.rank_from == "RANK");
  CHECK(torchrun.world_size == 4);
  CHECK(torchrun.pid == 42);
  auto slurm = identity_with({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}});
  CHECK(slurm.rank == 5);
  CHECK(slurm.rank_from == "SLURM_PROCID");
  CHECK(slurm.world_size == 8);
  auto mpi = identity_with({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}});
  CHECK(mpi.rank == 2);
  CHECK(mpi.rank_from == "OMPI_COMM_WORLD_RANK");
  auto local = identity_with({{"LOCAL_RANK", "1"}});
  CHECK(local.rank == 1);
  CHECK(local.rank_from == "LOCAL_RANK");
  auto none = identity_with({});
  CHECK(none.rank == 0);
  CHECK(none.rank_from.empty());
  CHECK(none.world_size == 0);
  CHECK_THROWS_WITH(identity_with({{"RANK", "two"}}), Catch::Contains("RANK=\"two\""));
  CHECK_THROWS_WITH(identity_with({{"SLURM_PROCID", "-1"}}),
                    Catch::Contains("SLURM_PROCID=\"-1\""));
  CHECK_THROWS_WITH(identity_with({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
                    Catch::Contains("WORLD_SIZE=\"0\""));
}

TEST_CASE("process trace: one rank, metadata, and a lossless round trip through a file",
          "[profiler][process]") {
  const profiler::ProcessTraceFile p = process(1234, 3, 1000, "RANK", 2);
  const traces::Trace& t = p.trace;
  REQUIRE(t.ranks.size() == 1);
  CHECK(t.ranks[0].rank == 3);
  CHECK(t.ranks[0].events.size() == 1);
  CHECK(t.meta.source == traces::Source::unknown);
  CHECK(t.meta.world_size == 4);
  CHECK(t.meta.tool_versions.at("pid") == "1234");
  CHECK(t.meta.tool_versions.at("rank_from") == "RANK");
  CHECK(t.meta.tool_versions.at("cupti_dropped_records") == "2");
  CHECK(profiler::process_trace_file_name(1234) == "1234.trace");
  test::TempDir dir;
  const std::string path = (dir.path / profiler::process_trace_file_name(1234)).string();
  traces::save_trace(t, path);
  CHECK(traces::load_trace(path) == t);
}

TEST_CASE("merge: a contested rank goes to the earliest process, the others are numbered after",
          "[profiler][merge]") {
  std::vector<profiler::ProcessTraceFile> files;
  files.push_back(process(100, 0, 1000, "RANK", 1));  // claims 0, starts after pid 101
  files.push_back(process(101, 0, 500, "RANK", 2));   // claims 0 first: keeps it
  files.push_back(process(102, 1, 700, "RANK"));
  files.push_back(process(103, 0, -1, "RANK"));          // no GPU work: left out
  files.push_back(process(104, 1, 2000, "LOCAL_RANK"));  // claims 1, after pid 102
  const profiler::MergedProfile m = profiler::merge_process_traces(std::move(files));
  CHECK(m.processes == 4);
  CHECK(m.processes_without_gpu_work == 1);
  CHECK(m.dropped_records == 3);
  const traces::Trace& t = m.trace;
  REQUIRE(t.ranks.size() == 4);
  auto kernel_of = [&](size_t i) { return std::string(t.str(t.ranks[i].events.at(0).name)); };
  CHECK(t.ranks[0].rank == 0);
  CHECK(kernel_of(0) == "kernel of pid 101");
  CHECK(t.ranks[1].rank == 1);
  CHECK(kernel_of(1) == "kernel of pid 102");
  // Extra claimants numbered after the highest claimed rank (1), by first event.
  CHECK(t.ranks[2].rank == 2);
  CHECK(kernel_of(2) == "kernel of pid 100");
  CHECK(t.ranks[3].rank == 3);
  CHECK(kernel_of(3) == "kernel of pid 104");
  CHECK(t.meta.tool_versions.at("process.rank2") == "pid 100, rank from RANK");
  CHECK(t.meta.tool_versions.at("process.rank3") == "pid 104, rank from LOCAL_RANK");
  CHECK(t.meta.tool_versions.at("cupti_dropped_records") == "3");
  CHECK(t.meta.tool_versions.at("cupti") == "13.0.1 (API 130001)");
  CHECK(t.meta.tool_versions.at("cupti_untimed_records") == "4");  // 1 per merged process
  CHECK(t.meta.tool_versions.at("clock") == "host-monotonic (timestamp callback)");
  CHECK(t.meta.hardware == "NVIDIA H100 80GB HBM3");
  CHECK(t.meta.world_size == 4);
  CHECK(t.meta.clock_alignment.rfind("host-monotonic", 0) == 0);
  REQUIRE(m.notes.size() == 3);
  CHECK_THAT(m.notes[0], Catch::Contains("103") && Catch::Contains("no GPU work"));
  CHECK_THAT(m.notes[1], Catch::Contains("pid 100 claimed rank 0") &&
                             Catch::Contains("taken by pid 101") &&
                             Catch::Contains("recorded as rank 2"));
  CHECK_THAT(m.notes[2],
             Catch::Contains("pid 104 claimed rank 1") && Catch::Contains("recorded as rank 3"));
}

TEST_CASE("merge: processes without GPU work are kept when no process has any",
          "[profiler][merge]") {
  std::vector<profiler::ProcessTraceFile> files;
  files.push_back(process(7, 0, -1));
  const profiler::MergedProfile m = profiler::merge_process_traces(std::move(files));
  CHECK(m.processes == 1);
  CHECK(m.processes_without_gpu_work == 0);
  CHECK(m.trace.ranks.size() == 1);
  CHECK(m.trace.event_count() == 0);
}

TEST_CASE("merge: rejects no input and a trace that is not one process", "[profiler][merge]") {
  CHECK_THROWS_WITH(profiler::merge_process_traces({}), Catch::Contains("no process traces"));
  profiler::ProcessTraceFile two = process(1, 0, 10);
  two.trace.add_rank(1);
  std::vector<profiler::ProcessTraceFile> files;
  files.push_back(std::move(two));
  CHECK_THROWS_WITH(profiler::merge_process_traces(std::move(files)),
                    Catch::Contains("holds 2 ranks"));
}
