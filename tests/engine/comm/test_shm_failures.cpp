// Failure handling: a killed peer, abort(), timeouts, mismatched calls and
// configurations, and the life of the named segment (stale, collision, unlink).
#include <fcntl.h>
#include <sys/mman.h>

#include <catch2/catch.hpp>

#include "engine/comm/shm_segment.h"
#include "tests/engine/comm/comm_harness.h"

using namespace shardscope::test::comm;
using Catch::Matchers::Contains;

namespace {

constexpr Mode kModes[] = {Mode::threads, Mode::processes};

bool shm_name_exists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

ShmOptions options(const std::string& name, int rank, int world) {
  ShmOptions o;
  o.name = name;
  o.rank = rank;
  o.world_size = world;
  o.groups = {world_group(world)};
  o.slot_bytes = 64 << 10;
  o.timeout = std::chrono::milliseconds(10'000);
  return o;
}

// Rank body for the kill tests: 20 chunked all_reduces of 1 MiB, then a
// barrier. The victim kills itself with SIGKILL 30 ms into them.
std::string all_reduce_until_killed(Communicator& c, int victim) {
  if (c.rank() == victim) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ::kill(getpid(), SIGKILL);
    }).detach();
  }
  std::vector<float> data(256 << 10, 1.0f);
  for (int it = 0; it < 20; ++it) c.all_reduce(0, data.data(), data.size(), ReduceOp::sum);
  if (c.rank() == victim) ::pause();  // the kill comes first
  c.barrier(0);
  return "completed";
}

}  // namespace

TEST_CASE("a rank killed with SIGKILL mid-collective makes the others throw naming it") {
  // The communicator timeout is 10 s: a detection that relied on it would
  // throw a timeout message instead of "is gone".
  WorldSpec spec{3};
  spec.slot_bytes = 64 << 10;
  spec.timeout = std::chrono::milliseconds(10'000);
  const auto results =
      run_processes(spec, [](Communicator& c) { return all_reduce_until_killed(c, 1); });
  REQUIRE_FALSE(results[1].ok);
  REQUIRE(results[1].error == "killed by signal 9");
  for (size_t r : {size_t{0}, size_t{2}}) {
    INFO("rank " << r);
    REQUIRE_FALSE(results[r].ok);
    REQUIRE_THAT(results[r].error, Contains("rank 1 (pid ") && Contains("is gone") &&
                                       Contains("on group world (seq "));
  }
}

TEST_CASE("a killed child of rank 0 is seen as gone while still a zombie") {
  // Rank 0 is this process; ranks 1 and 2 are its children. Rank 1's corpse stays
  // a zombie until rank 0 reaps it, which it can only do after throwing.
  const std::string name = unique_shm_name();
  ChildSet set;
  for (int r = 1; r <= 2; ++r) {
    set.children.push_back(spawn([&, r] {
      auto comm = open_shm_communicator(options(name, r, 3));
      return all_reduce_until_killed(*comm, 1);
    }));
  }
  std::string error;
  try {
    auto comm = open_shm_communicator(options(name, 0, 3));
    all_reduce_until_killed(*comm, 1);
  } catch (const CommError& e) {
    error = e.what();
  }
  const pid_t victim = set.children[0].pid;
  REQUIRE_THAT(error, Contains("rank 1 (pid " + std::to_string(victim) + ") is gone (zombie)"));
  const auto results = set.collect_all();
  REQUIRE(results[0].error == "killed by signal 9");
  REQUIRE_THAT(results[1].error, Contains("rank 1 (pid " + std::to_string(victim) + ")"));
  REQUIRE_FALSE(shm_name_exists(name));
}

TEST_CASE("abort(message) makes peers' pending and later calls throw with the message") {
  for (Mode mode : kModes) {
    const auto results = run_world(mode, {3}, [](Communicator& c) {
      if (c.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // peers are waiting by now
        c.abort("loss is NaN at step 3");
      }
      std::string out;
      for (int call = 0; call < 2; ++call) {
        try {
          std::vector<float> d(4, 1.0f);
          c.all_reduce(0, d.data(), d.size(), ReduceOp::sum);
          out += "completed|";
        } catch (const CommError& e) {
          out += std::string(e.what()) + "|";
        }
      }
      return out;
    });
    INFO(mode_name(mode));
    for (const auto& r : results) {
      REQUIRE(r.ok);
      INFO(r.data);
      // Both calls fail on every rank, each naming rank 2 and its message.
      const auto first = r.data.substr(0, r.data.find('|'));
      const auto second = r.data.substr(r.data.find('|') + 1);
      REQUIRE_THAT(first, Contains("rank 2 aborted: loss is NaN at step 3"));
      REQUIRE_THAT(second, Contains("rank 2 aborted: loss is NaN at step 3"));
    }
  }
}

TEST_CASE("a wait past the timeout throws naming the member that has not arrived") {
  for (Mode mode : kModes) {
    WorldSpec spec{3};
    spec.timeout = std::chrono::milliseconds(1000);
    const auto results = run_world(mode, spec, [](Communicator& c) {
      if (c.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(3000));
      } else {
        c.barrier(0);  // seq 1 for ranks 0 and 1
      }
      c.barrier(0);
      return std::string("completed");
    });
    INFO(mode_name(mode));
    REQUIRE_FALSE(results[0].ok);
    REQUIRE_FALSE(results[1].ok);
    // Whichever of ranks 0 and 1 times out first publishes; the other may report it.
    for (size_t r : {size_t{0}, size_t{1}}) {
      REQUIRE_THAT(results[r].error,
                   Contains("timeout after 1 s: barrier on group world (seq 1)") &&
                       Contains("not arrived: rank 2 (its latest call: none seq 0)"));
    }
    // Rank 2 arrives late and is refused at once with the same record.
    REQUIRE_FALSE(results[2].ok);
    REQUIRE_THAT(results[2].error,
                 Contains("timeout after 1 s") && Contains("not arrived: rank 2"));
  }
}

