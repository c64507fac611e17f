// How often the host polls a device event it waits for (CudaRankExecutor::
// wait_device). No CUDA here: the schedule is tested without a device.
//
// A wait polls cudaEventQuery with a yield in between for its first
// kPollSpinNs (the end of a short wait is noticed within a poll's latency, as
// before), then sleeps between polls for 1/64 of the time waited so far, at
// most kPollMaxPauseNs. So the host notices the end of a wait of T at most
// T / 64 late (1.6%), and a long wait polls about kPollSpinNs / (poll +
// yield) + 64 ln(12.8 ms / 3.2 ms) + (T - 12.8 ms) / 200 us times (about
// 5,250 for 405 ms) instead of once a microsecond.
// Why it matters: CUPTI records every cudaEventQuery as a synchronisation
// record; on an H200 a 400 ms gpt2-small step polled in a yield loop left
// 380,000 of them per step (129 MB of trace for 7 steps, docs/cuda.md).
#pragma once

#include <algorithm>
#include <cstdint>

namespace shardscope::engine::cuda {

inline constexpr int64_t kPollSpinNs = 3'200'000;    // yield-polling phase (ns)
inline constexpr int64_t kPollMaxPauseNs = 200'000;  // longest pause between polls (ns)

// Pause (ns) before the next poll after waiting `waited_ns`: 0 = yield and
// poll again at once. Non-decreasing in waited_ns; 0 below kPollSpinNs; from
// there waited_ns / 64 (50 us at kPollSpinNs) up to kPollMaxPauseNs.
inline int64_t poll_pause_ns(int64_t waited_ns) {
  if (waited_ns < kPollSpinNs) return 0;
  return std::min(waited_ns / 64, kPollMaxPauseNs);
}

}  // namespace shardscope::engine::cuda
