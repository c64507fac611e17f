// TcpStoreServer against junk connections: each is dropped (or times out) while a
// well-behaved client keeps working.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <random>
#include <thread>

#include "engine/launch/launch.h"
#include "engine/launch/store_protocol.h"
#include "tests/engine/launch/store_test_util.h"

using namespace shardscope::engine::launch;
using namespace shardscope::engine::launch::test;
namespace p = shardscope::engine::launch::protocol;
using namespace std::chrono_literals;

namespace {

void send_bytes(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

std::string header(p::Type type, uint32_t length, uint32_t magic = p::kMagic) {
  std::string h;
  p::put_u32(h, magic);
  h.push_back(static_cast<char>(p::kVersion & 0xFF));
  h.push_back(static_cast<char>(p::kVersion >> 8));
  const auto t = static_cast<uint16_t>(type);
  h.push_back(static_cast<char>(t & 0xFF));
  h.push_back(static_cast<char>(t >> 8));
  p::put_u32(h, length);
  return h;
}

std::string hello(const std::string& run, int world, int rank) {
  std::string payload;
  p::put_str(payload, run);
  p::put_i64(payload, world);
  p::put_i64(payload, rank);
  return p::frame(p::Type::kHello, payload);
}

}  // namespace

TEST_CASE("store junk: random bytes, huge length, bad version, bad type are dropped") {
  TcpStoreServer server("127.0.0.1", 0, "run", 2, 10s);
  TcpStore good("127.0.0.1", server.port(), "run", 2, 0, 5s);
  good.set("a", "1");

  std::mt19937 rng(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  const int random_fd = raw_connect(server.port());
  send_bytes(random_fd, noise);
  CHECK(closed_by_peer_within(random_fd, 5000));

  const int http_fd = raw_connect(server.port());
  send_bytes(http_fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(closed_by_peer_within(http_fd, 5000));

  const int huge_fd = raw_connect(server.port());
  send_bytes(huge_fd, header(p::Type::kHello, 0xFFFFFFFFu));
  CHECK(closed_by_peer_within(huge_fd, 5000));

  const int version_fd = raw_connect(server.port());
  std::string v2 = hello("run", 2, 1);
  v2[4] = 2;  // version 2
  send_bytes(version_fd, v2);
  CHECK(closed_by_peer_within(version_fd, 5000));

  // A greeted connection that then sends an unknown type, then one with a payload
  // whose string length runs past its end.
  const int type_fd = raw_connect(server.port());
  send_bytes(type_fd, hello("run", 2, 1) + header(static_cast<p::Type>(999), 0));
  CHECK(closed_by_peer_within(type_fd, 5000));
  const int short_fd = raw_connect(server.port());
  std::string bad_set;
  p::put_u32(bad_set, 1000);  // key "length" 1000, 2 bytes follow
  bad_set += "ab";
  send_bytes(short_fd, hello("run", 2, 1) + p::frame(p::Type::kSet, bad_set));
  CHECK(closed_by_peer_within(short_fd, 5000));
  // A request before the handshake.
  const int early_fd = raw_connect(server.port());
  send_bytes(early_fd, p::frame(p::Type::kClock, ""));
  CHECK(closed_by_peer_within(early_fd, 5000));

  for (int fd : {random_fd, http_fd, huge_fd, version_fd, type_fd, short_fd, early_fd}) ::close(fd);
  CHECK(good.get("a") == "1");
  good.set("b", "2");
  CHECK(server.peek("b").value() == "2");
  CHECK(server.refusals().empty());  // junk is dropped, not refused
}

TEST_CASE("store junk: a half message or no handshake stalls only itself, then is dropped") {
  TcpStoreServer server("127.0.0.1", 0, "run", 2, 400ms);
  TcpStore good("127.0.0.1", server.port(), "run", 2, 0, 5s);

  const int half_fd = raw_connect(server.port());
  const std::string h = hello("run", 2, 1);
  send_bytes(half_fd, h.substr(0, h.size() / 2));
  const int silent_fd = raw_connect(server.port());
  // The greeted connection that stalls in the middle of its second message.
  const int mid_fd = raw_connect(server.port());
  const std::string set = p::frame(p::Type::kSet, [] {
    std::string s;
    p::put_str(s, "k");
    p::put_str(s, "v");
    return s;
  }());
  send_bytes(mid_fd, hello("run", 2, 1) + set.substr(0, 5));

  // While they stall, the good client is served at once.
  for (int i = 0; i < 20; ++i) good.add("n", 1);
  CHECK(good.get("n") == "20");

  CHECK(closed_by_peer_within(half_fd, 5000));
  CHECK(closed_by_peer_within(silent_fd, 5000));
  CHECK(closed_by_peer_within(mid_fd, 5000));
  for (int fd : {half_fd, silent_fd, mid_fd}) ::close(fd);
  CHECK_FALSE(server.peek("k").has_value());
  CHECK(good.add("n", 1) == 21);
}

namespace {

// Resident set size of this process, bytes (VmRSS of /proc/self/status).
int64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

}  // namespace

TEST_CASE("store junk: a client flooding requests without reading replies is bounded, dropped") {
  TcpStoreServer server("127.0.0.1", 0, "run", 2, 300ms);
  TcpStore good("127.0.0.1", server.port(), "run", 2, 0, 5s);
  good.set("big", std::string(1u << 20, 'x'));
  const int64_t rss_before = rss_bytes();
  REQUIRE(rss_before > 0);
  // 2000 gets of a 1 MiB value: 2 GiB of replies if the server answered them all
  // into memory; it answers one at a time as the peer reads, and this peer never does.
  const int fd = raw_connect(server.port());
  std::string flood = hello("run", 2, 1);
  std::string get;
  p::put_str(get, "big");
  get.push_back(0);
  p::put_i64(get, 0);
  for (int i = 0; i < 2000; ++i) flood += p::frame(p::Type::kGet, get);
  send_bytes(fd, flood);
  for (int i = 0; i < 10; ++i) CHECK(good.add("n", 1) == i + 1);  // others still served
  std::this_thread::sleep_for(1s);                                // past the stall timeout
  CHECK(rss_bytes() - rss_before < (256 << 20));
  CHECK(closed_by_peer_within(fd, 5000));
  ::close(fd);
  CHECK(good.get("big").size() == (1u << 20));
}
