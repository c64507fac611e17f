#include "cli/sweep_progress.h"

#include "cli/plan_inputs.h"

namespace shardscope::cli {

std::string human_duration(double seconds) {
  char buf[32];
  if (seconds < 90)
    std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  else if (seconds < 90 * 60)
    std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  else
    std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  return buf;
}

SweepProgress::SweepProgress(size_t total, FILE* out, bool terminal)
    : total_(total), out_(out), terminal_(terminal), start_(std::chrono::steady_clock::now()) {}

double SweepProgress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

// ", 850/s, about 19 min left"; nothing before a second has passed (no rate yet).
std::string SweepProgress::rate_and_left(size_t done, double seconds) const {
  if (seconds < 1 || done == 0) return "";
  const double rate = static_cast<double>(done) / seconds;
  char buf[48];
  std::snprintf(buf, sizeof buf, ", %.0f/s", rate);
  std::string s = buf;
  if (done < total_)
    s += ", about " + human_duration(static_cast<double>(total_ - done) / rate) + " left";
  return s;
}

void SweepProgress::update(size_t done) {
  if (total_ == 0) return;
  const double t = elapsed();
  if (terminal_) {
    // At most 4 lines a second, and always the last.
    if (done < total_ && last_shown_ >= 0 && t - last_shown_ < 0.25) return;
    last_shown_ = t;
    char pct[32];
    std::snprintf(pct, sizeof pct, " (%.1f%%)",
                  100.0 * static_cast<double>(done) / static_cast<double>(total_));
    std::string line = "sweep: " + with_commas(static_cast<int64_t>(done)) + "/" +
                       with_commas(static_cast<int64_t>(total_)) + pct +
                       (done < total_ ? rate_and_left(done, t) : " in " + human_duration(t));
    const size_t width = line.size();
    if (width < last_width_) line += std::string(last_width_ - width, ' ');
    last_width_ = width;
    std::fprintf(out_, "\r%s%s", line.c_str(), done == total_ ? "\n" : "");
    std::fflush(out_);
    return;
  }
  if (total_ < kPlainProgressFrom) return;
  const size_t tenths = done * 10 / total_;
  if (tenths <= tenths_shown_) return;
  tenths_shown_ = tenths;
  const std::string counts = with_commas(static_cast<int64_t>(done)) + "/" +
                             with_commas(static_cast<int64_t>(total_)) + " configurations";
  if (done < total_)
    std::fprintf(out_, "sweep: %zu%% (%s)%s\n", tenths * 10, counts.c_str(),
                 rate_and_left(done, t).c_str());
  else
    std::fprintf(out_, "sweep: 100%% (%s) in %s\n", counts.c_str(), human_duration(t).c_str());
  std::fflush(out_);
}

}  // namespace shardscope::cli
