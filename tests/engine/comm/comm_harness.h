// Runs one body per rank, as threads of this process (make_thread_communicators)
// or as forked child processes (open_shm_communicator), and brings back each
// rank's result bytes or error text. Bodies never use Catch2 (not thread-safe,
// and a child must not report into the parent's session): they return data and
// the test asserts in the main thread. Children are always reaped: a ChildSet
// SIGKILLs and waits for every child not yet collected when it goes away, and
// each child dies with its parent (PR_SET_PDEATHSIG).
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/shm_communicator.h"

namespace shardscope::test::comm {

using namespace shardscope::engine::comm;

enum class Mode { threads, processes };
inline const char* mode_name(Mode m) {
  return m == Mode::threads ? "threads" : "processes";
}

struct RankResult {
  bool ok = false;
  std::string data;   // what the body returned
  std::string error;  // the exception's text, or how the child died
};

struct WorldSpec {
  WorldSpec(int world_size, std::vector<Group> group_list = {})  // NOLINT: {3} reads well
      : world(world_size), groups(std::move(group_list)) {}
  int world = 1;
  std::vector<Group> groups;  // empty: {world_group(world)}
  size_t slot_bytes = kDefaultSlotBytes;
  std::chrono::milliseconds timeout{20'000};
};

using RankBody = std::function<std::string(Communicator&)>;

// Test segments are "/sstest-<pid>-<n>": outside the "shardscope-" prefix
// that a run's rank 0 sweeps for stale segments (remove_stale_segments), so a
// test's deliberately stale segment is never removed by another test binary.
inline std::string unique_shm_name() {
  static std::atomic<int> counter{0};
  return "/sstest-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// ---- child processes --------------------------------------------------------
struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of the result pipe
};

inline void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Forks a child that runs fn and sends back [ok byte][text] through a pipe.
inline Child spawn(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) ::_exit(3);
    char ok = 1;
    std::string text;
    try {
      text = fn();
    } catch (const std::exception& e) {
      ok = 0;
      text = e.what();
    }
    write_all(fds[1], &ok, 1);
    write_all(fds[1], text.data(), text.size());
    ::close(fds[1]);
    ::_exit(0);  // no atexit handlers, no Catch2 teardown in the child
  }
  ::close(fds[1]);
  return Child{pid, fds[0]};
}

// Reads the child's result to EOF and reaps it.
inline RankResult collect(Child& c) {
  std::string buf;
  char tmp[65536];
  for (;;) {
    const ssize_t n = ::read(c.fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
  }
  ::close(c.fd);
  c.fd = -1;
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.pid = -1;
  RankResult r;
  if (WIFSIGNALED(status)) {
    r.error = "killed by signal " + std::to_string(WTERMSIG(status));
  } else if (buf.empty() || WEXITSTATUS(status) != 0) {
    r.error = "child exited with status " + std::to_string(WEXITSTATUS(status)) + " and no result";
  } else {
    r.ok = buf[0] == 1;
    (r.ok ? r.data : r.error) = buf.substr(1);
  }
  return r;
}

// Owns children: whatever was not collected is killed and reaped.
struct ChildSet {
  std::vector<Child> children;
  ChildSet() = default;
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;
  ~ChildSet() {
    for (Child& c : children) {
      if (c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      if (c.fd >= 0) ::close(c.fd);
    }
  }
  std::vector<RankResult> collect_all() {
    std::vector<RankResult> out;
    for (Child& c : children) out.push_back(collect(c));
    return out;
  }
};

// ---- whole worlds ------------------------------------------------------------
inline std::vector<Group> spec_groups(const WorldSpec& spec) {
  return spec.groups.empty() ? std::vector<Group>{world_group(spec.world)} : spec.groups;
}

inline std::vector<RankResult> run_threads(const WorldSpec& spec, const RankBody& body) {
  ThreadCommOptions opts;
  opts.slot_bytes = spec.slot_bytes;
  opts.timeout = spec.timeout;
  auto comms = make_thread_communicators(spec.world, spec_groups(spec), opts);
  std::vector<RankResult> results(static_cast<size_t>(spec.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < spec.world; ++r) {
    threads.emplace_back([&, r] {
      RankResult& out = results[static_cast<size_t>(r)];
      try {
        out.data = body(*comms[static_cast<size_t>(r)]);
        out.ok = true;
      } catch (const std::exception& e) {
        out.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

inline std::vector<RankResult> run_processes(const WorldSpec& spec, const RankBody& body) {
  const std::string name = unique_shm_name();
  ChildSet set;
  for (int r = 0; r < spec.world; ++r) {
    set.children.push_back(spawn([&, r] {
      ShmOptions o;
      o.name = name;
      o.rank = r;
      o.world_size = spec.world;
      o.groups = spec_groups(spec);
      o.slot_bytes = spec.slot_bytes;
      o.timeout = spec.timeout;
      auto comm = open_shm_communicator(o);
      return body(*comm);
    }));
  }
  return set.collect_all();
}

inline std::vector<RankResult> run_world(Mode mode, const WorldSpec& spec, const RankBody& body) {
  return mode == Mode::threads ? run_threads(spec, body) : run_processes(spec, body);
}

// ---- data helpers ------------------------------------------------------------
inline std::string to_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
inline std::vector<float> to_floats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}
inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Hybrid sharding of world 4: shards {0,1} {2,3}, replicas {0,2} {1,3}.
// Indices: 0 world, 1 shard0, 2 shard1, 3 replica0, 4 replica1.
inline std::vector<Group> hybrid4_groups() {
  return {world_group(4),
          {"shard0", {0, 1}},
          {"shard1", {2, 3}},
          {"replica0", {0, 2}},
          {"replica1", {1, 3}}};
}

}  // namespace shardscope::test::comm
