// Progress of `shardscope sweep` on stderr, never stdout (docs/sweep.md,
// "Progress"). On a terminal: one line rewritten in place (\r), at most 4
// times a second, with done/total, the rate and the time left. Otherwise
// (a file, a pipe, a CI log): a plain line at each tenth of sweeps of at
// least kPlainProgressFrom configurations, none for smaller ones.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace shardscope::cli {

/// Plain (not terminal) progress lines from this many configurations.
constexpr size_t kPlainProgressFrom = 10'000;
/// A warning before sweeps of at least this many configurations.
constexpr size_t kLongSweepFrom = 1'000'000;

class SweepProgress {
 public:
  /// out: stderr in the CLI; terminal: whether it is one (isatty).
  SweepProgress(size_t total, FILE* out, bool terminal);
  /// done configurations of total; calls are serialised by the caller.
  void update(size_t done);

 private:
  double elapsed() const;
  std::string rate_and_left(size_t done, double seconds) const;

  size_t total_;
  FILE* out_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  double last_shown_ = -1;  // seconds since start of the last terminal line
  size_t last_width_ = 0;   // of the last terminal line, to blank it out
  size_t tenths_shown_ = 0;
};

/// "12 s", "3.5 min", "2.1 h".
std::string human_duration(double seconds);

}  // namespace shardscope::cli
