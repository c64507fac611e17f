#include "io/temp_registry.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace shardscope::io {

namespace {

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 registered
  pid_t owner = 0;
  char path[kMaxTempPath + 1] = {};
};

Slot g_slots[kMaxTemporaries];

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void remove_all_registered() {
  const pid_t self = ::getpid();
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2 && s.owner == self) ::unlink(s.path);
}

extern "C" void remove_temporaries_on_signal(int sig) {
  const int saved = errno;
  remove_all_registered();
  for (size_t i = 0; i < 3; ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  // Blocked while this handler runs: delivered, with the default action, on return.
  ::raise(sig);
  errno = saved;
}

// Called at every registration (rare: one per output file), so a handler
// reset to the default after the first output (a forked child, a library) is
// installed again.
void install_handlers() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < 3; ++i) {
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) != 0) continue;
    // A handler of the program's own, or an ignored signal (nohup): left alone.
    if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    g_previous[i] = current;
    ::sigaction(kSignals[i], &sa, nullptr);
  }
}

}  // namespace

int register_temporary(const std::string& path) {
  install_handlers();
  if (path.size() > kMaxTempPath) return -1;
  for (int i = 0; i < kMaxTemporaries; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].owner = ::getpid();
    g_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot < 0 || slot >= kMaxTemporaries) return;
  g_slots[slot].state.store(0, std::memory_order_release);
}

int registered_temporaries() {
  const pid_t self = ::getpid();
  int n = 0;
  for (const Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2 && s.owner == self) ++n;
  return n;
}

}  // namespace shardscope::io
