// engine/run's entry point (run.h): the dispatcher and the launcher role.
#include "engine/run/run.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "engine/comm/shm_wait.h"
#include "engine/exec/checkpointing.h"
#include "engine/run/aten_support.h"
#include "engine/run/cuda_support.h"
#include "engine/run/run_internal.h"

namespace shardscope::engine::run {

namespace {

constexpr const char* kRunDirPrefix = "shardscope-run-";

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// Removes TMP/shardscope-run-<pid>-* directories whose launcher <pid> is no
// longer alive (a launcher killed by SIGKILL cannot clean up after itself).
void remove_stale_run_dirs(const std::string& root) {
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kRunDirPrefix, 0) != 0) continue;
    char* end_digits = nullptr;
    const char* digits = name.c_str() + std::strlen(kRunDirPrefix);
    const long pid = std::strtol(digits, &end_digits, 10);
    if (end_digits == digits || *end_digits != '-' || pid <= 0) continue;
    if (comm::shm::process_liveness(static_cast<pid_t>(pid), 0) == comm::shm::Liveness::alive)
      continue;
    stale.push_back(it->path());
  }
  for (const auto& p : stale) std::filesystem::remove_all(p, ec);
}

// Starts this executable request.world_size times with request.rank_args plus
// --run-dir, each rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT
// (engine/launch), and returns what rank 0 left in the run directory (run.h).
// Whatever way the ranks end, the run directory and the communicator's shm
// name are removed before returning.
RunResult launch_ranks(const RunRequest& request) {
  const std::string root = temp_root();
  remove_stale_run_dirs(root);
  std::string dir_template = root + "/" + kRunDirPrefix + std::to_string(::getpid()) + "-XXXXXX";
  const char* dir = mkdtemp(dir_template.data());
  if (!dir)
    throw std::runtime_error("cannot create a run directory in " + root + ": " +
                             std::strerror(errno));
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{dir};
  launch::LaunchOptions lo;
  lo.nproc = request.world_size;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  self[n] = '\0';
  lo.argv.push_back(self);
  lo.argv.insert(lo.argv.end(), request.rank_args.begin(), request.rank_args.end());
  lo.argv.push_back("--run-dir");
  lo.argv.push_back(dir);
  const launch::LaunchResult res = launch::launch(lo);
  // Rank 0 unlinks the segment once every rank attached; one killed before
  // that leaves the name behind.
  ::shm_unlink(detail::shm_segment_name(res.run_id).c_str());
  const std::string result_file = std::string(dir) + "/result.json";
  std::string handed_off;
  if (std::ifstream in(result_file); in) handed_off.assign(std::istreambuf_iterator<char>(in), {});
  RunResult result;
  if (res.exit_code != 0) {
    // A run stopped by a non-finite loss: rank 0 handed over its report too.
    if (!handed_off.empty()) {
      const nlohmann::json j = nlohmann::json::parse(handed_off, nullptr, false);
      if (j.is_object() && j.contains("failure") && j["failure"].is_object()) {
        result.failure = j["failure"];
        result.has_report = true;
      }
    }
    result.exit_code = res.exit_code;
    result.error = res.message;
  } else if (handed_off.empty()) {
    result.exit_code = 1;
    result.error = "every rank exited 0 but rank 0 handed no result to the launcher (" +
                   result_file + " missing or empty)";
  } else {
    result = result_from_json(nlohmann::json::parse(handed_off));
  }
  return result;
}

}  // namespace

RunResult run(const RunRequest& request) {
  // Refused before any rank starts when the launcher has the graph.
  if (request.graph)
    check_engine_runs_aten(*request.graph, request.backend == Backend::cuda ? "CUDA" : "CPU");
  if (request.backend == Backend::cuda && request.graph) check_cuda_supports(*request.graph);
  if (request.backend == Backend::cuda) check_cuda_supports(request.policy);
  // A bad --save target is refused before any rank starts (ranks check again,
  // with the step directory, before their first step).
  if (request.role == Role::launcher && !request.save_dir.empty())
    exec::check_save_target(request.save_dir, request.load_path.empty() ? request.steps : -1);
  if (request.role == Role::launcher) return launch_ranks(request);
  if (!request.graph) throw std::invalid_argument("engine::run: request.graph is null");
  if (request.backend == Backend::cpu) return detail::run_cpu(request);
  return detail::run_cuda(request);
}

}  // namespace shardscope::engine::run
