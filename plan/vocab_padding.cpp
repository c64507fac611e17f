#include "plan/vocab_padding.h"

#include <string>

#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/model_limits.h"

namespace shardscope::plan {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw Error("policy: vocab_pad_to: " + what);
}

// The ops from the lm_head to the loss: the Linear producing the logits, the
// elementwise ops (softcap, scale) between it and the cross entropy, in
// forward order, and the cross entropy.
struct LogitsChain {
  int loss_op = -1;
  int linear = -1;
  std::vector<int> elementwise;
};

int find_loss_op(const Graph& g) {
  int found = -1;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].type != OpType::cross_entropy) continue;
    if (found >= 0) return -2;  // more than one loss: no single vocabulary
    found = static_cast<int>(i);
  }
  return found;
}

// Empty `why` when the chain is found; else what breaks it.
LogitsChain logits_chain(const Graph& g, int loss_op, std::string& why) {
  std::vector<int> producer(g.tensors.size(), -1);
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int t : g.ops[i].outputs) producer[static_cast<size_t>(t)] = static_cast<int>(i);
  LogitsChain c;
  c.loss_op = loss_op;
  int t = g.ops[static_cast<size_t>(loss_op)].inputs.at(0);
  std::vector<int> elementwise;
  while (true) {
    const int p = producer[static_cast<size_t>(t)];
    if (p < 0) {
      why = "the logits '" + g.tensors[static_cast<size_t>(t)].name + "' come from no op";
      return c;
    }
    const Op& op = g.ops[static_cast<size_t>(p)];
    if (op.type == OpType::softcap || op.type == OpType::scale) {
      elementwise.insert(elementwise.begin(), p);
      t = op.inputs.at(0);
      continue;
    }
    if (op.type != OpType::linear || op.attrs.weight_layout.value_or("out_in") != "out_in") {
      why = "the logits come from op '" + op.name + "' (" + op_type_name(op.type) +
            "), not from a Linear with an [out, in] weight";
      return c;
    }
    c.linear = p;
    c.elementwise = std::move(elementwise);
    return c;
  }
}

// Sets the last dim of tensor t to `cols`.
void set_last_dim(Graph& g, int t, int64_t cols) {
  g.tensors[static_cast<size_t>(t)].shape.back() = Poly::constant(cols);
}

// Rows of a tensor: the product of all dims but the last.
Poly rows(const Graph& g, int t) {
  Poly n = Poly::constant(1);
  const std::vector<Poly>& s = g.tensors[static_cast<size_t>(t)].shape;
  for (size_t i = 0; i + 1 < s.size(); ++i) n = n * s[i];
  return n;
}

}  // namespace

int64_t padded_vocab(int64_t vocab, int64_t multiple) {
  return (vocab + multiple - 1) / multiple * multiple;
}

VocabPadding vocab_padding(const Graph& g) {
  VocabPadding vp;
  const int loss_op = find_loss_op(g);
  if (loss_op < 0) return vp;
  const OpAttrs& a = g.ops[static_cast<size_t>(loss_op)].attrs;
  if (!a.classes) return vp;
  vp.padded = *a.classes;
  vp.valid = a.valid_classes.value_or(vp.padded);
  if (!vp.is_padded()) return vp;
  std::string why;
  const LogitsChain c = logits_chain(g, loss_op, why);
  if (!why.empty())
    throw Error("graph '" + g.model_name + "': op '" + g.ops[static_cast<size_t>(loss_op)].name +
                "' has valid_classes " + std::to_string(vp.valid) + " of " +
                std::to_string(vp.padded) + ", but " + why +
                " (a padded vocabulary pads an lm_head Linear's rows)");
  vp.params = g.ops[static_cast<size_t>(c.linear)].params;
  return vp;
}

