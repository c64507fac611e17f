// TcpStoreServer + TcpStore: requests, blocking, barriers, handshake refusals,
// connection errors, clock offset, rendezvous().
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "engine/launch/launch.h"
#include "tests/engine/launch/store_test_util.h"

using namespace shardscope::engine::launch;
using shardscope::engine::launch::test::free_port;
using namespace std::chrono_literals;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  FAIL("no LaunchError");
  return {};
}

}  // namespace

TEST_CASE("store: set, get, try_get, check, add") {
  TcpStoreServer server("127.0.0.1", 0, "run", 1);
  REQUIRE(server.port() > 0);
  TcpStore store("127.0.0.1", server.port(), "run", 1, 0, 5s);
  CHECK_FALSE(store.check("k"));
  CHECK_FALSE(store.try_get("k").has_value());
  store.set("k", std::string("v\0w", 3));  // values are bytes
  CHECK(store.check("k"));
  CHECK(store.get("k") == std::string("v\0w", 3));
  CHECK(store.try_get("k").value() == std::string("v\0w", 3));
  CHECK(server.peek("k").value() == std::string("v\0w", 3));
  store.set("k", "");
  CHECK(store.get("k").empty());
  CHECK(store.add("n", 5) == 5);
  CHECK(store.add("n", -7) == -2);
  CHECK(store.get("n") == "-2");
  store.set("k2", "x1");
  CHECK_THAT(error_of([&] { store.add("k2", 1); }),
             Catch::Contains("add('k2'): the key holds 'x1', not a decimal integer"));
}

TEST_CASE("store: get waits for a later set by another rank") {
  TcpStoreServer server("127.0.0.1", 0, "run", 2);
  TcpStore a("127.0.0.1", server.port(), "run", 2, 0, 10s);
  TcpStore b("127.0.0.1", server.port(), "run", 2, 1, 10s);
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    b.set("addr/1", "10.0.0.2:4000");
  });
  CHECK(a.get("addr/1") == "10.0.0.2:4000");
  setter.join();
}

TEST_CASE("store: get times out naming the key") {
  TcpStoreServer server("127.0.0.1", 0, "run", 1);
  TcpStore store("127.0.0.1", server.port(), "run", 1, 0, 200ms);
  CHECK_THAT(error_of([&] { store.get("never"); }), Catch::Contains("get('never')") &&
                                                        Catch::Contains("timed out after 200 ms") &&
                                                        Catch::Contains("never set"));
  store.set("after", "1");  // the connection is still in step after a timeout
  CHECK(store.get("after") == "1");
}

TEST_CASE("store: add from 4 clients x 250 is atomic (1000)") {
  TcpStoreServer server("127.0.0.1", 0, "run", 4);
  std::vector<std::thread> threads;
  std::atomic<int64_t> max_seen{0};
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      TcpStore s("127.0.0.1", server.port(), "run", 4, r, 10s);
      for (int i = 0; i < 250; ++i) {
        const int64_t v = s.add("counter", 1);
        int64_t prev = max_seen.load();
        while (v > prev && !max_seen.compare_exchange_weak(prev, v)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(server.peek("counter").value() == "1000");
  CHECK(max_seen.load() == 1000);
}

TEST_CASE("store: barrier of 3 ranks passes, twice under the same name") {
  TcpStoreServer server("127.0.0.1", 0, "run", 3);
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      TcpStore s("127.0.0.1", server.port(), "run", 3, r, 10s);
      s.add("before", 1);
      s.barrier("b");
      // Every rank added before any passed the barrier.
      if (s.get("before") == "3") passed.fetch_add(1);
      s.barrier("b");
      passed.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(passed.load() == 6);
}

TEST_CASE("store: a barrier with rank 1 missing times out naming it") {
  TcpStoreServer server("127.0.0.1", 0, "run", 3);
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      const int rank = i == 0 ? 0 : 2;
      TcpStore s("127.0.0.1", server.port(), "run", 3, rank, 300ms);
      errors[i] = error_of([&] { s.barrier("init"); });
    });
  }
  for (auto& t : threads) t.join();
  CHECK_THAT(errors[0], Catch::StartsWith("rank 0: barrier 'init'") &&
                            Catch::Contains("2 of 3 ranks arrived; missing ranks: 1"));
  CHECK_THAT(errors[1],
             Catch::StartsWith("rank 2: barrier 'init'") && Catch::Contains("missing ranks: 1"));
}

