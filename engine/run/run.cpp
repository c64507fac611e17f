// engine/run's entry point (run.h): the dispatcher and the launcher role.
#include "engine/run/run.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "engine/run/run_internal.h"

namespace shardscope::engine::run {

namespace {

// Starts this executable request.world_size times with request.rank_args plus
// --run-dir, each rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT
// (engine/launch), and returns what rank 0 left in the run directory (run.h).
RunResult launch_ranks(const RunRequest& request) {
  char dir_template[] = "/tmp/shardscope-run-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) throw std::runtime_error("cannot create a run directory in /tmp");
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
  const std::string result_file = std::string(dir) + "/result.json";
  std::string handed_off;
  if (std::ifstream in(result_file); in) handed_off.assign(std::istreambuf_iterator<char>(in), {});
  std::remove(result_file.c_str());
  rmdir(dir);
  RunResult result;
  if (res.exit_code != 0) {
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
  if (request.role == Role::launcher) return launch_ranks(request);
  if (!request.graph) throw std::invalid_argument("engine::run: request.graph is null");
  if (request.backend == Backend::cpu) return detail::run_cpu(request);
  return detail::run_cuda(request);
}

}  // namespace shardscope::engine::run
