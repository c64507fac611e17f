#include "engine/run/aten_support.h"

#include <stdexcept>
#include <string>

namespace shardscope::engine::run {

void check_engine_runs_aten(const plan::Graph& graph, const char* engine) {
  for (const plan::Op& op : graph.ops)
    if (op.type == plan::OpType::aten)
      throw std::invalid_argument(op.name + " (" + op.attrs.aten.value_or("?") + "): the " +
                                  engine +
                                  " engine does not run aten ops of exported graphs (simulate "
                                  "and sweep take them)");
  // Module buffers are resident tensors no op produces: the engines have no
  // way to fill them.
  for (int t : graph.buffers)
    throw std::invalid_argument("buffer tensor '" + graph.tensors[static_cast<size_t>(t)].name +
                                "': the " + engine +
                                " engine does not hold module buffers of exported graphs "
                                "(simulate and sweep take them)");
}

}  // namespace shardscope::engine::run
