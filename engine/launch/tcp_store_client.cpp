// TcpStore (the client) and rendezvous(). One blocking socket, one request at a time;
// every wait is bounded by poll() against a deadline.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "engine/launch/launch.h"
#include "engine/launch/store_protocol.h"

namespace shardscope::engine::launch {
namespace {

namespace p = protocol;

// The server answers a parked request itself when its timeout expires; the client
// waits this much longer before deciding the server is gone.
constexpr int64_t kAnswerGraceMs = 2000;
constexpr int kClockRounds = 8;

struct Response {
  p::Type type;
  std::string payload;
};

int64_t ms_left(int64_t deadline_ns) {
  return std::max<int64_t>(0, (deadline_ns - p::monotonic_ns() + 999999) / 1000000);
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    pollfd pfd{fd, events, 0};
    const int64_t left = ms_left(deadline_ns);
    const int n = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // let the following I/O report the error
  }
}

// One connection attempt bounded by the deadline; the connected fd or -1 with errno_out.
int try_connect(const addrinfo* ai, int64_t deadline_ns, int& errno_out) {
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    errno_out = errno;
    return -1;
  }
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      errno_out = errno;
      ::close(fd);
      return -1;
    }
    if (!wait_for(fd, POLLOUT, deadline_ns)) {
      errno_out = ETIMEDOUT;
      ::close(fd);
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno_out = err;
      ::close(fd);
      return -1;
    }
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

struct TcpStore::Impl {
  std::string addr;
  int port = 0;
  std::string run_id;
  int world_size = 0, rank = 0;
  int64_t timeout_ms = 0;
  int fd = -1;
  // Set when a reply did not come: the stream is out of step, every later call fails.
  std::string broken;
  std::mutex mu;  // one request at a time

  std::string where() const { return p::endpoint(addr, port); }
  std::string who() const { return "rank " + std::to_string(rank) + ": "; }

  void send_all(const std::string& bytes, int64_t deadline_ns, const std::string& what);
  void recv_exact(char* out, size_t n, int64_t deadline_ns, const std::string& what);
  // Sends one request and reads its reply; the reply must come by now + wait_ms + grace.
  Response call(p::Type type, const std::string& payload, int64_t wait_ms, const std::string& what);
  [[noreturn]] void fail(const std::string& message) {
    if (broken.empty()) broken = message;
    throw LaunchError(message);
  }
};

void TcpStore::Impl::send_all(const std::string& bytes, int64_t deadline_ns,
                              const std::string& what) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      fail(who() + what + ": sending to the store at " + where() +
           " failed: " + std::strerror(errno) + " (did the store's process exit?)");
    }
    if (!wait_for(fd, POLLOUT, deadline_ns)) {
      fail(who() + what + ": the store at " + where() + " did not take the request in time");
    }
  }
}

void TcpStore::Impl::recv_exact(char* out, size_t n, int64_t deadline_ns, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      fail(who() + what + ": the store at " + where() +
           " closed the connection (did the store's process exit?)");
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      fail(who() + what + ": reading from the store at " + where() +
           " failed: " + std::strerror(errno));
    }
    if (!wait_for(fd, POLLIN, deadline_ns)) {
      fail(who() + what + ": the store at " + where() + " did not answer within " +
           std::to_string(timeout_ms + kAnswerGraceMs) + " ms");
    }
  }
}

Response TcpStore::Impl::call(p::Type type, const std::string& payload, int64_t wait_ms,
                              const std::string& what) {
  if (!broken.empty())
    throw LaunchError(who() + what + ": the store connection failed earlier: " + broken);
  const int64_t deadline = p::monotonic_ns() + (wait_ms + kAnswerGraceMs) * 1000000;
  send_all(p::frame(type, payload), deadline, what);
  char header[p::kHeaderBytes];
  recv_exact(header, sizeof header, deadline, what);
  const p::Header h = p::decode_header(reinterpret_cast<const unsigned char*>(header));
  const std::string problem = p::header_problem(h);
  if (!problem.empty() || p::is_request(h.type)) {
    fail(who() + what + ": the peer at " + where() + " is not a shardscope store (" +
         (problem.empty() ? "unexpected message type" : problem) + ")");
  }
  Response resp{h.type, std::string(h.length, '\0')};
  recv_exact(resp.payload.data(), resp.payload.size(), deadline, what);
  return resp;
}

TcpStore::TcpStore(const std::string& addr, int port, const std::string& run_id, int world_size,
                   int rank, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.addr = addr;
  s.port = port;
  s.run_id = run_id;
  s.world_size = world_size;
  s.rank = rank;
  s.timeout_ms = std::max<int64_t>(0, timeout.count());
  if (port < 1 || port > 65535) {
    throw LaunchError(s.who() + "store port " + std::to_string(port) + " outside 1..65535");
  }
  const int64_t deadline = p::monotonic_ns() + s.timeout_ms * 1000000;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  std::string last_error;
  int attempts = 0;
  // Retry until the deadline: the server may not listen yet, or the name may not
  // resolve yet (a node still booting).
  for (;;) {
    ++attempts;
    addrinfo* res = nullptr;
    const std::string port_text = std::to_string(port);
    const int gai = getaddrinfo(addr.c_str(), port_text.c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve the address: ") + gai_strerror(gai);
    } else {
      int err = 0;
      s.fd = try_connect(res, deadline, err);
      freeaddrinfo(res);
      if (s.fd >= 0) break;
      last_error = std::strerror(err);
    }
    if (p::monotonic_ns() >= deadline) {
      throw LaunchError(s.who() + "could not connect to the store at " + s.where() + " within " +
                        std::to_string(s.timeout_ms) + " ms (" + std::to_string(attempts) +
                        " attempts, last: " + last_error +
                        "); check MASTER_ADDR/MASTER_PORT and that rank 0 or the launcher runs");
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min<int64_t>(50, std::max<int64_t>(1, ms_left(deadline)))));
  }
  std::string hello;
  p::put_str(hello, run_id);
  p::put_i64(hello, world_size);
  p::put_i64(hello, rank);
  const Response resp = s.call(p::Type::kHello, hello, s.timeout_ms, "handshake");
  if (resp.type == p::Type::kError) {
    p::Reader r(resp.payload);
    const std::string message = r.str(p::kMaxPayload);
    ::close(s.fd);
    s.fd = -1;
    throw LaunchError(s.who() + message);
  }
  if (resp.type != p::Type::kOk) {
    ::close(s.fd);
    s.fd = -1;
    throw LaunchError(s.who() + "handshake with the store at " + s.where() + ": unexpected reply");
  }
}

