// Memory counters of one rank over time, ready to plot at any zoom: per pixel
// column the highest allocated / reserved value in effect (a range maximum
// over a pyramid of block maxima, so a frame costs O(width * log n), not
// O(records)); and the buffers live at a chosen time, by category.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gui/time_view.h"
#include "traces/trace.h"

namespace shardscope::gui {

// Range maximum over a fixed array: level k holds maxima of blocks of 32^k.
class MaxPyramid {
 public:
  void build(const std::vector<int64_t>& values);
  // max of values[a, b); requires a < b <= size.
  int64_t max(size_t a, size_t b) const;
  size_t size() const { return levels_.empty() ? 0 : levels_[0].size(); }

 private:
  static constexpr size_t kFan = 32;
  std::vector<std::vector<int64_t>> levels_;
};

// The counters after each record, times relative to an origin (ns).
struct MemorySeries {
  std::vector<int64_t> time;
  std::vector<int64_t> allocated;
  std::vector<int64_t> reserved;
  MaxPyramid allocated_max, reserved_max;
  // The highest allocated value and the first record reaching it (the peak
  // drawn on the plot); -1 without records.
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int64_t peak_index = -1;
  bool empty() const { return time.empty(); }
};
MemorySeries build_memory_series(const traces::RankTrace& r, int64_t origin_ns);

// One pixel column [t_of(c), t_of(c + 1)): the highest counter values in
// effect during it (the value carried in from before the column included).
// has == false before the first record and after `until_ns`.
struct MemoryColumn {
  bool has = false;
  int64_t allocated = 0;
  int64_t reserved = 0;
};
void memory_columns(const MemorySeries& s, const TimeView& v, int width_px, int64_t until_ns,
                    std::vector<MemoryColumn>& out);

// What is live at a time: records at or before `time_ns` (absolute) applied.
// Frees with a known address release the block allocated there (and its
// category); other records count by their own category.
struct LiveBlock {
  uint64_t address = 0;
  int64_t bytes = 0;
  traces::MemoryCategory category = traces::MemoryCategory::unknown;
  int64_t since_ns = 0;  // absolute time of the allocation
  uint32_t lane = traces::kNoLane;
};
struct LiveMemory {
  int64_t time_ns = 0;
  int64_t allocated = 0;  // the rank's counters after the last record applied
  int64_t reserved = 0;
  std::array<int64_t, traces::kMemoryCategoryCount> by_category{};
  // Categories with live bytes != 0, largest first.
  std::vector<std::pair<traces::MemoryCategory, int64_t>> categories;
  std::vector<LiveBlock> blocks;  // largest first, at most max_blocks
  size_t live_blocks = 0;         // all blocks live with a known address
};
LiveMemory live_memory_at(const traces::RankTrace& r, int64_t time_ns, size_t max_blocks = 50);

}  // namespace shardscope::gui