TEST_CASE("mismatched collectives on one group fail on every member") {
  for (Mode mode : kModes) {
    const auto results = run_world(mode, {2}, [](Communicator& c) {
      std::vector<float> d(8, 1.0f), out(16);
      if (c.rank() == 0)
        c.all_reduce(0, d.data(), d.size(), ReduceOp::sum);
      else
        c.all_gather(0, d.data(), out.data(), d.size() * sizeof(float));
      return std::string("completed");
    });
    INFO(mode_name(mode));
    for (const auto& r : results) {
      REQUIRE_FALSE(r.ok);
      REQUIRE_THAT(r.error, Contains("collectives do not match on group world"));
    }
    REQUIRE_THAT(results[0].error, Contains("rank 0 called all_reduce seq 1 of 32 bytes but rank 1 "
                                            "called all_gather seq 1 of 32 bytes"));
  }
}

TEST_CASE("a call on a group the rank is not in, or a root outside the group, is refused") {
  auto comms = make_thread_communicators(4, hybrid4_groups());
  std::vector<float> d(4);
  REQUIRE_THROWS_WITH(comms[0]->all_reduce(2, d.data(), 4, ReduceOp::sum),
                      Contains("rank 0 is not a member of group shard1 {2,3}: all_reduce"));
  auto fresh = make_thread_communicators(2, {world_group(2), {"solo", {1}}});
  REQUIRE_THROWS_WITH(fresh[1]->broadcast(1, d.data(), 16, 0),
                      Contains("broadcast root 0 is not a member of group solo"));
}

