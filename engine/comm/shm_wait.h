// Low-level waiting and liveness for the shared-memory communicator: futex
// sleep/wake on a 32-bit word of a shared mapping, and process identity
// (pid + start time) to tell a live peer from a dead, zombie or reused pid.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace shardscope::engine::comm::shm {

// Sleeps while *word == expected, at most `period` (spurious wake-ups allowed).
// Works across processes (no FUTEX_PRIVATE_FLAG).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds period);
// Wakes every sleeper on `word`.
void futex_wake_all(std::atomic<uint32_t>* word);
// A spin-loop hint (pause on x86).
void cpu_relax();

// starttime of /proc/<pid>/stat (clock ticks since boot); 0 when unreadable.
uint64_t process_start_time(pid_t pid);

enum class Liveness { alive, gone, zombie, reused };
// `start_time` is the value recorded at attach (0: not checked).
Liveness process_liveness(pid_t pid, uint64_t start_time);
const char* liveness_name(Liveness liveness);

}  // namespace shardscope::engine::comm::shm
