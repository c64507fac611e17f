#include "gui/memory_series.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace shardscope::gui {

void MaxPyramid::build(const std::vector<int64_t>& values) {
  levels_.clear();
  levels_.push_back(values);
  while (levels_.back().size() > kFan) {
    const std::vector<int64_t>& below = levels_.back();
    std::vector<int64_t> up((below.size() + kFan - 1) / kFan, std::numeric_limits<int64_t>::min());
    for (size_t i = 0; i < below.size(); ++i) up[i / kFan] = std::max(up[i / kFan], below[i]);
    levels_.push_back(std::move(up));
  }
}

int64_t MaxPyramid::max(size_t a, size_t b) const {
  int64_t m = std::numeric_limits<int64_t>::min();
  // Climb: take the partial blocks at the ends of [a, b) at each level.
  for (size_t level = 0; level < levels_.size() && a < b; ++level) {
    const std::vector<int64_t>& v = levels_[level];
    if (b - a <= 2 * kFan || level + 1 == levels_.size()) {
      for (size_t i = a; i < b; ++i) m = std::max(m, v[i]);
      return m;
    }
    while (a < b && a % kFan != 0) m = std::max(m, v[a++]);
    while (b > a && b % kFan != 0) m = std::max(m, v[--b]);
    a /= kFan;
    b /= kFan;
  }
  return m;
}

MemorySeries build_memory_series(const traces::RankTrace& r, int64_t origin_ns) {
  MemorySeries s;
  s.time.reserve(r.memory.size());
  s.allocated.reserve(r.memory.size());
  s.reserved.reserve(r.memory.size());
  for (size_t i = 0; i < r.memory.size(); ++i) {
    const traces::MemoryEvent& m = r.memory[i];
    s.time.push_back(m.time_ns - origin_ns);
    s.allocated.push_back(m.allocated);
    s.reserved.push_back(m.reserved);
    if (s.peak_index < 0 || m.allocated > s.peak_allocated) {
      s.peak_allocated = m.allocated;
      s.peak_index = static_cast<int64_t>(i);
    }
    s.peak_reserved = std::max(s.peak_reserved, m.reserved);
  }
  s.allocated_max.build(s.allocated);
  s.reserved_max.build(s.reserved);
  return s;
}

void memory_columns(const MemorySeries& s, const TimeView& v, int width_px, int64_t until_ns,
                    std::vector<MemoryColumn>& out) {
  out.assign(static_cast<size_t>(std::max(width_px, 0)), MemoryColumn{});
  if (s.empty()) return;
  const double first_t = static_cast<double>(s.time.front());
  for (int c = 0; c < width_px; ++c) {
    const double t0 = v.t_of(c);
    const double t1 = v.t_of(c + 1);
    if (t1 <= first_t || t0 > static_cast<double>(until_ns)) continue;
    // Records in [t0, t1) plus the one in effect at t0 (the last before it).
    const auto lo = std::lower_bound(s.time.begin(), s.time.end(), t0, [](int64_t x, double t) {
      return static_cast<double>(x) < t;
    });
    const auto hi = std::lower_bound(
        lo, s.time.end(), t1, [](int64_t x, double t) { return static_cast<double>(x) < t; });
    size_t a = static_cast<size_t>(lo - s.time.begin());
    const size_t b = static_cast<size_t>(hi - s.time.begin());
    if (a > 0) --a;  // carried in
    if (a >= b) continue;
    MemoryColumn& col = out[static_cast<size_t>(c)];
    col.has = true;
    col.allocated = s.allocated_max.max(a, b);
    col.reserved = s.reserved_max.max(a, b);
  }
}

LiveMemory live_memory_at(const traces::RankTrace& r, int64_t time_ns, size_t max_blocks) {
  LiveMemory live;
  live.time_ns = time_ns;
  std::unordered_map<uint64_t, LiveBlock> blocks;
  for (const traces::MemoryEvent& m : r.memory) {
    if (m.time_ns > time_ns) break;  // records are in time order
    live.allocated = m.allocated;
    live.reserved = m.reserved;
    if (m.bytes > 0) {
      if (m.address != 0) blocks[m.address] = {m.address, m.bytes, m.category, m.time_ns, m.lane};
      live.by_category[static_cast<size_t>(m.category)] += m.bytes;
    } else if (m.bytes < 0) {
      const auto it = m.address != 0 ? blocks.find(m.address) : blocks.end();
      if (it != blocks.end()) {
        live.by_category[static_cast<size_t>(it->second.category)] -= it->second.bytes;
        blocks.erase(it);
      } else {
        live.by_category[static_cast<size_t>(m.category)] += m.bytes;
      }
    }
  }
  for (int c = 0; c < traces::kMemoryCategoryCount; ++c)
    if (live.by_category[static_cast<size_t>(c)] != 0)
      live.categories.emplace_back(static_cast<traces::MemoryCategory>(c),
                                   live.by_category[static_cast<size_t>(c)]);
  std::stable_sort(live.categories.begin(), live.categories.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  live.live_blocks = blocks.size();
  live.blocks.reserve(blocks.size());
  for (const auto& [addr, b] : blocks) live.blocks.push_back(b);
  std::sort(live.blocks.begin(), live.blocks.end(), [](const LiveBlock& a, const LiveBlock& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.address < b.address;
  });
  if (live.blocks.size() > max_blocks) live.blocks.resize(max_blocks);
  return live;
}

}  // namespace shardscope::gui
