// OutputPump (private to engine/launch): the launcher's pipes from each rank's
// stdout/stderr to its own, read by one thread that prefixes whole lines with
// "[rank r] " and remembers each rank's last non-empty stderr line.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardscope::engine::launch {

class OutputPump {
 public:
  // Makes 2 * nproc pipes (close-on-exec) and starts the reader thread.
  OutputPump(int nproc, bool prefix_lines);
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // The write ends a child dup2()s onto its fds 1 and 2.
  int child_stdout(int rank) const { return write_fds_[static_cast<size_t>(2 * rank)]; }
  int child_stderr(int rank) const { return write_fds_[static_cast<size_t>(2 * rank + 1)]; }
  // After the last fork: the launcher's copies of the write ends, so EOF can come.
  void close_child_ends();
  // Waits until every pipe reached EOF or drain_ms passed (a rank's own children
  // may hold a pipe open), then stops the thread and writes out partial lines.
  void finish(int64_t drain_ms);
  std::string last_stderr_line(int rank) const;

 private:
  struct Stream {
    int fd = -1;  // read end; -1 at EOF
    int rank = 0;
    bool is_stderr = false;
    std::string partial;  // bytes after the last newline
  };
  void run();
  void emit(Stream& s, const char* data, size_t n);
  void flush_partial(Stream& s);

  bool prefix_;
  std::vector<int> write_fds_;
  std::vector<Stream> streams_;
  int wake_read_ = -1, wake_write_ = -1;
  std::atomic<int64_t> stop_at_ns_{-1};  // CLOCK_MONOTONIC; -1 until finish()
  mutable std::mutex mu_;                // guards last_lines_
  std::vector<std::string> last_lines_;
  std::thread thread_;
};

}  // namespace shardscope::engine::launch
