// Graph JSON: the on-disk form of a plan::Graph (`shardscope plan --graph-out`,
// `--model graph.json`). Layout, version 1:
//
//   { "format": "shardscope.graph", "version": 1,
//     "model_name": str, "family": str, "max_seq_len": int, "vocab_size": int,
//     "modules": [ {"name", "class_name", "parent": int, "is_container": bool} ],
//     "params":  [ {"name", "shape": [int...], "dtype": "f32", "module": int} ],
//     "tensors": [ {"name", "shape": ["B", "T", "768"], "dtype": "f32"|"i64"|...,
//                   "precision" (absent: compute), "requires_grad": false (absent: true)} ],
//     "ops": [ {"name", "type", "module": int, "inputs": [int], "outputs": [int],
//               "params": [int], "saved": [int],
//               "fwd_flops", "bwd_flops", "fwd_bytes", "bwd_bytes", "workspace_bytes": Poly text,
//               "attrs": {"eps": 1e-05, ...}} ],
//     "inputs": [int], "loss": int,
//     optional (exported graphs; absent when empty):
//     "default_wrap_classes": [str], "buffers": [int], "exporter": {...} }
//
// Indices refer to the arrays above. Module children are not stored: they are
// the modules naming a module as parent, in storage (pre-)order. In an op,
// "params", "saved", "workspace_bytes" and "attrs" may be left out (empty,
// empty, "0", {}); every other key is required and unknown keys are errors.
// "type" is an op_type_name; the "attrs" keys are the OpAttrs members (plan/graph.h)
// that the op's type may carry, each present only when set; type "aten" requires
// attrs "aten" (the overload) and "kind" (gemm, attention or memory).
// "exporter" is provenance: any object, kept and written back unchanged.
// Poly fields use the text form of plan/expr.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan/graph.h"

namespace shardscope::plan {

inline constexpr const char* kGraphFormat = "shardscope.graph";

// Always writes every key (the canonical form): graph_to_json(graph_from_json(j))
// equals graph_to_json of the original graph.
nlohmann::json graph_to_json(const Graph& graph);

// Strict reader: any malformed field throws plan::Error naming its JSON path,
// e.g. `graph JSON /ops/3/fwd_flops: expected a string like "2*B*T*768"`.
// Never crashes on arbitrary input. Ends with Graph::validate().
Graph graph_from_json(const nlohmann::json& json);

// File forms. Errors (unreadable file, JSON syntax, schema) are plan::Error
// messages starting with the path.
Graph load_graph_file(const std::string& path);
// Writes through io::OutputFile (io/output_file.h): a regular file is replaced
// atomically, a device or FIFO written in place, anything else refused.
void save_graph_file(const Graph& graph, const std::string& path);

}  // namespace shardscope::plan
