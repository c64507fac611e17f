// OutputPump: rank output through the launcher (output_pump.h).
#include "engine/launch/output_pump.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/launch/launch.h"
#include "engine/launch/store_protocol.h"

namespace shardscope::engine::launch {
namespace {

constexpr size_t kMaxLineBytes = 64 * 1024;  // a longer partial line is written out as is

void write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout/stderr is gone: nothing better to do
    done += static_cast<size_t>(n);
  }
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

OutputPump::OutputPump(int nproc, bool prefix_lines)
    : prefix_(prefix_lines), last_lines_(static_cast<size_t>(nproc)) {
  auto cleanup = [this] {
    for (int& fd : write_fds_) close_fd(fd);
    for (Stream& s : streams_) close_fd(s.fd);
  };
  for (int r = 0; r < nproc; ++r) {
    for (int k = 0; k < 2; ++k) {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) {
        const int err = errno;
        cleanup();
        throw LaunchError(std::string("launch: pipe2() for rank output: ") + std::strerror(err));
      }
      fcntl(fds[0], F_SETFL, O_NONBLOCK);
      Stream s;
      s.fd = fds[0];
      s.rank = r;
      s.is_stderr = k == 1;
      streams_.push_back(std::move(s));
      write_fds_.push_back(fds[1]);
    }
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    cleanup();
    throw LaunchError(std::string("launch: pipe2(): ") + std::strerror(err));
  }
  wake_read_ = wake[0];
  wake_write_ = wake[1];
  thread_ = std::thread([this] { run(); });
}

OutputPump::~OutputPump() {
  finish(0);
  close_fd(wake_read_);
  close_fd(wake_write_);
}

void OutputPump::close_child_ends() {
  for (int& fd : write_fds_) close_fd(fd);
}

void OutputPump::finish(int64_t drain_ms) {
  if (!thread_.joinable()) return;
  stop_at_ns_ = protocol::monotonic_ns() + drain_ms * 1000000;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_write_, &byte, 1);
  thread_.join();
  close_child_ends();
  for (Stream& s : streams_) {
    flush_partial(s);
    close_fd(s.fd);
  }
}

std::string OutputPump::last_stderr_line(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_lines_.at(static_cast<size_t>(rank));
}

void OutputPump::run() {
  std::vector<pollfd> fds;
  std::vector<Stream*> order;
  char buf[16384];
  for (;;) {
    const int64_t stop_at = stop_at_ns_.load();
    const int64_t now = protocol::monotonic_ns();
    if (stop_at >= 0 && now >= stop_at) return;
    fds.clear();
    order.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    for (Stream& s : streams_) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, POLLIN, 0});
      order.push_back(&s);
    }
    if (order.empty() && stop_at >= 0) return;  // every pipe at EOF
    const int timeout_ms =
        stop_at >= 0 ? static_cast<int>(std::max<int64_t>(1, (stop_at - now) / 1000000)) : 1000;
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (::read(wake_read_, drain, sizeof drain) > 0) {
      }
    }
    for (size_t i = 0; i < order.size(); ++i) {
      if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = *order[i];
      const ssize_t n = ::read(s.fd, buf, sizeof buf);
      if (n > 0) {
        emit(s, buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        flush_partial(s);
        close_fd(s.fd);
      }
    }
  }
}

void OutputPump::emit(Stream& s, const char* data, size_t n) {
  const std::string prefix = "[rank " + std::to_string(s.rank) + "] ";
  const int out_fd = s.is_stderr ? STDERR_FILENO : STDOUT_FILENO;
  std::string out;
  size_t begin = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    s.partial.append(data + begin, i - begin);
    begin = i + 1;
    if (s.is_stderr) {
      std::string line = s.partial;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        last_lines_[static_cast<size_t>(s.rank)] = line;
      }
    }
    if (prefix_) out += prefix;
    out += s.partial;
    out += '\n';
    s.partial.clear();
  }
  s.partial.append(data + begin, n - begin);
  if (s.partial.size() > kMaxLineBytes) {
    if (prefix_) out += prefix;
    out += s.partial;
    out += '\n';
    s.partial.clear();
  }
  write_all(out_fd, out);
}

void OutputPump::flush_partial(Stream& s) {
  if (s.partial.empty()) return;
  const std::string rest = s.partial + "\n";
  s.partial.clear();
  emit(s, rest.data(), rest.size());
}

}  // namespace shardscope::engine::launch
