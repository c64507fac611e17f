// CollectiveTurns, the emulated communicator's timing rules without a GPU:
// one collective at a time per process group in issue order, groups
// concurrent, release_all for abort and destruction. Times in ns, by hand.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "engine/cuda/comm/collective_turns.h"

using shardscope::engine::cuda::CollectiveTurns;

TEST_CASE("turns: a collective starts when reached and is due its duration later",
          "[cuda][comm][turns]") {
  CollectiveTurns turns;
  const size_t a = turns.issue(0, 20);
  CHECK_FALSE(turns.next_due());
  turns.reached(a, 100);
  CHECK(turns.turn(a).start_ns == 100);
  REQUIRE(turns.next_due());
  CHECK(*turns.next_due() == std::make_pair(int64_t{120}, a));
  turns.release(a, 121);
  CHECK(turns.turn(a).released_ns == 121);
  CHECK_FALSE(turns.next_due());
}

TEST_CASE("turns: one group runs its collectives one at a time, in issue order",
          "[cuda][comm][turns]") {
  // The all-gather (stream a) and reduce-scatter (stream b) of one group: b's
  // stream gets there first, but the reduce-scatter waits for the all-gather.
  CollectiveTurns turns;
  const size_t ag = turns.issue(0, 20), rs = turns.issue(0, 30);
  turns.reached(rs, 100);
  CHECK(turns.turn(rs).start_ns == 0);
  CHECK_FALSE(turns.next_due());
  turns.reached(ag, 105);
  CHECK(turns.turn(ag).start_ns == 105);
  CHECK(*turns.next_due() == std::make_pair(int64_t{125}, ag));
  turns.release(ag, 125);
  CHECK(turns.turn(rs).start_ns == 125);  // its turn: the all-gather was released
  CHECK(*turns.next_due() == std::make_pair(int64_t{155}, rs));
  turns.release(rs, 155);
  CHECK(turns.turn(rs).released_ns == 155);

  // Reached after its predecessor was released: starts when reached.
  const size_t third = turns.issue(0, 5);
  turns.reached(third, 200);
  CHECK(turns.turn(third).start_ns == 200);
}

TEST_CASE("turns: collectives of different groups run concurrently", "[cuda][comm][turns]") {
  CollectiveTurns turns;
  const size_t a = turns.issue(0, 20), b = turns.issue(2, 20), c = turns.issue(0, 10);
  turns.reached(a, 100);
  turns.reached(b, 100);
  turns.reached(c, 100);
  CHECK(turns.turn(a).start_ns == 100);
  CHECK(turns.turn(b).start_ns == 100);                         // another group: not held by a
  CHECK(turns.turn(c).start_ns == 0);                           // a's group: held by a
  CHECK(*turns.next_due() == std::make_pair(int64_t{120}, a));  // a tie: lower id first
  turns.release(a, 120);
  CHECK(*turns.next_due() == std::make_pair(int64_t{120}, b));
  turns.release(b, 120);
  CHECK(*turns.next_due() == std::make_pair(int64_t{130}, c));
}

TEST_CASE("turns: release_all releases what was reached, later arrivals at once",
          "[cuda][comm][turns]") {
  CollectiveTurns turns;
  const size_t a = turns.issue(0, 100), b = turns.issue(0, 100), c = turns.issue(0, 100);
  turns.reached(a, 10);
  turns.reached(b, 12);  // waits for a
  turns.release_all(15);
  CHECK(turns.turn(a).start_ns == 10);
  CHECK(turns.turn(a).released_ns == 15);
  CHECK(turns.turn(b).start_ns == 15);
  CHECK(turns.turn(b).released_ns == 15);
  CHECK(turns.turn(c).released_ns == 0);  // not reached yet
  CHECK_FALSE(turns.next_due());
  turns.reached(c, 20);
  CHECK(turns.turn(c).start_ns == 20);
  CHECK(turns.turn(c).released_ns == 20);
  const size_t d = turns.issue(0, 100);  // issued after: never waits
  turns.reached(d, 30);
  CHECK(turns.turn(d).released_ns == 30);
  CHECK_FALSE(turns.next_due());
}

TEST_CASE("turns: a withdrawn collective does not hold its group", "[cuda][comm][turns]") {
  CollectiveTurns turns;
  const size_t a = turns.issue(0, 10), b = turns.issue(0, 10);
  turns.withdraw(b, 50);  // its launch failed: never reached
  CHECK(turns.turn(b).released_ns == 50);
  turns.reached(a, 60);
  turns.release(a, 70);
  const size_t c = turns.issue(0, 10);
  turns.reached(c, 80);
  CHECK(turns.turn(c).start_ns == 80);  // not waiting for b
}

TEST_CASE("turns: misuse is refused", "[cuda][comm][turns]") {
  CollectiveTurns turns;
  CHECK_THROWS_AS(turns.issue(0, -1), std::invalid_argument);
  const size_t a = turns.issue(0, 10);
  CHECK_THROWS_AS(turns.release(a, 5), std::logic_error);  // not started
  CHECK_THROWS_AS(turns.turn(7), std::out_of_range);
}
