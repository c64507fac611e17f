// JSON form of a step schedule (docs/schedule.md has the schema). Written by
// `shardscope plan --schedule-out FILE`; executors build schedules in memory.
#pragma once

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/schedule.h"

namespace shardscope::plan {

nlohmann::json schedule_to_json(const Graph& graph, const UnitPlan& units, const Schedule& s);

}  // namespace shardscope::plan
