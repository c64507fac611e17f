// The host's polling schedule for device waits (engine/cuda/exec/host_poll.h):
// no pause while a wait is short, pauses of 1/64 of the time waited up to
// 200 us after that, so that a late notice is bounded and a long wait polls
// a few thousand times instead of once a microsecond.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include "engine/cuda/exec/host_poll.h"

using namespace shardscope::engine::cuda;

namespace {

struct WaitModel {
  int64_t polls = 0;
  int64_t noticed_ns = 0;  // when the poll that saw the end ran
};

// The wait loop against a device that finishes at end_ns: each poll and
// yield takes yield_ns, each pause takes exactly poll_pause_ns.
WaitModel model_wait(int64_t end_ns, int64_t yield_ns) {
  WaitModel m;
  int64_t t = 0;
  for (;;) {
    ++m.polls;
    if (t >= end_ns) {
      m.noticed_ns = t;
      return m;
    }
    const int64_t pause = poll_pause_ns(t);
    t += pause > 0 ? pause : yield_ns;
  }
}

}  // namespace

TEST_CASE("poll pauses: none in the spin phase, then 1/64 of the wait up to 200 us",
          "[cuda][host_poll]") {
  CHECK(poll_pause_ns(0) == 0);
  CHECK(poll_pause_ns(3'199'999) == 0);
  CHECK(poll_pause_ns(3'200'000) == 50'000);
  CHECK(poll_pause_ns(6'400'000) == 100'000);
  CHECK(poll_pause_ns(12'800'000) == 200'000);
  CHECK(poll_pause_ns(400'000'000) == 200'000);
  for (int64_t t = 0, last = 0; t < 50'000'000; t += 7'919) {
    const int64_t p = poll_pause_ns(t);
    CHECK(p >= last);  // non-decreasing
    CHECK(p <= t / 64);
    last = p;
  }
}

TEST_CASE("a wait is noticed at most 1/64 late after the spin phase, in few polls",
          "[cuda][host_poll]") {
  constexpr int64_t kYieldNs = 1'000;  // a cudaEventQuery and a yield
  for (int64_t end : {int64_t{500'000}, int64_t{3'200'000}, int64_t{5'000'000}, int64_t{73'000'000},
                      int64_t{405'000'000}}) {
    INFO("device finishes at " << end << " ns");
    const WaitModel m = model_wait(end, kYieldNs);
    CHECK(m.noticed_ns >= end);
    CHECK(m.noticed_ns - end <= std::max(kYieldNs, end / 64));
  }
  // The H200's 405 ms gpt2-small step: 3,200 yield polls, 89 pauses growing
  // from 50 us to 200 us (to 12.8 ms), then 1,961 of 200 us: about 5,200
  // polls, where a yield loop makes 405,000.
  const WaitModel step = model_wait(405'000'000, kYieldNs);
  CHECK(step.polls > 5'000);
  CHECK(step.polls < 5'400);
  // Below the spin phase nothing changes: one poll per yield.
  CHECK(model_wait(1'000'000, kYieldNs).polls == 1'001);
}