Graph pad_vocabulary(Graph g, int64_t multiple) {
  if (multiple < 1 || multiple > kMaxVocabPadTo)
    fail(std::to_string(multiple) + " is outside [1, " + std::to_string(kMaxVocabPadTo) +
         "] (1: no padding; llm.c pads GPT-2's 50257 to a multiple of 128)");
  if (multiple == 1) return g;
  const int loss_op = find_loss_op(g);
  if (g.vocab_size < 1 || loss_op < 0)
    fail("applies to language models (a vocabulary and a cross entropy over it); model '" +
         g.model_name + "' has " +
         (g.is_exported() ? std::string("an exported graph, whose loss is not a native op")
          : loss_op == -2 ? std::string("more than one cross entropy")
                          : std::string("no vocabulary")));
  Op& loss = g.ops[static_cast<size_t>(loss_op)];
  const int64_t classes = loss.attrs.classes.value_or(0);
  const int64_t vocab = loss.attrs.valid_classes.value_or(classes);
  const int64_t padded = padded_vocab(vocab, multiple);
  if (classes != vocab) {  // already padded: the same Vp, or refused
    if (classes == padded) return g;
    fail(std::to_string(multiple) + " pads the vocabulary of " + std::to_string(vocab) + " to " +
         std::to_string(padded) + ", but graph '" + g.model_name + "' is already padded to " +
         std::to_string(classes));
  }
  if (padded == vocab) return g;
  if (padded > kMaxVocab)
    fail(std::to_string(multiple) + " pads the vocabulary of " + std::to_string(vocab) + " to " +
         std::to_string(padded) + ", above the limit of " + std::to_string(kMaxVocab) +
         " (docs/models.md, \"Limits\")");
  std::string why;
  const LogitsChain c = logits_chain(g, loss_op, why);
  if (!why.empty()) fail("model '" + g.model_name + "': " + why);
  Op& lin = g.ops[static_cast<size_t>(c.linear)];
  if (lin.attrs.out_features.value_or(0) != vocab)
    fail("model '" + g.model_name + "': the lm_head '" + lin.name + "' has " +
         std::to_string(lin.attrs.out_features.value_or(0)) + " outputs, not the vocabulary's " +
         std::to_string(vocab));

  // Parameters: the weight [V, C] (tied: the embedding's table) and bias [V].
  for (int p : lin.params) {
    Param& param = g.params[static_cast<size_t>(p)];
    if (param.shape.empty() || param.shape[0] != vocab)
      fail("model '" + g.model_name + "': parameter '" + param.name + "' of the lm_head has " +
           (param.shape.empty() ? std::string("no dims") : std::to_string(param.shape[0])) +
           " rows, not the vocabulary's " + std::to_string(vocab));
    param.shape[0] = padded;
  }
  // A tied table's embedding ops read Vp rows (ids stay below V).
  for (Op& op : g.ops)
    if (op.type == OpType::embedding && !op.attrs.positions)
      for (int p : op.params)
        for (int q : lin.params)
          if (p == q) op.attrs.num_embeddings = padded;

  // The logits' elements before padding: the loss's temporaries of that size
  // (logits.float(), log_softmax's gradients) take the padded size.
  const Poly unpadded_elems = g.tensors[static_cast<size_t>(lin.outputs.at(0))].numel();

  // The lm_head: x [.., C] -> [.., Vp]; costs as GraphBuilder::linear's.
  const int64_t in = lin.attrs.in_features.value_or(0);
  const bool bias = lin.attrs.bias.value_or(false);
  lin.attrs.out_features = padded;
  set_last_dim(g, lin.outputs.at(0), padded);
  const Poly n = rows(g, lin.inputs.at(0));
  const Poly bias_flops = bias ? n * padded : Poly();
  lin.fwd_flops = n * (2 * in * padded) + bias_flops;
  lin.bwd_flops = n * (4 * in * padded) + bias_flops;
  set_op_byte_costs(g, lin);

  // Elementwise ops on the logits: every output [.., Vp]; costs per element
  // as GraphBuilder::softcap's (3 / 4) and scale's (1 / 1).
  for (int e : c.elementwise) {
    Op& op = g.ops[static_cast<size_t>(e)];
    for (int t : op.outputs) set_last_dim(g, t, padded);
    const Poly elems = g.tensors[static_cast<size_t>(op.outputs.at(0))].numel();
    const bool softcap = op.type == OpType::softcap;
    op.fwd_flops = elems * (softcap ? 3 : 1);
    op.bwd_flops = elems * (softcap ? 4 : 1);
    set_op_byte_costs(g, op);
  }

  // The loss over Vp columns, of which the first V are the vocabulary:
  // log-probabilities [.., Vp], temporaries and costs as GraphBuilder::cross_entropy's.
  set_last_dim(g, loss.outputs.at(1), padded);
  loss.attrs.classes = padded;
  loss.attrs.valid_classes = vocab;
  const Poly elems = g.tensors[static_cast<size_t>(loss.inputs.at(0))].numel();
  for (auto* temps : {&loss.fwd_temps, &loss.bwd_temps})
    for (Temp& t : *temps)
      if (t.numel == unpadded_elems) t.numel = elems;
  loss.fwd_flops = elems * 5;
  loss.bwd_flops = elems * 3;
  set_op_byte_costs(g, loss);
  g.validate();
  return g;
}

}  // namespace shardscope::plan
