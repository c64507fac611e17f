// `shardscope profile`: usage errors, COMMAND's exit status, no CUDA process,
// a foreign injection library, and (without a GPU) the merge path, fed by
// commands that drop per-process traces into $SHARDSCOPE_PROFILE_DIR the way
// the injection library does.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "profiler/cupti/process_trace.h"
#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"
#include "traces/trace_io.h"

using shardscope::test::CliResult;
using shardscope::test::run_cli;
using shardscope::test::TempDir;
namespace fs = std::filesystem;
using namespace shardscope;

namespace {

// Runs `shell_prefix SHARDSCOPE_CLI args` (e.g. an environment assignment first).
CliResult run_cli_with(const std::string& shell_prefix, const std::string& args) {
  return shardscope::test::run_cli(args, shell_prefix);
}

bool inject_library_built() {
  return fs::exists(fs::path(SHARDSCOPE_CLI).parent_path() / "libshardscope_inject.so");
}

// A per-process trace as the injection library writes it: three kernels of
// 100 ns on stream 7, 100 ns apart from 1000 ns, and an all-gather [1050, 1350)
// on stream 13.
std::string write_process_trace(const TempDir& dir, const std::string& name, int64_t pid,
                                int32_t rank) {
  profiler::Recording rec;
  for (int i = 0; i < 3; ++i) {
    profiler::KernelRecord k;
    k.name = "gemm_kernel";
    k.stream = 7;
    k.start_ns = 1000 + 200 * i;
    k.end_ns = k.start_ns + 100;
    rec.kernels.push_back(k);
  }
  profiler::KernelRecord ag;
  ag.name = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
  ag.stream = 13;
  ag.start_ns = 1050;
  ag.end_ns = 1350;
  rec.kernels.push_back(ag);
  rec.cupti_api_version = 130001;
  profiler::ProcessIdentity id;
  id.pid = pid;
  id.rank = rank;
  id.rank_from = "RANK";
  const std::string path = (dir.path / name).string();
  traces::save_trace(profiler::process_trace(rec, id), path);
  return path;
}

}  // namespace

TEST_CASE("profile: usage errors exit 2", "[cli][profile]") {
  auto r = run_cli("profile");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("missing COMMAND"));
  r = run_cli("profile --out x.trace python train.py");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("unexpected argument"));
  r = run_cli("profile --help");
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("-- COMMAND [ARGS...]"));
  r = run_cli("profile --out /nonexistent/dir/x.trace -- /bin/true");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("/nonexistent/dir"));
}

TEST_CASE("profile: --torch-shapes refuses a command that does not run Python, naming it",
          "[cli][profile]") {
  // Checked before anything is run or looked up: the same on builds without CUDA.
  auto r = run_cli("profile --torch-shapes -- /bin/sh -c true");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--torch-shapes needs a Python program") &&
                           Catch::Contains("/bin/sh (/bin/sh) is not one"));
  r = run_cli("profile --torch-shapes=1 -- python3 -c pass");
  CHECK(r.status == 2);
  r = run_cli("profile --help");
  CHECK_THAT(r.output, Catch::Contains("--torch-shapes"));
}

TEST_CASE("profile: a foreign CUDA_INJECTION64_PATH is an error naming it", "[cli][profile]") {
  const auto r =
      run_cli_with("CUDA_INJECTION64_PATH=/opt/other/libtool.so", "profile -- /bin/true");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("CUDA_INJECTION64_PATH is already set") &&
                           Catch::Contains("/opt/other/libtool.so"));
}