TEST_CASE("store: another world size or run id is refused on both sides") {
  TcpStoreServer server("127.0.0.1", 0, "X", 4);
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  CHECK(error_of([&] { TcpStore("127.0.0.1", server.port(), "Y", 2, 0, 2s); }) ==
        "rank 0: store at " + where +
            " belongs to run X with world size 4, this rank expects run Y with world size 2");
  CHECK(error_of([&] { TcpStore("127.0.0.1", server.port(), "X", 2, 1, 2s); }) ==
        "rank 1: store at " + where +
            " belongs to run X with world size 4, this rank expects run X with world size 2");
  CHECK_THAT(error_of([&] { TcpStore("127.0.0.1", server.port(), "X", 4, 4, 2s); }),
             Catch::Contains("serves ranks 0..3 of run X, a client claims rank 4"));
  const auto refusals = server.refusals();
  REQUIRE(refusals.size() == 3);
  CHECK(refusals[0] == "store at " + where +
                           " belongs to run X with world size 4, this rank expects run Y with "
                           "world size 2");
  // The matching client still gets in.
  TcpStore ok("127.0.0.1", server.port(), "X", 4, 3, 2s);
  ok.set("a", "b");
  CHECK(server.peek("a").value() == "b");
}

TEST_CASE("store: nothing listening at MASTER_PORT: the error names addr:port") {
  const int port = free_port();
  CHECK_THAT(error_of([&] { TcpStore("127.0.0.1", port, "run", 2, 1, 300ms); }),
             Catch::Contains("could not connect to the store at 127.0.0.1:" + std::to_string(port) +
                             " within 300 ms") &&
                 Catch::Contains("Connection refused"));
  CHECK_THAT(error_of([&] { TcpStore("127.0.0.1", 0, "run", 2, 1, 300ms); }),
             Catch::Contains("store port 0 outside 1..65535"));
}

TEST_CASE("store: a client may start before the server") {
  const int port = free_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port, "run", 1);
  });
  TcpStore store("127.0.0.1", port, "run", 1, 0, 10s);
  starter.join();
  store.set("x", "1");
  CHECK(server->peek("x").value() == "1");
}

TEST_CASE("store: a port in use is an error naming it") {
  TcpStoreServer a("127.0.0.1", 0, "run", 1);
  CHECK_THAT(error_of([&] { TcpStoreServer("127.0.0.1", a.port(), "run", 1); }),
             Catch::Contains("cannot listen on 127.0.0.1:" + std::to_string(a.port())));
}

TEST_CASE("store: the server going away fails a blocked get instead of hanging") {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "run", 1);
  TcpStore store("127.0.0.1", server->port(), "run", 1, 0, 20s);
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  const std::string error = error_of([&] { store.get("never"); });
  stopper.join();
  CHECK_THAT(error, Catch::Contains("get('never')") && Catch::Contains("closed the connection"));
  CHECK_THAT(error_of([&] { store.set("x", "1"); }), Catch::Contains("failed earlier"));
}

TEST_CASE("store: clock offset against the same CLOCK_MONOTONIC is about 0") {
  TcpStoreServer server("127.0.0.1", 0, "run", 1);
  TcpStore store("127.0.0.1", server.port(), "run", 1, 0, 5s);
  // Same clock on both sides: the estimate's error is at most half the best RTT,
  // far below 100 ms on loopback; a sign or midpoint error would be ~1e9 or more.
  const int64_t offset = store.clock_offset_ns();
  CHECK(offset > -100'000'000);
  CHECK(offset < 100'000'000);
}

TEST_CASE("store: a value over the 4 MiB message limit is refused by the client") {
  TcpStoreServer server("127.0.0.1", 0, "run", 1);
  TcpStore store("127.0.0.1", server.port(), "run", 1, 0, 5s);
  CHECK_THAT(error_of([&] { store.set("big", std::string(5u << 20, 'x')); }),
             Catch::Contains("over the limit of 4194304 bytes"));
  CHECK_THAT(error_of([&] { store.set(std::string(5000, 'k'), "v"); }),
             Catch::Contains("over the limit of 4096"));
  store.set("small", std::string(1u << 20, 'y'));  // 1 MiB is fine
  CHECK(store.get("small").size() == (1u << 20));
}

TEST_CASE("rendezvous: rank 0 serves unless the launcher does") {
  RankEnv env0;
  env0.rank = 0;
  env0.world_size = 2;
  env0.master_port = free_port();
  env0.run_id = "rdv";
  env0.source = "torchrun";
  RankEnv env1 = env0;
  env1.rank = 1;
  Rendezvous r0 = rendezvous(env0, 5s);
  Rendezvous r1 = rendezvous(env1, 5s);
  CHECK(r0.server != nullptr);
  CHECK(r1.server == nullptr);
  std::thread t([&] { r1.store->barrier("x"); });
  r0.store->barrier("x");
  t.join();
  CHECK(r0.server->port() == env0.master_port);

  RankEnv hosted = env0;
  hosted.launcher_hosts_store = true;
  TcpStoreServer launcher_server("127.0.0.1", 0, "rdv", 2);
  hosted.master_port = launcher_server.port();
  Rendezvous r = rendezvous(hosted, 5s);
  CHECK(r.server == nullptr);
  r.store->set("hi", "1");
  CHECK(launcher_server.peek("hi").value() == "1");
}
