// TcpStoreServer: one thread, poll() over a listening socket, a wake-up pipe and
// every connection (non-blocking). Blocked get()s and barriers are parked on their
// connection with a deadline; the server answers them (value, or a timeout message
// naming the key / the missing ranks) so the client's connection stays in sync.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "engine/launch/launch.h"
#include "engine/launch/store_protocol.h"

namespace shardscope::engine::launch {
namespace {

namespace p = protocol;

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxRefusals = 64;
constexpr size_t kMaxBarrierNames = 65536;

enum class Parked { kNone, kGet, kBarrier };

struct Conn {
  int fd = -1;
  std::string in;   // bytes received, not yet a whole message
  std::string out;  // bytes to send
  size_t out_sent = 0;
  bool greeted = false;  // handshake accepted
  bool close_after_write = false;
  int rank = -1;
  // Since when `in` holds a partial message, or the connection waits for its
  // handshake (ns, CLOCK_MONOTONIC); -1 when neither.
  int64_t stalled_since_ns = -1;
  // A parked request: waits for `key` (get) or barrier `key` generation `generation`.
  Parked parked = Parked::kNone;
  std::string key;
  int64_t generation = 0;
  int64_t timeout_ms = 0;
  int64_t deadline_ns = 0;
};

// Arrivals per rank at one barrier name; generation k is complete when every
// rank's count is >= k.
struct BarrierState {
  std::vector<int64_t> arrivals;
};

}  // namespace

struct TcpStoreServer::Impl {
  std::string addr;
  int port = 0;
  std::string run_id;
  int world_size = 0;
  int64_t stall_timeout_ns = 0;
  int listen_fd = -1;
  int wake_read = -1, wake_write = -1;
  std::atomic<bool> stopping{false};
  std::thread thread;

  mutable std::mutex mu;  // guards kv, stored_bytes, refusals (the thread and peek())
  std::map<std::string, std::string> kv;
  size_t stored_bytes = 0;
  std::vector<std::string> refused;

  std::map<std::string, BarrierState> barriers;  // thread only
  std::vector<Conn> conns;                       // thread only

  std::string where() const { return p::endpoint(addr, port); }

  void run();
  void accept_all(int64_t now);
  void read_from(Conn& c, int64_t now);
  void process_input(Conn& c, int64_t now);
  void write_to(Conn& c, int64_t now);
  void handle(Conn& c, p::Type type, const std::string& payload, int64_t now);
  void handshake(Conn& c, const std::string& payload);
  void reply(Conn& c, p::Type type, const std::string& payload = {}) {
    c.out += p::frame(type, payload);
  }
  void try_release(Conn& c);
  void expire(Conn& c, int64_t now);
  std::string missing_ranks(const BarrierState& b, int64_t generation) const;
  void set_value(const std::string& key, std::string value);
};

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& addr, int port, const std::string& run_id,
                               int world_size, std::chrono::milliseconds stall_timeout)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.addr = addr;
  s.run_id = run_id;
  s.world_size = world_size;
  s.stall_timeout_ns = static_cast<int64_t>(stall_timeout.count()) * 1000000;
  if (world_size < 1) throw LaunchError("store: world size " + std::to_string(world_size) + " < 1");
  if (port < 0 || port > 65535) {
    throw LaunchError("store: port " + std::to_string(port) + " outside 0..65535");
  }
  if (run_id.size() > p::kMaxKeyBytes) throw LaunchError("store: run id over 4096 bytes");

  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const int gai = getaddrinfo(addr.c_str(), port_text.c_str(), &hints, &res);
  if (gai != 0) {
    throw LaunchError("store: cannot resolve " + p::endpoint(addr, port) + ": " +
                      gai_strerror(gai));
  }
  s.listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) {
    freeaddrinfo(res);
    throw LaunchError("store: socket(): " + errno_text(errno));
  }
  const int one = 1;
  setsockopt(s.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.listen_fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(s.listen_fd, 256) != 0) {
    const int err = errno;
    freeaddrinfo(res);
    close_fd(s.listen_fd);
    throw LaunchError("store: cannot listen on " + p::endpoint(addr, port) + ": " +
                      errno_text(err));
  }
  freeaddrinfo(res);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  s.port = ntohs(bound.sin_port);

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    close_fd(s.listen_fd);
    throw LaunchError("store: pipe2(): " + errno_text(errno));
  }
  s.wake_read = pipe_fds[0];
  s.wake_write = pipe_fds[1];
  s.thread = std::thread([&s] { s.run(); });
}

