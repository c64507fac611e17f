#include "plan/models.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "plan/error.h"
#include "plan/graph_builder.h"
#include "plan/graph_io.h"
#include "plan/json_input.h"
#include "plan/model_limits.h"
#include "plan/models_neox.h"
#include "plan/models_opt.h"

namespace shardscope::plan {

using nlohmann::json;

// ---- presets -------------------------------------------------------------------

namespace {

Gpt2Config gpt2_preset(int64_t n_layer, int64_t n_embd, int64_t n_head) {
  Gpt2Config c;
  c.n_layer = n_layer;
  c.n_embd = n_embd;
  c.n_head = n_head;
  return c;
}

// Meta-Llama-3-8B / 70B config.json values.
LlamaConfig llama3_preset(int64_t hidden, int64_t ffn, int64_t layers, int64_t heads) {
  LlamaConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = 8;
  c.vocab_size = 128256;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  return c;
}

struct Preset {
  const char* name;
  std::function<Graph(const std::string&)> build;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"gpt2-tiny",
       [](const std::string& n) {
         Gpt2Config c = gpt2_preset(2, 64, 4);
         c.n_positions = 128;
         c.vocab_size = 512;
         return build_gpt2(c, n);
       }},
      {"gpt2-small", [](const std::string& n) { return build_gpt2(gpt2_preset(12, 768, 12), n); }},
      {"gpt2-medium",
       [](const std::string& n) { return build_gpt2(gpt2_preset(24, 1024, 16), n); }},
      {"gpt2-large", [](const std::string& n) { return build_gpt2(gpt2_preset(36, 1280, 20), n); }},
      {"gpt2-xl", [](const std::string& n) { return build_gpt2(gpt2_preset(48, 1600, 25), n); }},
      {"llama-tiny",
       [](const std::string& n) {
         LlamaConfig c;
         c.hidden_size = 64;
         c.intermediate_size = 176;
         c.num_hidden_layers = 2;
         c.num_attention_heads = 4;
         c.num_key_value_heads = 2;
         c.vocab_size = 512;
         c.max_position_embeddings = 128;
         c.rms_norm_eps = 1e-5;
         return build_llama(c, n);
       }},
      {"llama3-8b",
       [](const std::string& n) { return build_llama(llama3_preset(4096, 14336, 32, 32), n); }},
      {"llama3-70b",
       [](const std::string& n) { return build_llama(llama3_preset(8192, 28672, 80, 64), n); }},
      {"mlp", [](const std::string& n) { return build_mlp(MlpConfig{}, n); }},
  };
  return kPresets;
}

std::string preset_list() {
  std::string out;
  for (const Preset& p : presets()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

}  // namespace

std::vector<std::string> model_presets() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.emplace_back(p.name);
  return names;
}

bool is_model_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return true;
  return false;
}

// ---- loading -------------------------------------------------------------------