TEST_CASE("profile: a command that does not use CUDA writes nothing and exits 1",
          "[cli][profile]") {
  TempDir dir;
  const std::string out = (dir.path / "p.trace").string();
  const auto r = run_cli("profile --out " + out + " -- /bin/true");
  INFO(r.output);
  if (!inject_library_built()) {  // a build without CUDA/CUPTI
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains("libshardscope_inject.so not found"));
    return;
  }
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Catch::Contains("no CUDA process initialised the profiler") &&
                           Catch::Contains("CUDA_INJECTION64_PATH is read by the driver"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("profile: COMMAND's failure wins, a missing command exits 127", "[cli][profile]") {
  if (!inject_library_built()) return;  // covered by the test above
  TempDir dir;
  const std::string out = (dir.path / "p.trace").string();
  auto r = run_cli("profile --out " + out + " -- sh -c 'exit 3'");
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK_THAT(r.output, Catch::Contains("sh exited with status 3"));
  CHECK_FALSE(fs::exists(out));
  r = run_cli("profile --out " + out + " -- /nonexistent/profiled-program --flag");
  CHECK(r.status == 127);
  CHECK_THAT(r.output, Catch::Contains("command not found: /nonexistent/profiled-program"));
  r = run_cli("profile --out " + out + " -- sh -c 'kill -TERM $$'");
  CHECK(r.status == 128 + 15);
  CHECK_THAT(r.output, Catch::Contains("killed by signal 15"));
}

TEST_CASE("profile: the child sees the injection variables", "[cli][profile]") {
  if (!inject_library_built()) return;
  const auto r = run_cli_with(
      "env -u NVTX_INJECTION64_PATH SHARDSCOPE_PROFILE_DIR=/stale",
      "profile -- sh -c 'echo \"cuda=$CUDA_INJECTION64_PATH nvtx=$NVTX_INJECTION64_PATH "
      "dir=$SHARDSCOPE_PROFILE_DIR\"'");
  INFO(r.output);
  const std::string lib =
      (fs::absolute(fs::path(SHARDSCOPE_CLI)).parent_path() / "libshardscope_inject.so").string();
  CHECK_THAT(r.output, Catch::Contains("cuda=" + lib + " nvtx=" + lib + " dir=/"));
  CHECK_THAT(r.output, !Catch::Contains("dir=/stale"));
}

TEST_CASE("profile: per-process traces are merged into OUT, readable by report and diff",
          "[cli][profile]") {
  if (!inject_library_built()) return;
  TempDir dir;
  const std::string rank0 = write_process_trace(dir, "rank0.trace", 501, 0);
  const std::string rank1 = write_process_trace(dir, "rank1.trace", 502, 1);
  const std::string out = (dir.path / "run.trace").string();
  const auto r = run_cli("profile --out " + out + " -- sh -c 'cp " + rank0 +
                         " \"$SHARDSCOPE_PROFILE_DIR/501.trace\" && cp " + rank1 +
                         " \"$SHARDSCOPE_PROFILE_DIR/502.trace\"'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("profile: 2 processes (ranks 0,1), 8 events, 0 dropped "
                                       "records -> " +
                                       out));
  const traces::Trace t = traces::load_trace(out);
  REQUIRE(t.ranks.size() == 2);
  CHECK(t.meta.clock_alignment.rfind("host-monotonic", 0) == 0);
  CHECK(t.meta.tool_versions.at("profiled_command").rfind("sh -c cp ", 0) == 0);
  CHECK(t.meta.tool_versions.at("process.rank1") == "pid 502, rank from RANK");

  // Per rank: COMP = [1000, 1100) + [1200, 1300) + [1400, 1500), COMM = [1050, 1350):
  // COMP and COMM share [1050, 1100) + [1200, 1300) = 150 of 300 ns; exposed 150 ns.
  const auto report = run_cli("report " + out + " --json");
  INFO(report.output);
  REQUIRE(report.status == 0);
  const auto j = nlohmann::json::parse(report.output.substr(report.output.find('{')));
  CHECK(j.at("world_size") == 2);
  CHECK(j.at("overlap").get<double>() == Approx(0.5));
  CHECK(j.at("exposed_comm_ms").get<double>() == Approx(150e-6));
  const auto diff = run_cli("diff " + out + " " + out);
  INFO(diff.output);
  CHECK(diff.status == 0);
}

TEST_CASE("profile: duplicate ranks are numbered, and a failed child still gets its trace written",
          "[cli][profile]") {
  if (!inject_library_built()) return;
  TempDir dir;
  const std::string a = write_process_trace(dir, "a.trace", 601, 0);
  const std::string out = (dir.path / "run.json").string();
  const auto r = run_cli("profile --out " + out + " -- sh -c 'cp " + a +
                         " \"$SHARDSCOPE_PROFILE_DIR/601.trace\" && cp " + a +
                         " \"$SHARDSCOPE_PROFILE_DIR/602.trace\" && exit 5'");
  INFO(r.output);
  CHECK(r.status == 5);
  CHECK_THAT(r.output, Catch::Contains("claimed rank 0") && Catch::Contains("recorded as rank 1"));
  CHECK_THAT(r.output, Catch::Contains("wrote what was recorded to " + out));
  const traces::Trace t = traces::load_trace(out);  // native JSON, by extension
  CHECK(t.ranks.size() == 2);
}