TcpStore::~TcpStore() {
  if (impl_->fd >= 0) ::close(impl_->fd);
}

namespace {

std::string key_payload(const std::string& key, const std::string& what) {
  if (key.size() > p::kMaxKeyBytes) {
    throw LaunchError(what + ": key of " + std::to_string(key.size()) +
                      " bytes is over the limit of 4096");
  }
  std::string out;
  p::put_str(out, key);
  return out;
}

// The message of a kError / kTimeout reply.
std::string reply_message(const Response& r) {
  p::Reader reader(r.payload);
  return reader.str(p::kMaxPayload);
}

}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string what = "set('" + key + "')";
  std::string payload = key_payload(key, what);
  p::put_str(payload, value);
  const Response r = s.call(p::Type::kSet, payload, s.timeout_ms, what);
  if (r.type == p::Type::kError) throw LaunchError(s.who() + reply_message(r));
  if (r.type != p::Type::kOk) s.fail(s.who() + what + ": unexpected reply from " + s.where());
}

std::string TcpStore::get(const std::string& key) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string what = "get('" + key + "')";
  std::string payload = key_payload(key, what);
  payload.push_back(1);
  p::put_i64(payload, s.timeout_ms);
  const Response r = s.call(p::Type::kGet, payload, s.timeout_ms, what);
  if (r.type == p::Type::kTimeout) throw LaunchError(s.who() + reply_message(r));
  if (r.type != p::Type::kValue) s.fail(s.who() + what + ": unexpected reply from " + s.where());
  return reply_message(r);
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string what = "try_get('" + key + "')";
  std::string payload = key_payload(key, what);
  payload.push_back(0);
  p::put_i64(payload, 0);
  const Response r = s.call(p::Type::kGet, payload, s.timeout_ms, what);
  if (r.type == p::Type::kMissing) return std::nullopt;
  if (r.type != p::Type::kValue) s.fail(s.who() + what + ": unexpected reply from " + s.where());
  return reply_message(r);
}

bool TcpStore::check(const std::string& key) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string what = "check('" + key + "')";
  const Response r = s.call(p::Type::kCheck, key_payload(key, what), s.timeout_ms, what);
  if (r.type != p::Type::kInt) s.fail(s.who() + what + ": unexpected reply from " + s.where());
  p::Reader reader(r.payload);
  return reader.i64() != 0;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string what = "add('" + key + "')";
  std::string payload = key_payload(key, what);
  p::put_i64(payload, delta);
  const Response r = s.call(p::Type::kAdd, payload, s.timeout_ms, what);
  if (r.type == p::Type::kError) throw LaunchError(s.who() + reply_message(r));
  if (r.type != p::Type::kInt) s.fail(s.who() + what + ": unexpected reply from " + s.where());
  p::Reader reader(r.payload);
  return reader.i64();
}

void TcpStore::barrier(const std::string& name) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string what = "barrier('" + name + "')";
  std::string payload = key_payload(name, what);
  p::put_i64(payload, s.timeout_ms);
  const Response r = s.call(p::Type::kBarrier, payload, s.timeout_ms, what);
  if (r.type == p::Type::kTimeout || r.type == p::Type::kError) {
    throw LaunchError(s.who() + reply_message(r));
  }
  if (r.type != p::Type::kOk) s.fail(s.who() + what + ": unexpected reply from " + s.where());
}

int64_t TcpStore::clock_offset_ns() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  int64_t best_rtt = std::numeric_limits<int64_t>::max(), best_offset = 0;
  for (int i = 0; i < kClockRounds; ++i) {
    const int64_t t0 = p::monotonic_ns();
    const Response r = s.call(p::Type::kClock, {}, s.timeout_ms, "clock_offset_ns()");
    const int64_t t1 = p::monotonic_ns();
    if (r.type != p::Type::kInt) {
      s.fail(s.who() + "clock_offset_ns(): unexpected reply from " + s.where());
    }
    p::Reader reader(r.payload);
    const int64_t server_ns = reader.i64();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      best_offset = server_ns - (t0 + (t1 - t0) / 2);  // server read its clock mid-trip
    }
  }
  return best_offset;
}

namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0;
}

}  // namespace

Rendezvous rendezvous(const RankEnv& env, std::chrono::milliseconds timeout) {
  Rendezvous out;
  if (env.rank == 0 && !env.launcher_hosts_store) {
    out.server =
        std::make_unique<TcpStoreServer>(is_loopback(env.master_addr) ? "127.0.0.1" : "0.0.0.0",
                                         env.master_port, env.run_id, env.world_size);
  }
  out.store = std::make_unique<TcpStore>(env.master_addr, env.master_port, env.run_id,
                                         env.world_size, env.rank, timeout);
  return out;
}

}  // namespace shardscope::engine::launch
