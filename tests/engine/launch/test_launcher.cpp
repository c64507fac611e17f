// launch() with real rank processes (launch_test_rank): success, failures by signal
// and exit code, escalation to SIGKILL, signal forwarding, and no survivors.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/launch/launch.h"
#include "tests/temp_dir.h"

using namespace shardscope::engine::launch;
using namespace std::chrono_literals;

namespace {

LaunchOptions options_for(const std::string& mode, int nproc, const std::string& dir = "") {
  LaunchOptions o;
  o.nproc = nproc;
  o.argv = {LAUNCH_TEST_RANK, mode};
  if (!dir.empty()) o.argv.push_back(dir);
  return o;
}

// Every rank pid is gone: reaped, so kill(pid, 0) fails with ESRCH.
void check_all_gone(const LaunchResult& r, int nproc) {
  REQUIRE(r.pids.size() == static_cast<size_t>(nproc));
  for (int pid : r.pids) {
    INFO("pid " << pid);
    errno = 0;
    CHECK(::kill(pid, 0) == -1);
    CHECK(errno == ESRCH);
  }
}

struct Timed {
  LaunchResult result;
  double seconds = 0;
};
Timed timed_launch(const LaunchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Timed t;
  t.result = launch(o);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

// Waits (30 s at most) until every rank wrote DIR/ready.<rank>; their pids.
std::vector<int> wait_ready(const std::filesystem::path& dir, int nproc) {
  std::vector<int> pids;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (pids.size() < static_cast<size_t>(nproc) && std::chrono::steady_clock::now() < deadline) {
    pids.clear();
    for (int r = 0; r < nproc; ++r) {
      std::ifstream in(dir / ("ready." + std::to_string(r)));
      int pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    if (pids.size() < static_cast<size_t>(nproc)) std::this_thread::sleep_for(10ms);
  }
  return pids;
}

}  // namespace

TEST_CASE("launch: 3 ranks that all succeed give exit 0") {
  const LaunchResult r = launch(options_for("ok", 3));
  INFO(r.message);
  CHECK(r.exit_code == 0);
  CHECK(r.failed_rank == -1);
  CHECK(r.message.empty());
  check_all_gone(r, 3);
}

TEST_CASE("launch: rank 1 killed by SIGKILL takes the blocked ranks down within 10 s") {
  const Timed t = timed_launch(options_for("kill1", 3));
  INFO(t.result.message);
  // Not a speed assertion: a launcher that left ranks 0 and 2 blocked would never return.
  CHECK(t.seconds < 10.0);
  CHECK(t.result.failed_rank == 1);
  CHECK(t.result.exit_code == 128 + 9);
  CHECK_THAT(t.result.message, Catch::StartsWith("rank 1 (pid " + std::to_string(t.result.pids[1]) +
                                                 ") was killed by signal 9"));
  check_all_gone(t.result, 3);
}

TEST_CASE("launch: exit code 3 and the rank's last stderr line are reported") {
  const LaunchResult r = launch(options_for("exit3", 3));
  CHECK(r.failed_rank == 1);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.message, Catch::Contains("exited with code 3") &&
                            Catch::EndsWith("its last stderr line: rank 1: disk on fire"));
  check_all_gone(r, 3);
}

TEST_CASE("launch: the error a rank left under error/<rank> is reported") {
  const LaunchResult r = launch(options_for("error2", 3));
  CHECK(r.failed_rank == 2);
  CHECK(r.exit_code == 5);
  CHECK_THAT(r.message, Catch::EndsWith("exited with code 5: optimizer state mismatch"));
  check_all_gone(r, 3);
}

TEST_CASE("launch: ranks that ignore SIGTERM get SIGKILL after kill_grace") {
  LaunchOptions o = options_for("stubborn", 3);
  o.kill_grace = 300ms;
  const Timed t = timed_launch(o);
  CHECK(t.seconds < 10.0);
  CHECK(t.result.failed_rank == 1);
  CHECK(t.result.exit_code == 7);
  check_all_gone(t.result, 3);
}

TEST_CASE("launch: SIGTERM to the launcher is forwarded to the ranks") {
  shardscope::test::TempDir dir("launch_wait");
  std::thread signaller([&] {
    // Once every rank is up (the handlers are installed before the first fork),
    // signal this process.
    wait_ready(dir.path, 2);
    ::kill(::getpid(), SIGTERM);
  });
  const LaunchResult r = launch(options_for("wait", 2, dir.path.string()));
  signaller.join();
  CHECK(r.exit_code == 128 + SIGTERM);
  CHECK(r.failed_rank == -1);
  CHECK_THAT(r.message, Catch::StartsWith("the launcher received signal 15"));
  check_all_gone(r, 2);
}

TEST_CASE("launch: a second SIGTERM to the launcher sends SIGKILL without waiting kill_grace") {
  shardscope::test::TempDir dir("launch_deaf");
  std::thread signaller([&] {
    wait_ready(dir.path, 2);
    ::kill(::getpid(), SIGTERM);
    std::this_thread::sleep_for(100ms);
    ::kill(::getpid(), SIGTERM);
  });
  LaunchOptions o = options_for("deaf_wait", 2, dir.path.string());
  o.kill_grace = 600s;  // ranks ignore SIGTERM: only the second signal can end this
  const Timed t = timed_launch(o);
  signaller.join();
  CHECK(t.seconds < 300.0);
  CHECK(t.result.exit_code == 128 + SIGTERM);
  check_all_gone(t.result, 2);
}

TEST_CASE("launch: a launcher killed by SIGKILL leaves no rank behind (parent-death signal)") {
  shardscope::test::TempDir dir("launch_orphans");
  // Orphaned ranks are re-parented to this process, so it can reap them and tell a
  // dead rank (reaped) from a live one.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    try {
      launch(options_for("wait", 2, dir.path.string()));
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  const std::vector<int> pids = wait_ready(dir.path, 2);
  ::kill(launcher, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(launcher, &status, 0) == launcher);
  REQUIRE(pids.size() == 2);
  // Each rank got SIGTERM from the kernel when the launcher died.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (int pid : pids) {
    INFO("rank pid " << pid);
    int rank_status = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &rank_status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    CHECK(got == pid);
    CHECK(WIFSIGNALED(rank_status));
    CHECK(WTERMSIG(rank_status) == SIGTERM);
    if (got != pid) ::kill(pid, SIGKILL);  // leave nothing behind when the check failed
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("launch: bad arguments are errors before any rank starts") {
  LaunchOptions o = options_for("ok", 2);
  o.argv = {"/nonexistent/rank_program"};
  CHECK_THROWS_WITH(launch(o), Catch::Contains("'/nonexistent/rank_program' is not an executable"));
  o.argv = {"shardscope-no-such-program-xyz"};
  CHECK_THROWS_WITH(launch(o), Catch::Contains("was not found in PATH"));
  o.argv.clear();
  CHECK_THROWS_WITH(launch(o), Catch::Contains("argv) is empty"));
  o = options_for("ok", 0);
  CHECK_THROWS_WITH(launch(o), Catch::Contains("nproc = 0"));
}
