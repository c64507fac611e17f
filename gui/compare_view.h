// Compare two traces (say measured A and predicted B): their timelines
// stacked on one time axis whose origin is the start of a chosen step in
// each, their metrics side by side with deltas (traces::diff_metrics), and
// the per-unit / per-op differences per step and rank (with event counts per
// step), large ones highlighted.
#pragma once

#include <cstdint>
#include <vector>

#include "gui/app_state.h"

namespace shardscope::gui {

// Start of step `number` in `doc` relative to its index origin: the earliest
// start of that step over ranks; 0 when no rank has it (or no steps).
double step_origin(const TraceDoc& doc, int64_t number);
// Step numbers present in both traces' metrics, ascending.
std::vector<int64_t> common_steps(const TraceDoc& a, const TraceDoc& b);
// A row is highlighted when |relative| >= this (or it exists in one trace only).
constexpr double kCompareHighlightRelative = 0.10;

void draw_compare(AppState& s, const ScreenLayout& layout);

}  // namespace shardscope::gui
