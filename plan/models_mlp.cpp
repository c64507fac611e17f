// The `mlp` preset: a residual MLP classifier (no token input, no T):
//   ""                 MLPClassifier
//   input_proj         Linear in->hidden
//   blocks             ModuleList
//   blocks.<i>         MLPBlock: ln LayerNorm, fc1 Linear hidden->ffn, act ReLU,
//                      fc2 Linear ffn->hidden, + skip (op blocks.<i>.residual)
//   head               Linear hidden->classes
// then cross_entropy against labels [B]. MLPBlock is the class to wrap.
#include "plan/models_mlp.h"

#include "plan/error.h"
#include "plan/graph_builder.h"

namespace shardscope::plan {

Graph build_mlp(const MlpConfig& c, const std::string& name) {
  if (c.in_features < 1 || c.hidden < 1 || c.ffn < 1 || c.n_blocks < 1 || c.classes < 2)
    throw Error("mlp config for '" + name + "': sizes must be positive and classes >= 2");
  GraphBuilder gb(name, "mlp", 1, 0);
  const int x_in = gb.add_input("x", {dim_b(), dim(c.in_features)}, DType::f32);
  const int labels = gb.add_input("labels", {dim_b()}, DType::i64);

  const int root = gb.add_module(-1, "", "MLPClassifier");
  auto linear = [&gb](int parent, const std::string& local, int in_tensor, int64_t in,
                      int64_t out) {
    return gb.linear(gb.add_module(parent, local, "Linear"), in_tensor, in, out, true,
                     WeightLayout::out_in);
  };
  int x = linear(root, "input_proj", x_in, c.in_features, c.hidden);
  const int blocks = gb.add_module(root, "blocks", "ModuleList", true);
  for (int64_t i = 0; i < c.n_blocks; ++i) {
    const int block = gb.add_module(blocks, std::to_string(i), "MLPBlock");
    const int n =
        gb.layernorm(gb.add_module(block, "ln", "LayerNorm"), x, c.hidden, c.layer_norm_epsilon);
    const int h = linear(block, "fc1", n, c.hidden, c.ffn);
    const int a = gb.relu(gb.add_module(block, "act", "ReLU"), h);
    const int y = linear(block, "fc2", a, c.ffn, c.hidden);
    x = gb.residual(block, "residual", x, y);
  }
  const int logits = linear(root, "head", x, c.hidden, c.classes);
  return gb.finish(gb.cross_entropy(root, logits, labels, c.classes));
}

}  // namespace shardscope::plan