Graph model_from_hf_config(const json& config, const std::string& source) {
  if (!config.is_object()) throw Error(source + ": expected a JSON object (a config.json)");
  std::string family;
  auto type = config.find("model_type");
  if (type != config.end() && !type->is_null()) {
    if (!type->is_string()) throw Error(source + ": key 'model_type': expected a string");
    const std::string t = type->get<std::string>();
    if (t == "gpt2")
      family = "gpt2";
    else if (t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3")
      family = "llama";
    else if (t == "gemma" || t == "gemma2")
      family = "gemma";
    else if (t == "phi3")
      family = "phi3";
    else if (t == "gpt_neox" || t == "opt")
      family = t;
    else if (t == "mixtral" || t == "qwen2_moe")
      family = "moe";
    else
      throw Error(source + ": unsupported model_type '" + quote_input(t) +
                  "' (supported: gemma, gemma2, gpt2, gpt_neox, llama, mistral, mixtral, opt, "
                  "phi3, qwen2, qwen2_moe, qwen3)");
  } else if (config.contains("n_layer") || config.contains("n_embd")) {
    family = "gpt2";
  } else if (config.contains("hidden_size") || config.contains("intermediate_size")) {
    family = "llama";
  } else {
    throw Error(source +
                ": not a recognized model config (expected a shardscope graph JSON, or a Hugging "
                "Face config.json with model_type gemma/gemma2/gpt2/gpt_neox/llama/mistral/"
                "mixtral/opt/phi3/qwen2/qwen2_moe/qwen3)");
  }
  if (family == "gpt2") return build_gpt2(gpt2_config_from_hf(config, source), source);
  if (family == "gemma") return build_gemma(gemma_config_from_hf(config, source), source);
  if (family == "phi3") return build_phi3(phi3_config_from_hf(config, source), source);
  if (family == "gpt_neox") return build_neox(neox_config_from_hf(config, source), source);
  if (family == "opt") return build_opt(opt_config_from_hf(config, source), source);
  if (family == "moe") return build_moe(moe_config_from_hf(config, source), source);
  return build_llama(llama_config_from_hf(config, source), source);
}

Graph load_model(const std::string& spec) {
  for (const Preset& p : presets())
    if (spec == p.name) return p.build(spec);

  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec))
    throw Error("model '" + spec + "': not a preset (" + preset_list() + ") and is a directory");
  std::ifstream in(spec, std::ios::binary);
  if (!in)
    throw Error("model '" + spec + "': not a preset (" + preset_list() +
                ") and not a readable file (" + std::strerror(errno) + ")");
  in.close();
  const json j = parse_json_input(read_input_file(spec, "model", kMaxModelFileBytes), spec);
  if (j.is_object() && j.contains("format")) {
    if (j["format"] != kGraphFormat)
      throw Error(spec + ": /format: expected \"" + std::string(kGraphFormat) + "\"");
    try {
      return graph_from_json(j);
    } catch (const Error& e) {
      throw Error(spec + ": " + e.what());
    }
  }
  return model_from_hf_config(j, spec);
}

// ---- config.json access --------------------------------------------------------

HfConfigReader::HfConfigReader(const json& config, std::string source)
    : config_(config), source_(std::move(source)) {
  if (!config_.is_object()) throw Error(source_ + ": expected a JSON object (a config.json)");
}

void HfConfigReader::fail(const char* key, const std::string& what) const {
  throw Error(source_ + ": key '" + key + "': " + what);
}

void HfConfigReader::check_kv_heads(int64_t heads, int64_t kv_heads) const {
  if (heads % kv_heads != 0)
    fail("num_key_value_heads", "num_attention_heads " + std::to_string(heads) +
                                    " is not a multiple of num_key_value_heads " +
                                    std::to_string(kv_heads));
}

void HfConfigReader::check_derived_head_dim(int64_t hidden, int64_t heads, int64_t head_dim) const {
  if (head_dim == 0 && hidden % heads != 0)
    fail("num_attention_heads", "hidden_size " + std::to_string(hidden) +
                                    " is not divisible by num_attention_heads " +
                                    std::to_string(heads) + " (and no head_dim is given)");
  if (head_dim != 0) check_attention_width(heads, head_dim);
}

void HfConfigReader::check_attention_width(int64_t heads, int64_t head_dim) const {
  // Both are at most 4096 (hf_size_limit): the product cannot overflow.
  if (heads * head_dim > kMaxAttentionWidth)
    fail("head_dim", "num_attention_heads " + std::to_string(heads) + " x head_dim " +
                         std::to_string(head_dim) + " = " + std::to_string(heads * head_dim) +
                         " exceeds the limit " + std::to_string(kMaxAttentionWidth) +
                         " (the width of q_proj's output; published models have at most 24,576)");
}

