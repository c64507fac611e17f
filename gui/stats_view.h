// Statistics and metrics panels: the trace's metrics (step time, peak
// memory, overlap, exposed communication... from traces::compute_metrics
// only) overall, per rank and per step; and the breakdowns per op type, per
// unit and per category (count, total, mean, self, % of self time).
#pragma once

#include <vector>

#include "gui/trace_doc.h"
#include "traces/metrics.h"

namespace shardscope::gui {

// "% of self time", the share column of the breakdown tables. A row's total
// is a sum of event durations over every lane, rank and reported step, with
// nested events inside their parents and concurrent events side by side, so
// no wall time bounds it (two concurrent kernels make 200% of a step). Self
// times do not double count nesting, and every event of the reported steps
// is in exactly one row of each table; so the share is the row's self time
// over the summed self time of the table's rows (the same sum for the three
// tables: all events of the reported steps), each share is in [0, 1] and a
// table's shares sum to 1. It says where the recorded time goes, not what
// fraction of the step a row occupies (the metrics table's union-based
// compute / comm / idle do that).
double summed_self_ms(const std::vector<traces::BreakdownRow>& rows);
// row.self_ms / summed (from summed_self_ms); 0 when summed is 0.
double self_time_share(const traces::BreakdownRow& row, double summed);

void draw_metrics_table(const traces::Metrics& m);
void draw_statistics(const TraceDoc& doc);

}  // namespace shardscope::gui
