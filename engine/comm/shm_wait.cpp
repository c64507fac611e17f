#include "engine/comm/shm_wait.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

namespace shardscope::engine::comm::shm {

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds period) {
  const auto ns = period.count() > 0 ? period.count() : 1;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean "look again".
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

namespace {

// Reads /proc/<pid>/stat: state (field 3) and starttime (field 22). False when
// the file cannot be opened (errno tells why).
bool read_stat(pid_t pid, char* state, uint64_t* start_time) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name (field 2) is in parentheses and may contain spaces and ')'.
  const char* close = std::strrchr(buf, ')');
  if (!close || close[1] != ' ') {
    *state = '?';
    *start_time = 0;
    return true;
  }
  const char* p = close + 2;
  *state = *p;
  // Skip fields 3..21 (19 separators) to reach field 22.
  for (int field = 3; field < 22 && *p; ++field) {
    p = std::strchr(p, ' ');
    if (!p) break;
    ++p;
  }
  *start_time = p ? std::strtoull(p, nullptr, 10) : 0;
  return true;
}

}  // namespace

uint64_t process_start_time(pid_t pid) {
  char state = 0;
  uint64_t start = 0;
  return read_stat(pid, &state, &start) ? start : 0;
}

Liveness process_liveness(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return Liveness::gone;
  char state = 0;
  uint64_t start = 0;
  if (!read_stat(pid, &state, &start)) {
    if (errno == ENOENT) return Liveness::gone;
    // /proc unavailable: fall back to signal 0 (cannot tell zombies).
    return (::kill(pid, 0) == 0 || errno == EPERM) ? Liveness::alive : Liveness::gone;
  }
  if (state == 'Z' || state == 'X' || state == 'x') return Liveness::zombie;
  if (start_time != 0 && start != 0 && start != start_time) return Liveness::reused;
  return Liveness::alive;
}

const char* liveness_name(Liveness liveness) {
  switch (liveness) {
    case Liveness::alive:
      return "alive";
    case Liveness::gone:
      return "gone";
    case Liveness::zombie:
      return "gone (zombie)";
    case Liveness::reused:
      return "gone (pid reused)";
  }
  return "?";
}

}  // namespace shardscope::engine::comm::shm