const json* HfConfigReader::get(const char* key) const {
  auto it = config_.find(key);
  if (it == config_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfigReader::has(const char* key) const {
  return get(key) != nullptr;
}

int64_t HfConfigReader::get_int(const char* key, int64_t fallback, int64_t min_value) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_number_integer()) fail(key, std::string("expected an integer, got ") + v->dump());
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(key, "value too large");
  const int64_t x = v->get<int64_t>();
  if (x < min_value) fail(key, "must be >= " + std::to_string(min_value) + ", got " + v->dump());
  // Checked here, as the key is read, so that no graph is built from it.
  if (const SizeLimit* limit = hf_size_limit(key); limit && x > limit->max)
    fail(key, std::to_string(x) + " exceeds the limit " + std::to_string(limit->max) + " (" +
                  limit->why + ")");
  return x;
}

int64_t HfConfigReader::require_int(const char* key, int64_t min_value) const {
  if (!has(key)) fail(key, "missing (required)");
  return get_int(key, 0, min_value);
}

double HfConfigReader::get_double(const char* key, double fallback) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_number()) fail(key, std::string("expected a number, got ") + v->dump());
  const double x = v->get<double>();
  if (!(x > 0)) fail(key, "must be > 0, got " + v->dump());
  return x;
}

bool HfConfigReader::get_bool(const char* key, bool fallback) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, std::string("expected true or false, got ") + v->dump());
  return v->get<bool>();
}

std::string HfConfigReader::get_string(const char* key, const std::string& fallback) const {
  const json* v = get(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, std::string("expected a string, got ") + v->dump());
  return v->get<std::string>();
}

// ---- GraphBuilder --------------------------------------------------------------

Poly dim_b() {
  return Poly::term(1, 1, 0);
}
Poly dim_t() {
  return Poly::term(1, 0, 1);
}
Poly dim(int64_t n) {
  return Poly::constant(n);
}

std::string gated_activation(const std::string& hidden_act, const char* family,
                             const std::string& name) {
  if (hidden_act == "silu") return "silu";
  if (hidden_act == "gelu") return "gelu";
  if (hidden_act == "gelu_pytorch_tanh") return "gelu_tanh";
  throw Error(std::string(family) + " config for '" + name + "': unsupported hidden_act '" +
              hidden_act + "'");
}

GraphBuilder::GraphBuilder(std::string model_name, std::string family, int64_t max_seq_len,
                           int64_t vocab_size) {
  g_.model_name = std::move(model_name);
  g_.family = std::move(family);
  g_.max_seq_len = max_seq_len;
  g_.vocab_size = vocab_size;
}

int GraphBuilder::add_module(int parent, const std::string& local_name,
                             const std::string& class_name, bool is_container) {
  Module m;
  m.class_name = class_name;
  m.parent = parent;
  m.is_container = is_container;
  const int index = static_cast<int>(g_.modules.size());
  if (parent >= 0) {
    const std::string& p = g_.modules[parent].name;
    m.name = p.empty() ? local_name : p + "." + local_name;
    g_.modules[parent].children.push_back(index);
  }
  g_.modules.push_back(std::move(m));
  return index;
}

int GraphBuilder::add_param(int module, const std::string& local_name, std::vector<int64_t> shape) {
  Param p;
  const std::string& m = g_.modules[module].name;
  p.name = m.empty() ? local_name : m + "." + local_name;
  p.shape = std::move(shape);
  p.module = module;
  g_.params.push_back(std::move(p));
  return static_cast<int>(g_.params.size()) - 1;
}

int GraphBuilder::add_tensor(const std::string& name, Shape shape, DType dtype,
                             Precision precision) {
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.precision = precision;
  g_.tensors.push_back(std::move(t));
  return static_cast<int>(g_.tensors.size()) - 1;
}

int GraphBuilder::add_input(const std::string& name, Shape shape, DType dtype) {
  const int t = add_tensor(name, std::move(shape), dtype);
  g_.inputs.push_back(t);
  return t;
}

