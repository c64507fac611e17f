// Level of detail of the timeline (the Tracy way): drawing cost follows what
// is visible, not what is loaded.
//
// Each lane of each rank is split into rows ("depths") so that the events of
// one row never overlap: nested or overlapping events go one row down. A row
// is a Track: its events sorted by start, hence (no overlap) by end too, so
// the visible range is two binary searches. lod_items() walks only the
// visible range and folds every run of events narrower than `min_px` into
// one DrawItem carrying a count, jumping over a run with a binary search on
// ends: the number of items and of search steps is bounded by the pixel
// width (items <= 2 * width / min_px + 5), whatever the number of events.
#pragma once

#include <cstdint>
#include <vector>

#include "gui/time_view.h"
#include "traces/trace.h"

namespace shardscope::gui {

// One row of one lane. Invariant: start[i] <= end[i] <= start[i + 1].
// Times are ns relative to the index's origin (int64, exact).
struct Track {
  std::vector<uint32_t> event;  // index into RankTrace::events
  std::vector<int64_t> start;
  std::vector<int64_t> end;
  // end[k * kCoarseStride] for every k: a cache-resident first level for the
  // searches on ends (a cold binary search over millions of ends costs ~20
  // cache misses; this one costs ~5).
  std::vector<int64_t> coarse_end;
  static constexpr size_t kCoarseStride = 64;
  // Fold colours (dominant_category). Bit c set: some event of the row has
  // traces::Category c. A row with one category keeps nothing else; a row
  // mixing categories keeps each event's category and, at every sample
  // k = 0 .. size() / kCoarseStride, the time (ns) and the number of the
  // events [0, k * kCoarseStride) of each category: row k of
  // kCategoryCount entries. About 3.1 bytes per event, only where mixed.
  uint32_t category_mask = 0;
  std::vector<uint8_t> category;
  std::vector<int64_t> coarse_category_ns;
  std::vector<uint32_t> coarse_category_count;
  size_t size() const { return event.size(); }
};

// The first position in [lo, hi) whose end is >= t (hi when none).
size_t first_end_at_least(const Track& track, size_t lo, size_t hi, double t);

struct LaneIndex {
  uint32_t lane = 0;        // index into RankTrace::lanes
  std::vector<Track> rows;  // >= 1 (an empty lane has one empty row)
  uint64_t events = 0;
};

struct RankIndex {
  size_t rank_slot = 0;          // index into Trace::ranks
  std::vector<LaneIndex> lanes;  // display order: by LaneKind, then lane index
  std::vector<uint16_t> depth;   // per event: its row in its lane
};

struct TraceIndex {
  int64_t origin_ns = 0;  // earliest event start (or step / memory time); times are relative
  int64_t end_ns = 0;     // latest event end, relative to origin (>= 0)
  uint64_t events = 0;
  uint32_t category_mask = 0;    // bit c set: some event has traces::Category c
  std::vector<RankIndex> ranks;  // in Trace::ranks order
};

// Builds the index (O(n log n)). Events with lane ids out of range are
// rejected by traces::validate before this; an empty trace gives empty rows.
TraceIndex build_index(const traces::Trace& t);

// A drawn thing: one event (count == 1) or a fold of `count` consecutive
// track events [first, first + count). x0 <= x1, in pixels from the left of
// the drawing area (not clamped).
struct DrawItem {
  double x0 = 0;
  double x1 = 0;
  uint32_t first = 0;  // position in the Track
  uint32_t count = 0;
};

// The items of `track` visible in [0, width_px] under `view` (whose times are
// relative to the index origin). An event is visible when it intersects the
// closed range [view start, view end]. Every visible event is counted in
// exactly one item, and only visible events are. Appends to `out`.
void lod_items(const Track& track, const TimeView& view, double width_px, double min_px,
               std::vector<DrawItem>& out);

// The colour of a fold: the category with the most event time (sum of
// durations) among the track's events [first, first + count), ties (e.g. a
// fold of zero-length events) to the lower Category value among those
// present. count >= 1 and first + count <= track.size(). O(1) for a row of
// one category; otherwise O(min(count, kCoarseStride) + kCategoryCount),
// whatever the fold's size: two prefix sums, each a coarse sample plus at
// most kCoarseStride / 2 events.
traces::Category dominant_category(const Track& track, size_t first, size_t count);

// Positions [first, last) of the track's events visible in the view.
void visible_range(const Track& track, const TimeView& view, double width_px, size_t* first,
                   size_t* last);

}  // namespace shardscope::gui
