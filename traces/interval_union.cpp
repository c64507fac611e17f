#include "traces/interval_union.h"

#include <algorithm>

namespace shardscope::traces {

void IntervalUnion::add(int64_t start, int64_t end) {
  if (end <= start) return;
  if (clean_ == v_.size() && (v_.empty() || start >= v_.back().start)) {
    // In start order: merge with the last interval or append.
    if (!v_.empty() && start <= v_.back().end) {
      v_.back().end = std::max(v_.back().end, end);
    } else {
      v_.push_back({start, end});
      clean_ = v_.size();
    }
    return;
  }
  v_.push_back({start, end});
  // Merge once the unsorted tail is as long as the clean part (amortised
  // O(log n) per add).
  if (v_.size() - clean_ > clean_ + 64) compact();
}

void IntervalUnion::compact() const {
  if (clean_ == v_.size()) return;
  std::sort(v_.begin(), v_.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  size_t out = 0;
  for (size_t i = 0; i < v_.size(); ++i) {
    if (out > 0 && v_[i].start <= v_[out - 1].end) {
      v_[out - 1].end = std::max(v_[out - 1].end, v_[i].end);
    } else {
      v_[out++] = v_[i];
    }
  }
  v_.resize(out);
  clean_ = out;
}

const std::vector<Interval>& IntervalUnion::intervals() const {
  compact();
  return v_;
}

uint64_t IntervalUnion::length() const {
  uint64_t total = 0;
  for (const Interval& i : intervals()) total += i.length();
  return total;
}

uint64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  uint64_t total = 0;
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].start, b[j].start);
    const int64_t hi = std::min(a[i].end, b[j].end);
    if (hi > lo) total += Interval{lo, hi}.length();
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

}  // namespace shardscope::traces