TEST_CASE("a destroyed thread communicator makes peers waiting for it throw") {
  ThreadCommOptions opts;
  opts.timeout = std::chrono::milliseconds(10'000);
  auto comms = make_thread_communicators(2, {world_group(2)}, opts);
  std::string error;
  std::thread waiter([&] {
    try {
      comms[0]->barrier(0);
    } catch (const CommError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1].reset();
  waiter.join();
  REQUIRE_THAT(error, Contains("rank 1 closed its communicator: barrier on group world (seq 1)"));
}

TEST_CASE("invalid configurations are refused naming the field") {
  REQUIRE_THROWS_WITH(make_thread_communicators(2, {{"g", {1, 0}}}),
                      Contains("group 0 (\"g\") ranks must be strictly ascending (1 then 0)"));
  REQUIRE_THROWS_WITH(make_thread_communicators(2, {{"g", {0, 2}}}),
                      Contains("holds rank 2, outside world size 2"));
  REQUIRE_THROWS_WITH(make_thread_communicators(2, {world_group(2), world_group(2)}),
                      Contains("group name \"world\" is used twice"));
  REQUIRE_THROWS_WITH(make_thread_communicators(2, {}), Contains("groups is empty"));
  ThreadCommOptions odd;
  odd.slot_bytes = 1000;
  REQUIRE_THROWS_WITH(make_thread_communicators(2, {world_group(2)}, odd),
                      Contains("slot_bytes 1000 must be a multiple of 128"));
  ShmOptions bad = options("no-slash", 0, 2);
  REQUIRE_THROWS_WITH(open_shm_communicator(bad), Contains("shm name \"no-slash\" is invalid"));
}

TEST_CASE("attach refuses a different world size or group table, then the right rank joins") {
  const std::string name = unique_shm_name();
  std::string rank0_error = "none";
  std::thread creator([&] {
    try {
      auto comm = open_shm_communicator(options(name, 0, 2));
      comm->barrier(0);
    } catch (const CommError& e) {
      rank0_error = e.what();
    }
  });
  REQUIRE_THROWS_WITH(open_shm_communicator(options(name, 1, 3)),
                      Contains("shm segment " + name +
                               " was created for world size 2 but rank 1 "
                               "was opened with world size 3"));
  ShmOptions other_groups = options(name, 1, 2);
  other_groups.groups.push_back({"pair", {0, 1}});
  REQUIRE_THROWS_WITH(open_shm_communicator(other_groups),
                      Contains("was created with a different group table (1 groups) than rank 1's "
                               "(2 groups)"));
  REQUIRE_THROWS_WITH(open_shm_communicator(options(name, 0, 2)),
                      Contains("shm segment " + name + " already exists, created by pid " +
                               std::to_string(getpid()) + " which is still running"));
  {
    auto comm = open_shm_communicator(options(name, 1, 2));
    comm->barrier(0);
  }
  creator.join();
  REQUIRE(rank0_error == "none");
  REQUIRE_FALSE(shm_name_exists(name));  // rank 0 unlinked it once both attached
}

TEST_CASE(
    "a stale segment whose creator died is replaced, and attach timeouts name the missing ranks") {
  const std::string name = unique_shm_name();
  {
    ChildSet set;
    set.children.push_back(spawn([&] {
      auto comm = open_shm_communicator(options(name, 0, 2));  // rank 1 never comes
      return std::string("attached");
    }));
    while (!shm_name_exists(name)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // initialised by now
    ::kill(set.children[0].pid, SIGKILL);
    REQUIRE(collect(set.children[0]).error == "killed by signal 9");
  }
  REQUIRE(shm_name_exists(name));  // left behind by the dead creator
  std::string creator_error = "none";
  std::thread creator([&] {
    try {
      open_shm_communicator(options(name, 0, 2))->barrier(0);
    } catch (const CommError& e) {
      creator_error = e.what();
    }
  });
  open_shm_communicator(options(name, 1, 2))->barrier(0);
  creator.join();
  REQUIRE(creator_error == "none");
  REQUIRE_FALSE(shm_name_exists(name));

  ShmOptions alone = options(unique_shm_name(), 0, 3);
  alone.timeout = std::chrono::milliseconds(200);
  REQUIRE_THROWS_WITH(open_shm_communicator(alone),
                      Contains("rank(s) 1, 2 of world size 3 have not attached"));
  REQUIRE_FALSE(shm_name_exists(alone.name));
  ShmOptions orphan = options(unique_shm_name(), 1, 2);
  orphan.timeout = std::chrono::milliseconds(200);
  REQUIRE_THROWS_WITH(open_shm_communicator(orphan),
                      Contains("rank 1 could not attach to shm segment " + orphan.name +
                               " within 0.2 s: no segment of that name exists"));
}

TEST_CASE("stale segments of dead creators are swept, live and foreign ones are kept") {
  const std::string prefix = "sstest-" + std::to_string(getpid()) + "-sweep-";
  const std::string dead = "/" + prefix + "dead", live = "/" + prefix + "live",
                    foreign = "/" + prefix + "foreign";
  ChildSet set;
  for (const std::string& name : {dead, live}) {
    set.children.push_back(spawn([name] {
      auto comm = open_shm_communicator(options(name, 0, 2));  // rank 1 never comes
      return std::string("attached");
    }));
    while (!shm_name_exists(name)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // initialised by now
  ::kill(set.children[0].pid, SIGKILL);                        // the rank 0 that created `dead`
  REQUIRE(collect(set.children[0]).error == "killed by signal 9");
  // A segment that is not a communicator's (no shardscope magic).
  const int fd = shm_open(foreign.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 1 << 16) == 0);
  ::close(fd);
  REQUIRE(shm_name_exists(dead));

  const std::vector<std::string> removed = shm::remove_stale_segments(prefix);
  CHECK(removed == std::vector<std::string>{dead});
  CHECK_FALSE(shm_name_exists(dead));
  CHECK(shm_name_exists(live));  // its rank 0 still waits for rank 1
  CHECK(shm_name_exists(foreign));
  shm_unlink(foreign.c_str());
  ::kill(set.children[1].pid, SIGKILL);
  (void)collect(set.children[1]);
  CHECK(shm::remove_stale_segments(prefix) == std::vector<std::string>{live});
}