TcpStoreServer::~TcpStoreServer() {
  Impl& s = *impl_;
  s.stopping = true;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(s.wake_write, &byte, 1);
  if (s.thread.joinable()) s.thread.join();
  for (Conn& c : s.conns) close_fd(c.fd);
  close_fd(s.listen_fd);
  close_fd(s.wake_read);
  close_fd(s.wake_write);
}

int TcpStoreServer::port() const {
  return impl_->port;
}

std::optional<std::string> TcpStoreServer::peek(const std::string& key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto it = impl_->kv.find(key);
  if (it == impl_->kv.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> TcpStoreServer::refusals() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->refused;
}

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  while (!stopping) {
    int64_t now = p::monotonic_ns();
    // Sleep until the nearest deadline (parked request or stall), 1 s at most.
    int64_t wait_ns = 1000000000;
    for (const Conn& c : conns) {
      if (c.parked != Parked::kNone) wait_ns = std::min(wait_ns, c.deadline_ns - now);
      if (c.stalled_since_ns >= 0) {
        wait_ns = std::min(wait_ns, c.stalled_since_ns + stall_timeout_ns - now);
      }
    }
    fds.clear();
    fds.push_back({listen_fd, POLLIN, 0});
    fds.push_back({wake_read, POLLIN, 0});
    for (const Conn& c : conns) {
      short events = 0;
      // Back-pressure: read more only when nothing is parked or waiting to be sent.
      if (c.parked == Parked::kNone && c.out.empty()) events |= POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
    }
    const int wait_ms = static_cast<int>(std::max<int64_t>(0, (wait_ns + 999999) / 1000000));
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) {
      std::cerr << "shardscope store at " << where() << ": poll(): " << errno_text(errno) << "\n";
      return;
    }
    if (stopping) return;
    now = p::monotonic_ns();
    // Connections are indexed as in `fds` (offset 2); new ones are appended after.
    const size_t polled = conns.size();
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = conns[i];
      const short re = fds[i + 2].revents;
      if (re & (POLLERR | POLLNVAL)) {
        close_fd(c.fd);
        continue;
      }
      if (re & POLLIN) read_from(c, now);
      if (c.fd >= 0 && (re & POLLHUP) && !(re & POLLIN)) close_fd(c.fd);
      if (c.fd >= 0 && !c.out.empty()) write_to(c, now);  // try at once; POLLOUT covers the rest
    }
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = conns[i];
      if (c.fd < 0) continue;
      expire(c, now);
      if (c.fd >= 0 && !c.out.empty()) write_to(c, now);
    }
    if (fds[0].revents & POLLIN) accept_all(now);
    if (fds[1].revents & POLLIN) {
      char buf[64];
      while (::read(wake_read, buf, sizeof buf) > 0) {
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.fd < 0; }),
                conns.end());
  }
}

void TcpStoreServer::Impl::accept_all(int64_t now) {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or an error that the next poll reports again
    if (conns.size() >= p::kMaxConnections) {
      ::close(fd);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn c;
    c.fd = fd;
    c.stalled_since_ns = now;  // until its handshake
    conns.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(Conn& c, int64_t now) {
  char buf[kReadChunk];
  const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    close_fd(c.fd);
    return;
  }
  if (n < 0) return;
  c.in.append(buf, static_cast<size_t>(n));
  process_input(c, now);
}

void TcpStoreServer::Impl::process_input(Conn& c, int64_t now) {
  // One request at a time: the next is handled once the reply to the previous one is
  // sent (and a parked one answered), so a connection buffers at most one message in
  // and one reply out whatever its peer sends.
  size_t at = 0;
  while (c.fd >= 0 && c.parked == Parked::kNone && !c.close_after_write && c.out.empty() &&
         c.in.size() - at >= p::kHeaderBytes) {
    const p::Header h = p::decode_header(reinterpret_cast<const unsigned char*>(c.in.data()) + at);
    const std::string problem = p::header_problem(h);
    if (!problem.empty() || !p::is_request(h.type)) {
      close_fd(c.fd);  // junk: drop without an answer
      return;
    }
    if (c.in.size() - at - p::kHeaderBytes < h.length) break;
    const std::string payload = c.in.substr(at + p::kHeaderBytes, h.length);
    at += p::kHeaderBytes + h.length;
    try {
      handle(c, h.type, payload, now);
    } catch (const p::Malformed&) {
      close_fd(c.fd);
      return;
    }
  }
  c.in.erase(0, at);
  // The handshake deadline runs from accept; after it, bytes that are not yet a
  // handled message must become one within the stall timeout.
  if (c.fd < 0 || !c.greeted) return;
  if (c.in.empty()) {
    c.stalled_since_ns = -1;
  } else if (at > 0 || c.stalled_since_ns < 0) {
    c.stalled_since_ns = now;
  }
}

void TcpStoreServer::Impl::write_to(Conn& c, int64_t now) {
  while (c.out_sent < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      close_fd(c.fd);
      return;
    }
    c.out_sent += static_cast<size_t>(n);
  }
  c.out.clear();
  c.out_sent = 0;
  if (c.close_after_write) {
    close_fd(c.fd);
    return;
  }
  process_input(c, now);  // requests that arrived while the reply was pending
}

