// Statistics and metrics panels: the trace's metrics (step time, peak
// memory, overlap, exposed communication... from traces::compute_metrics
// only) overall, per rank and per step; and the breakdowns per op type, per
// unit and per category (count, total, mean, self, share of step).
#pragma once

#include "gui/trace_doc.h"
#include "traces/metrics.h"

namespace shardscope::gui {

// Share of the step of a breakdown row: its total over the summed step time
// of the windows the breakdowns cover (each rank's reported steps: S - 1
// when it has S > 1 steps, else 1; times its step time as the metrics
// report it). 0 when that sum is 0.
double step_share(const traces::Metrics& m, const traces::BreakdownRow& row);

void draw_metrics_table(const traces::Metrics& m);
void draw_statistics(const TraceDoc& doc);

}  // namespace shardscope::gui