std::string GraphBuilder::op_name(int module, const std::string& suffix) const {
  const std::string& m = g_.modules[module].name;
  if (suffix.empty()) return m;
  return m.empty() ? suffix : m + "." + suffix;
}

Poly GraphBuilder::rows(int tensor) const {
  Poly n = dim(1);
  const Shape& s = shape(tensor);
  for (size_t i = 0; i + 1 < s.size(); ++i) n = n * s[i];
  return n;
}

Op& GraphBuilder::add_op(Op op, const Poly* param_traffic) {
  auto tensor_bytes = [this](int t) {
    const Tensor& tensor = g_.tensors[t];
    return tensor.numel() * (is_floating(tensor.dtype) ? 4 : dtype_bytes(tensor.dtype));
  };
  Poly params_elems;
  if (param_traffic) {
    params_elems = *param_traffic;
  } else {
    for (int p : op.params) params_elems += dim(g_.params[p].numel());
  }
  Poly fwd = params_elems * 4;
  for (int t : op.inputs) fwd += tensor_bytes(t);
  for (int t : op.outputs) fwd += tensor_bytes(t);
  // Backward: read dY (outputs[0]), saved tensors and parameters; write the
  // gradients of the floating inputs produced by ops and of the parameters.
  Poly bwd = params_elems * 8 + tensor_bytes(op.outputs[0]);
  for (int t : op.saved) bwd += tensor_bytes(t);
  for (int t : op.inputs) {
    const bool from_data =
        std::find(g_.inputs.begin(), g_.inputs.end(), t) != g_.inputs.end();  // no gradient
    if (is_floating(g_.tensors[t].dtype) && !from_data) bwd += tensor_bytes(t);
  }
  op.fwd_bytes = fwd;
  op.bwd_bytes = bwd;
  g_.ops.push_back(std::move(op));
  return g_.ops.back();
}

int GraphBuilder::embedding(int module, int ids, int64_t rows_count, int64_t dim_size,
                            int64_t padding_idx) {
  const int weight = add_param(module, "weight", {rows_count, dim_size});
  Shape out_shape = shape(ids);
  out_shape.push_back(dim(dim_size));
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::embedding;
  op.module = module;
  op.inputs = {ids};
  op.outputs = {add_tensor(op.name + ".out", out_shape)};
  op.params = {weight};
  op.saved = {ids};
  const Poly n = g_.tensors[ids].numel();
  const Poly gathered = n * dim_size;
  op.bwd_flops = gathered;
  op.attrs.num_embeddings = rows_count;
  op.attrs.embedding_dim = dim_size;
  if (padding_idx >= 0) op.attrs.padding_idx = padding_idx;
  return add_op(std::move(op), &gathered).outputs[0];
}

int GraphBuilder::position_embedding(int module, int64_t rows_count, int64_t dim_size,
                                     int64_t module_buffer_bytes, int64_t offset) {
  const int weight = add_param(module, "weight", {rows_count, dim_size});
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::embedding;
  op.module = module;
  op.outputs = {add_tensor(op.name + ".out", {dim_t(), dim(dim_size)})};
  if (module_buffer_bytes > 0) {
    // The model's non-parameter module buffers (GPT-2's causal masks),
    // which FSDP does not shard, as fp32 elements of the same bytes. They
    // exist for the whole run; kept by the first op from its forward to its
    // backward, they are counted through all of forward and backward (not
    // during the optimizer step), checkpointing or not.
    op.outputs.push_back(add_tensor("module_buffers", {dim((module_buffer_bytes + 3) / 4)},
                                    DType::f32, Precision::fp32));
    op.saved.push_back(op.outputs.back());
  }
  op.params = {weight};
  const Poly gathered = dim_t() * dim_size;
  op.bwd_flops = gathered;
  op.attrs.num_embeddings = rows_count;
  op.attrs.embedding_dim = dim_size;
  op.attrs.positions = true;
  if (offset != 0) op.attrs.position_offset = offset;
  return add_op(std::move(op), &gathered).outputs[0];
}