void TcpStoreServer::Impl::set_value(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = kv.find(key);
  const size_t old_bytes = it == kv.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  if (stored_bytes - old_bytes + new_bytes > p::kMaxStoredBytes) {
    throw LaunchError("store at " + where() + " is full (" + std::to_string(p::kMaxStoredBytes) +
                      " bytes of keys and values); cannot set '" + key + "'");
  }
  stored_bytes = stored_bytes - old_bytes + new_bytes;
  kv[key] = std::move(value);
}

void TcpStoreServer::Impl::handshake(Conn& c, const std::string& payload) {
  p::Reader r(payload);
  const std::string client_run = r.str(p::kMaxKeyBytes);
  const int64_t client_world = r.i64();
  const int64_t client_rank = r.i64();
  r.finish();
  std::string refusal;
  if (client_run != run_id || client_world != world_size) {
    refusal = "store at " + where() + " belongs to run " + run_id + " with world size " +
              std::to_string(world_size) + ", this rank expects run " + client_run +
              " with world size " + std::to_string(client_world);
  } else if (client_rank < 0 || client_rank >= world_size) {
    refusal = "store at " + where() + " serves ranks 0.." + std::to_string(world_size - 1) +
              " of run " + run_id + ", a client claims rank " + std::to_string(client_rank);
  }
  if (refusal.empty()) {
    c.greeted = true;
    c.rank = static_cast<int>(client_rank);
    reply(c, p::Type::kOk);
    return;
  }
  std::cerr << "shardscope store: refused a client: " << refusal << "\n";
  {
    std::lock_guard<std::mutex> lock(mu);
    if (refused.size() < kMaxRefusals) refused.push_back(refusal);
  }
  reply(c, p::Type::kError, [&] {
    std::string s;
    p::put_str(s, refusal);
    return s;
  }());
  c.close_after_write = true;
}

