// Union of half-open intervals [start, end) in nanoseconds, built
// incrementally: appends in start order merge in O(1); out-of-order appends
// are buffered and merged by an occasional sort, so memory stays close to
// the size of the union, not the number of intervals added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardscope::traces {

struct Interval {
  int64_t start = 0;
  int64_t end = 0;  // > start
  // end - start without signed overflow.
  uint64_t length() const { return static_cast<uint64_t>(end) - static_cast<uint64_t>(start); }
};

class IntervalUnion {
 public:
  // Empty intervals (end <= start) are ignored.
  void add(int64_t start, int64_t end);
  // Sorted, disjoint and non-touching intervals.
  const std::vector<Interval>& intervals() const;
  // Total length of the union (unsigned: the union of extreme intervals can
  // exceed INT64_MAX).
  uint64_t length() const;
  bool empty() const { return v_.empty(); }

 private:
  void compact() const;
  mutable std::vector<Interval> v_;
  mutable size_t clean_ = 0;  // v_[0, clean_) is sorted and merged
};

// |a ∩ b| for two sorted disjoint lists.
uint64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace shardscope::traces
