// A padded vocabulary (policy key vocab_pad_to, docs/models.md "Padded
// vocabulary"), as llm.c lays out GPT-2: the lm_head's weight (and the token
// embedding it is tied to) get Vp = V rounded up to a multiple of
// vocab_pad_to rows, the logits Vp columns, and the cross entropy reads the
// first V of them (attr valid_classes = V, classes = Vp). The padded rows are
// initialised to zero, no label names them and the softmax excludes their
// columns, so their gradients are zero and they stay zero: the losses are
// those of the unpadded model, and every size (FSDP shards, memory,
// communication, FLOPs) is the padded one. The point is alignment: a GEMM
// whose leading dimension is 50257 (odd) runs cuBLASLt's align-1 kernels only.
//
// The logits must come from a Linear [V, C] (nn.Linear layout), possibly
// through elementwise ops (Gemma 2's softcap, a scale) before the loss.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/graph.h"

namespace shardscope::plan {

// vocab_pad_to takes values in [1, kMaxVocabPadTo] (1: no padding).
constexpr int64_t kMaxVocabPadTo = 65536;

// V rounded up to a multiple of `multiple` (>= 1).
int64_t padded_vocab(int64_t vocab, int64_t multiple);

// The padding of a graph: valid = V, padded = Vp (equal when unpadded), and
// the parameters with Vp rows whose rows [V, Vp) are padding (the lm_head's
// weight and bias, the tied embedding), in graph order. valid == 0: the graph
// has no vocabulary (no cross entropy over a vocabulary).
struct VocabPadding {
  int64_t valid = 0;
  int64_t padded = 0;
  std::vector<int> params;
  bool is_padded() const { return padded > valid; }
};
VocabPadding vocab_padding(const Graph& graph);

// The graph with its vocabulary padded to a multiple of `multiple`: shapes,
// attributes and every cost of the ops it touches (the lm_head, the
// elementwise ops after it, the loss, the tied embedding) as if the builder
// had made a Vp vocabulary. multiple 1, or a vocabulary that already is a
// multiple, returns the graph unchanged; a graph already padded to the same Vp
// is returned unchanged. Throws plan::Error naming vocab_pad_to (with the
// value and the limit) for a value outside [1, kMaxVocabPadTo], a model
// without a vocabulary (mlp, exported graphs), logits that do not come from a
// Linear [V, C], a graph padded to another Vp, or Vp above the vocabulary
// limit (plan/model_limits.h).
Graph pad_vocabulary(Graph graph, int64_t multiple);

}  // namespace shardscope::plan