void TcpStoreServer::Impl::handle(Conn& c, p::Type type, const std::string& payload, int64_t now) {
  if (!c.greeted) {
    if (type != p::Type::kHello) throw p::Malformed("request before the handshake");
    handshake(c, payload);
    return;
  }
  p::Reader r(payload);
  std::string out;
  switch (type) {
    case p::Type::kHello:
      throw p::Malformed("second handshake");
    case p::Type::kSet: {
      std::string key = r.str(p::kMaxKeyBytes);
      std::string value = r.str(p::kMaxPayload);
      r.finish();
      try {
        set_value(key, std::move(value));
      } catch (const LaunchError& e) {
        p::put_str(out, e.what());
        reply(c, p::Type::kError, out);
        return;
      }
      reply(c, p::Type::kOk);
      for (Conn& other : conns) {
        if (other.parked == Parked::kGet && other.key == key) try_release(other);
      }
      return;
    }
    case p::Type::kGet: {
      c.key = r.str(p::kMaxKeyBytes);
      const bool wait = r.u8() != 0;
      c.timeout_ms = std::max<int64_t>(0, r.i64());
      r.finish();
      c.parked = Parked::kGet;
      c.deadline_ns = now + c.timeout_ms * 1000000;
      try_release(c);
      if (c.parked != Parked::kNone && !wait) {
        c.parked = Parked::kNone;
        reply(c, p::Type::kMissing);
      }
      return;
    }
    case p::Type::kAdd: {
      const std::string key = r.str(p::kMaxKeyBytes);
      const int64_t delta = r.i64();
      r.finish();
      int64_t value = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        const auto it = kv.find(key);
        if (it != kv.end()) {
          char* end = nullptr;
          errno = 0;
          const long long v = std::strtoll(it->second.c_str(), &end, 10);
          if (it->second.empty() || *end != '\0' || errno == ERANGE) {
            p::put_str(out, "store add('" + key + "'): the key holds '" + it->second.substr(0, 64) +
                                "', not a decimal integer");
            reply(c, p::Type::kError, out);
            return;
          }
          value = v;
        }
      }
      // Wraps like int64 arithmetic on two's complement (well defined through uint64).
      value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
      try {
        set_value(key, std::to_string(value));
      } catch (const LaunchError& e) {
        p::put_str(out, e.what());
        reply(c, p::Type::kError, out);
        return;
      }
      p::put_i64(out, value);
      reply(c, p::Type::kInt, out);
      for (Conn& other : conns) {
        if (other.parked == Parked::kGet && other.key == key) try_release(other);
      }
      return;
    }
    case p::Type::kCheck: {
      const std::string key = r.str(p::kMaxKeyBytes);
      r.finish();
      std::lock_guard<std::mutex> lock(mu);
      p::put_i64(out, kv.count(key) ? 1 : 0);
      reply(c, p::Type::kInt, out);
      return;
    }
    case p::Type::kBarrier: {
      c.key = r.str(p::kMaxKeyBytes);
      c.timeout_ms = std::max<int64_t>(0, r.i64());
      r.finish();
      if (barriers.size() >= kMaxBarrierNames && !barriers.count(c.key)) {
        c.parked = Parked::kNone;
        p::put_str(out, "store at " + where() + " holds " + std::to_string(kMaxBarrierNames) +
                            " barrier names already; cannot add '" + c.key + "'");
        reply(c, p::Type::kError, out);
        return;
      }
      BarrierState& b = barriers[c.key];
      if (b.arrivals.empty()) b.arrivals.assign(static_cast<size_t>(world_size), 0);
      c.generation = ++b.arrivals[static_cast<size_t>(c.rank)];
      c.parked = Parked::kBarrier;
      c.deadline_ns = now + c.timeout_ms * 1000000;
      for (Conn& other : conns) {
        if (other.parked == Parked::kBarrier && other.key == c.key) try_release(other);
      }
      return;
    }
    case p::Type::kClock:
      r.finish();
      p::put_i64(out, p::monotonic_ns());
      reply(c, p::Type::kInt, out);
      return;
    default:
      throw p::Malformed("unknown request type");
  }
}

void TcpStoreServer::Impl::try_release(Conn& c) {
  std::string out;
  if (c.parked == Parked::kGet) {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = kv.find(c.key);
    if (it == kv.end()) return;
    p::put_str(out, it->second);
    c.parked = Parked::kNone;
    reply(c, p::Type::kValue, out);
  } else if (c.parked == Parked::kBarrier) {
    const BarrierState& b = barriers[c.key];
    if (*std::min_element(b.arrivals.begin(), b.arrivals.end()) < c.generation) return;
    c.parked = Parked::kNone;
    reply(c, p::Type::kOk);
  }
}

std::string TcpStoreServer::Impl::missing_ranks(const BarrierState& b, int64_t generation) const {
  std::string list;
  int missing = 0;
  for (size_t r = 0; r < b.arrivals.size(); ++r) {
    if (b.arrivals[r] >= generation) continue;
    if (missing < 32) list += (missing ? ", " : "") + std::to_string(r);
    ++missing;
  }
  if (missing > 32) list += ", ... (" + std::to_string(missing) + " in all)";
  return std::to_string(world_size - missing) + " of " + std::to_string(world_size) +
         " ranks arrived; missing ranks: " + list;
}

void TcpStoreServer::Impl::expire(Conn& c, int64_t now) {
  if (c.parked != Parked::kNone && now >= c.deadline_ns) {
    std::string message;
    if (c.parked == Parked::kGet) {
      message = "get('" + c.key + "') on the store at " + where() + " timed out after " +
                std::to_string(c.timeout_ms) + " ms: the key was never set";
    } else {
      message = "barrier '" + c.key + "' on the store at " + where() + " timed out after " +
                std::to_string(c.timeout_ms) +
                " ms: " + missing_ranks(barriers[c.key], c.generation);
    }
    std::string out;
    p::put_str(out, message);
    c.parked = Parked::kNone;
    reply(c, p::Type::kTimeout, out);
  }
  if (c.stalled_since_ns >= 0 && now >= c.stalled_since_ns + stall_timeout_ns) {
    close_fd(c.fd);  // a partial message or a missing handshake for too long
  }
}

}  // namespace shardscope::engine::launch
