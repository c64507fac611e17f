// launch_test_rank MODE [DIR]: a rank process for the launcher tests. Detects its
// environment, joins the launcher's store, passes barrier "start", then:
//   ok        every rank adds 1 to "arrived", passes barrier "end"; rank 0 checks the
//             count equals the world size (exit 9 if not); exit 0
//   kill1     rank 1 kills itself with SIGKILL; the others pause() forever
//   exit3     rank 1 writes "rank 1: disk on fire" to stderr and exits 3; others pause()
//   error2    rank 2 stores "error/2" = "optimizer state mismatch" and exits 5; others pause()
//   stubborn  rank 1 exits 7; the others ignore SIGTERM and pause()
//   wait      every rank writes its pid to DIR/ready.<rank>, then pause()s
//   deaf_wait as wait, ignoring SIGTERM
// Any exception: its message on stderr, exit 2. An unexpected environment: exit 8.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/launch/launch.h"

namespace launch = shardscope::engine::launch;

namespace {

[[noreturn]] void pause_forever() {
  for (;;) ::pause();
}

int run(const std::string& mode, const std::string& dir) {
  const auto env = launch::detect_rank_env();
  if (!env || env->source != "shardscope" || env->local_rank != env->rank || env->run_id.empty() ||
      !env->launcher_hosts_store) {
    std::cerr << "launch_test_rank: unexpected environment\n";
    return 8;
  }
  launch::Rendezvous rdv = launch::rendezvous(*env, std::chrono::seconds(30));
  launch::TcpStore& store = *rdv.store;
  store.barrier("start");
  const int rank = env->rank;
  if (mode == "ok") {
    store.add("arrived", 1);
    store.barrier("end");
    const int64_t arrived = store.add("arrived", 0);
    std::cout << "rank " << rank << " of " << env->world_size << " saw " << arrived << "\n";
    return arrived == env->world_size ? 0 : 9;
  }
  if (mode == "kill1") {
    if (rank == 1) ::raise(SIGKILL);
    pause_forever();
  }
  if (mode == "exit3") {
    if (rank == 1) {
      std::cerr << "rank 1: some noise\nrank 1: disk on fire\n" << std::flush;
      return 3;
    }
    pause_forever();
  }
  if (mode == "error2") {
    if (rank == 2) {
      store.set("error/2", "optimizer state mismatch");
      return 5;
    }
    pause_forever();
  }
  if (mode == "stubborn") {
    if (rank == 1) return 7;
    ::signal(SIGTERM, SIG_IGN);
    pause_forever();
  }
  if (mode == "wait" || mode == "deaf_wait") {
    if (mode == "deaf_wait") ::signal(SIGTERM, SIG_IGN);
    {
      // Written whole, then renamed: a reader never sees a partial pid.
      const std::string path = dir + "/ready." + std::to_string(rank);
      std::ofstream(path + ".tmp") << ::getpid() << "\n";
      std::rename((path + ".tmp").c_str(), path.c_str());
    }
    pause_forever();
  }
  std::cerr << "launch_test_rank: unknown mode '" << mode << "'\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: launch_test_rank MODE [DIR]\n";
    return 2;
  }
  try {
    return run(argv[1], argc > 2 ? argv[2] : "");
  } catch (const std::exception& e) {
    std::cerr << "launch_test_rank: " << e.what() << "\n";
    return 2;
  }
}