int GraphBuilder::linear(int module, int x, int64_t in, int64_t out, bool bias, WeightLayout layout,
                         int tied_weight) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::linear;
  op.module = module;
  if (tied_weight >= 0) {
    op.params = {tied_weight};
    bias = false;
  } else {
    op.params = {add_param(module, "weight",
                           layout == WeightLayout::out_in ? std::vector<int64_t>{out, in}
                                                          : std::vector<int64_t>{in, out})};
    if (bias) op.params.push_back(add_param(module, "bias", {out}));
  }
  Shape out_shape = shape(x);
  out_shape.back() = dim(out);
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", out_shape)};
  op.saved = {x};
  const Poly n = rows(x);
  const Poly bias_flops = bias ? n * out : Poly();
  op.fwd_flops = n * (2 * in * out) + bias_flops;
  op.bwd_flops = n * (4 * in * out) + bias_flops;
  op.attrs.in_features = in;
  op.attrs.out_features = out;
  op.attrs.bias = bias;
  op.attrs.weight_layout = layout == WeightLayout::out_in ? "out_in" : "in_out";
  if (tied_weight >= 0) op.attrs.tied = true;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::layernorm(int module, int x, int64_t dim_size, double eps) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::layernorm;
  op.module = module;
  op.params = {add_param(module, "weight", {dim_size}), add_param(module, "bias", {dim_size})};
  Shape stats_shape(shape(x).begin(), shape(x).end() - 1);
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", shape(x)),
                add_tensor(op.name + ".mean", stats_shape, DType::f32, Precision::fp32),
                add_tensor(op.name + ".rstd", stats_shape, DType::f32, Precision::fp32)};
  op.saved = {x, op.outputs[1], op.outputs[2]};
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n * 8;
  op.bwd_flops = n * 16;
  op.attrs.eps = eps;
  op.attrs.dim = dim_size;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::rmsnorm(int module, int x, int64_t dim_size, double eps, double weight_offset,
                          int64_t groups) {
  if (groups < 1) throw Error("rmsnorm '" + op_name(module, "") + "': groups < 1");
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::rmsnorm;
  op.module = module;
  op.params = {add_param(module, "weight", {dim_size})};
  Shape stats_shape(shape(x).begin(), shape(x).end() - 1);
  if (groups > 1) stats_shape.push_back(dim(groups));  // one rstd per head: [B, T, H]
  op.inputs = {x};
  // LlamaRMSNorm: x.to(fp32); rsqrt(pow(x, 2).mean(-1) + eps) (result saved,
  // fp32); x * rsqrt (saves the fp32 x); .to(input dtype); weight * that
  // (saves the normalised value). In fp32 the copy is x itself.
  // GemmaRMSNorm (weight_offset 1): the same in fp32, then normed * (1 +
  // weight.float()) (saves the fp32 normalised value) and .type_as(x): the
  // fp32 product is a forward temporary below fp32. The C-sized fp32 (1 +
  // weight) it also saves is not counted.
  const bool gemma = weight_offset != 0.0;
  op.outputs = {add_tensor(op.name + ".out", shape(x)),
                add_tensor(op.name + ".rstd", stats_shape, DType::f32, Precision::fp32),
                add_tensor(op.name + ".normed", shape(x), DType::f32,
                           gemma ? Precision::fp32 : Precision::compute),
                add_tensor(op.name + ".x_fp32", shape(x), DType::f32, Precision::upcast_extra)};
  op.saved = {x, op.outputs[1], op.outputs[2], op.outputs[3]};
  const Poly n = g_.tensors[x].numel();
  if (gemma) op.fwd_temps = {Temp{n, Precision::fp32_if_lowp}};
  op.fwd_flops = n * 4;
  op.bwd_flops = n * 8;
  op.attrs.eps = eps;
  op.attrs.dim = dim_size;
  if (gemma) op.attrs.weight_offset = weight_offset;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::attention(int module, const std::vector<int>& qkv, int64_t n_head,
                            int64_t n_kv_head, int64_t head_dim, OpAttrs attrs) {
  Op op;
  op.name = op_name(module, "attention");
  op.type = OpType::attention;
  op.module = module;
  op.inputs = qkv;
  // q's layout fixes B and T: [B, T, H*D] (or packed [B, T, 3*H*D]).
  const Shape& q = shape(qkv[0]);
  const Poly b = q[0], t = q[1];
  // SDPA (flash) keeps q, k, v, its output and the fp32 log-sum-exp; the
  // output is laid out [B, T, H, D], so transpose(1, 2).contiguous() is no
  // copy and o_proj saves the same tensor (saved-tensor hooks under FSDP2,
  // torch 2.9.1).
  op.outputs = {add_tensor(op.name + ".out", {b, t, dim(n_head * head_dim)}),
                add_tensor(op.name + ".lse", {b, dim(n_head), t}, DType::f32, Precision::fp32)};
  const bool rope = attrs.rope.value_or(false);
  if (rope && qkv.size() == 1) {
    // RoPE on a packed projection (GPT-NeoX's query_key_value): q and k are
    // rotated into new tensors that SDPA saves, while v, a view of the packed
    // output, keeps all of it alive: roped copies of q and k on top of it.
    op.outputs.push_back(add_tensor(op.name + ".q_roped", {b, t, dim(n_head * head_dim)}));
    op.outputs.push_back(add_tensor(op.name + ".k_roped", {b, t, dim(n_kv_head * head_dim)}));
  }
  if (attrs.qkv_per_head.value_or(false)) {
    // GPT-NeoX's rotary ends in torch.cat, whose result is contiguous
    // [B, H, T, D]; SDPA lays its output out like q, so transpose(1, 2)
    // .contiguous() copies it: SDPA keeps its own output and dense saves the
    // copy (outputs[0]). Measured with saved-tensor hooks, torch 2.9.1.
    op.outputs.push_back(add_tensor(op.name + ".out_bhtd", {b, t, dim(n_head * head_dim)}));
  }
  op.saved = qkv;
  for (int o : op.outputs) op.saved.push_back(o);
  const Poly square = b * t * t * (n_head * head_dim);  // B*T^2*H*D
  op.fwd_flops = square * 4;
  op.bwd_flops = square * 10;
  if (rope) {
    const int64_t rotary = attrs.rotary_dim.value_or(head_dim);
    const Poly rope_flops = b * t * (3 * (n_head + n_kv_head) * rotary);
    op.fwd_flops = op.fwd_flops + rope_flops;
    op.bwd_flops = op.bwd_flops + rope_flops;
  }
  if (attrs.softcap) {  // divide, tanh, multiply per score; backward 1 - t^2 and the product
    const Poly scores = b * t * t * n_head;
    op.fwd_flops = op.fwd_flops + scores * 3;
    op.bwd_flops = op.bwd_flops + scores * 3;
  }
  attrs.n_head = n_head;
  attrs.n_kv_head = n_kv_head;
  attrs.head_dim = head_dim;
  attrs.causal = true;
  attrs.qkv_packed = qkv.size() == 1;
  op.attrs = std::move(attrs);
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::gelu(int module, int x, const std::string& approximate, int unfused_saved,
                       int unfused_bwd_temps) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::gelu;
  op.module = module;
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", shape(x))};
  op.saved = {x};
  for (int i = 0; i < unfused_saved; ++i) {
    op.outputs.push_back(add_tensor(op.name + ".saved" + std::to_string(i), shape(x)));
    op.saved.push_back(op.outputs.back());
  }
  if (unfused_bwd_temps > 0)
    op.bwd_temps.push_back(Temp{g_.tensors[x].numel() * unfused_bwd_temps, Precision::compute});
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n * 8;
  op.bwd_flops = n * 16;
  op.attrs.approximate = approximate;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::relu(int module, int x) {
  Op op;
  op.name = op_name(module, "");
  op.type = OpType::relu;
  op.module = module;
  op.inputs = {x};
  op.outputs = {add_tensor(op.name + ".out", shape(x))};
  op.saved = {op.outputs[0]};  // PyTorch's relu saves its result
  const Poly n = g_.tensors[x].numel();
  op.fwd_flops = n;
  op.bwd_flops = n;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::swiglu(int module, int gate, int up, const std::string& activation,
                         int unfused_saved, int unfused_bwd_temps) {
  Op op;
  op.name = op_name(module, "swiglu");
  op.type = OpType::swiglu;
  op.module = module;
  op.inputs = {gate, up};
  // LlamaMLP: down_proj(act_fn(gate) * up): act_fn saves gate, the product
  // saves act_fn(gate) and up.
  op.outputs = {add_tensor(op.name + ".out", shape(gate)),
                add_tensor(op.name + ".act", shape(gate))};
  op.saved = {gate, up, op.outputs[1]};
  for (int i = 0; i < unfused_saved; ++i) {
    op.outputs.push_back(add_tensor(op.name + ".saved" + std::to_string(i), shape(gate)));
    op.saved.push_back(op.outputs.back());
  }
  if (unfused_bwd_temps > 0)
    op.bwd_temps.push_back(Temp{g_.tensors[gate].numel() * unfused_bwd_temps, Precision::compute});
  const Poly n = g_.tensors[gate].numel();
  op.fwd_flops = n * 5;
  op.bwd_flops = n * 10;
  op.attrs.activation = activation;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::residual(int module, const std::string& suffix, int a, int b) {
  Op op;
  op.name = op_name(module, suffix);
  op.type = OpType::residual;
  op.module = module;
  op.inputs = {a, b};
  // The larger operand gives the shape (GPT-2 adds wpe [T, C] to wte [B, T, C]).
  const int big = shape(a).size() >= shape(b).size() ? a : b;
  op.outputs = {add_tensor(op.name + ".out", shape(big))};
  const Poly n = g_.tensors[big].numel();
  op.fwd_flops = n;
  op.bwd_flops = n;
  if (shape(a) != shape(b)) op.attrs.broadcast = true;
  return add_op(std::move(op)).outputs[0];
}

int GraphBuilder::cross_entropy(int module, int logits, int labels, int64_t classes) {
  Op op;
  op.name = op_name(module, "cross_entropy");
  op.type = OpType::cross_entropy;
  op.module = module;
  op.inputs = {logits, labels};
  op.outputs = {add_tensor("loss", {}),
                add_tensor(op.name + ".log_probs", shape(logits), DType::f32, Precision::fp32)};
  op.saved = {op.outputs[1], labels};
  const Poly n = g_.tensors[logits].numel();
  // ForCausalLMLoss: logits.float() lives until log_softmax has run; in
  // backward nll_loss's gradient (fp32) then log_softmax's (fp32 below fp32;
  // in fp32 it is the logits' gradient itself) are live at once with the
  // saved log-probabilities; the nll gradient is dropped, then the second is
  // cast into the logits' gradient (the op's result) and dropped. Temps are
  // allocated in this order, each freed once the next exists (compute_op).
  op.fwd_temps = {Temp{n, Precision::fp32_if_lowp}};
  op.bwd_temps = {Temp{n, Precision::fp32}, Temp{n, Precision::fp32_if_lowp}};
  op.fwd_flops = n * 5;
  op.bwd_flops = n * 3;
  op.attrs.classes = classes;
  op.attrs.reduction = "mean";
  return add_op(std::move(op)).outputs[0];
}

Graph GraphBuilder::finish(int loss) {
  g_.loss = loss;
  g_.validate();
  return std::move(g_);
}

}  // namespace shardscope::plan
