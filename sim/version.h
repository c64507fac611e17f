// The simulator library (discrete-event replay of the plan's schedule) lands
// with its own issue; this header carries the version string it stamps into
// traces so that every binary links a real target from the start.
#pragma once

namespace shardscope::sim {
const char* version();
}  // namespace shardscope::sim
