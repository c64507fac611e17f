// Exported graphs (docs/models.md, "Exported graphs") hold aten ops and
// module buffers, which `plan`, `simulate` and `sweep` take but neither
// engine runs: a run is refused on the host, naming the first aten op (or
// buffer), before any rank starts.
// CUDA-free, so every build (and its tests) checks it.
#pragma once

#include "plan/graph.h"

namespace shardscope::engine::run {

// Throws std::invalid_argument (exit 2) naming the first aten op and its
// overload: "<op> (<aten>): the CPU engine does not run aten ops of exported
// graphs (simulate and sweep take them)"; `engine` is "CPU" or "CUDA". A
// graph with module buffers (Graph::buffers) is refused naming the first.
void check_engine_runs_aten(const plan::Graph& graph, const char* engine);

}  // namespace shardscope::engine::run