TEST_CASE("profile: a process that could not record is reported", "[cli][profile]") {
  if (!inject_library_built()) return;
  TempDir dir;
  const std::string out = (dir.path / "run.trace").string();
  const auto r = run_cli("profile --out " + out +
                         " -- sh -c 'echo \"another profiler already uses CUPTI\" > "
                         "\"$SHARDSCOPE_PROFILE_DIR/77.error\"'");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output,
             Catch::Contains("pid 77 did not record: another profiler already uses CUPTI"));
  CHECK_THAT(r.output, Catch::Contains("no process recorded a trace"));
  CHECK_FALSE(fs::exists(out));
}

namespace {

// A process trace as `profile --torch-shapes` leaves it: GEMM kernels
// launched under aten::mm ranges (launch records and NVTX ranges on thread
// 1), kernel names from `kernel_name`; without launch records, as plain
// `profile` leaves it.
std::string write_torch_shapes_trace(const TempDir& dir, const std::string& name,
                                     const std::string& kernel_name, bool launches) {
  profiler::Recording rec;
  for (int i = 0; i < 4; ++i) {
    const int64_t t = 1000 * (i + 1);
    profiler::MarkerRecord m;
    m.start_ns = t;
    m.end_ns = t + 100;
    m.thread = 1;
    m.name = "aten::mm, seq = " + std::to_string(i) + ", op_id = " + std::to_string(i + 1) +
             ", sizes = [[1024, 1024], [1024, " + std::to_string(1024 * (i + 1)) + "]]";
    rec.markers.push_back(m);
    profiler::KernelRecord k;
    k.name = kernel_name;
    k.stream = 7;
    k.correlation = static_cast<uint32_t>(i + 1);
    k.start_ns = 100000 + 100000 * i;
    k.end_ns = k.start_ns + 20000 * (i + 1);
    rec.kernels.push_back(k);
    if (launches) rec.launches.push_back(profiler::LaunchRecord{t + 50, k.correlation, 1});
  }
  profiler::ProcessIdentity id;
  id.pid = 7;
  const std::string path = (dir.path / name).string();
  traces::save_trace(profiler::process_trace(rec, id), path);
  return path;
}

}  // namespace

TEST_CASE(
    "profile traces: report and calibrate say why kernels lack FLOPs, and --torch-shapes "
    "ones calibrate in the dtype their names state",
    "[cli][profile]") {
  TempDir dir;
  const std::string gemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64";
  const std::string plain = write_torch_shapes_trace(dir, "plain.trace", gemm, false);
  auto r = run_cli("report " + plain);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("note: none of the 4 compute kernels carries FLOPs") &&
                           Catch::Contains("profile --torch-shapes"));
  const std::string fit = (dir.path / "fit.json").string();
  r = run_cli("calibrate " + plain + " --base h100-sxm --out " + fit);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("note: " + plain + ": none of the 4 compute kernels") &&
                           Catch::Contains("no compute events with FLOPs"));

  const std::string shaped = write_torch_shapes_trace(dir, "shaped.trace", gemm, true);
  r = run_cli("report " + shaped);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("note: --torch-shapes: 4 of 4 compute kernels got an op "
                                       "type and FLOPs from PyTorch's NVTX ranges (dtype from "
                                       "kernel names: bf16 4)"));
  r = run_cli("calibrate " + shaped + " --base h100-sxm --out " + fit + " --json");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  CHECK_THAT(j.at("notes").dump(), Catch::Contains("compute dtype bf16: the names of every "
                                                   "kernel with FLOPs"));

  // A name that states no dtype: calibrate refuses rather than guess, unless told.
  const std::string unknown =
      write_torch_shapes_trace(dir, "unknown.trace", "nvjet_tst_128x256_64x4_1x2_h_bz_NNT", true);
  r = run_cli("calibrate " + unknown + " --base h100-sxm --out " + fit);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(unknown + ": its kernels with FLOPs state no dtype for "
                                                 "some in their names (unknown 4)") &&
                           Catch::Contains("pass --dtype"));
  r = run_cli("calibrate " + unknown + " --base h100-sxm --dtype bf16 --out " + fit);
  CHECK(r.status == 0);
  // Profiles whose kernels ran in different dtypes: one calibration each.
  const std::string fp32 =
      write_torch_shapes_trace(dir, "fp32.trace", "ampere_sgemm_128x64_tn", true);
  r = run_cli("calibrate " + shaped + " " + fp32 + " --base h100-sxm --out " + fit);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("ran in bf16, those of " + fp32 + " in fp32"));
}
