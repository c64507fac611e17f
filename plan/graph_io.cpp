#include "plan/graph_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "io/output_file.h"
#include "plan/error.h"
#include "plan/json_input.h"

namespace shardscope::plan {

using nlohmann::json;

// ---- writing ----------------------------------------------------------------

namespace {

json index_list(const std::vector<int>& v) {
  return json(v);
}

}  // namespace

// ---- op attributes ----------------------------------------------------------

namespace {

// How an attribute is stored in graph JSON.
enum class AttrForm {
  value,      // the JSON value of the member (integer, number, bool, string)
  json_text,  // a std::string member holding compact JSON text: stored as that JSON
};

// Calls f(name, member, form) for every attribute an op of `type` may carry
// (OpAttrs in plan/graph.h); `A` is OpAttrs or const OpAttrs.
template <class A, class F>
void for_each_attr(OpType type, A& a, F&& f) {
  const AttrForm v = AttrForm::value;
  switch (type) {
    case OpType::embedding:
      f("num_embeddings", a.num_embeddings, v);
      f("embedding_dim", a.embedding_dim, v);
      f("positions", a.positions, v);
      f("position_offset", a.position_offset, v);
      f("padding_idx", a.padding_idx, v);
      return;
    case OpType::linear:
      f("in_features", a.in_features, v);
      f("out_features", a.out_features, v);
      f("bias", a.bias, v);
      f("weight_layout", a.weight_layout, v);
      f("tied", a.tied, v);
      return;
    case OpType::layernorm:
      f("eps", a.eps, v);
      f("dim", a.dim, v);
      return;
    case OpType::rmsnorm:
      f("eps", a.eps, v);
      f("dim", a.dim, v);
      f("weight_offset", a.weight_offset, v);
      return;
    case OpType::attention:
      f("n_head", a.n_head, v);
      f("n_kv_head", a.n_kv_head, v);
      f("head_dim", a.head_dim, v);
      f("scale", a.scale, v);
      f("rope", a.rope, v);
      f("rope_theta", a.rope_theta, v);
      f("rope_scaling", a.rope_scaling, AttrForm::json_text);
      f("sliding_window", a.sliding_window, v);
      f("softcap", a.softcap, v);
      f("causal", a.causal, v);
      f("qkv_packed", a.qkv_packed, v);
      f("qkv_per_head", a.qkv_per_head, v);
      f("rotary_dim", a.rotary_dim, v);
      f("rope_cat", a.rope_cat, v);
      f("repeat_kv", a.repeat_kv, v);
      return;
    case OpType::gelu:
      f("approximate", a.approximate, v);
      return;
    case OpType::swiglu:
      f("activation", a.activation, v);
      f("packed", a.packed, v);
      return;
    case OpType::residual:
      f("broadcast", a.broadcast, v);
      return;
    case OpType::cross_entropy:
      f("classes", a.classes, v);
      f("valid_classes", a.valid_classes, v);
      f("reduction", a.reduction, v);
      return;
    case OpType::scale:
      f("scale", a.scale, v);
      return;
    case OpType::softcap:
      f("softcap", a.softcap, v);
      return;
    case OpType::moe_router:
      f("num_experts", a.num_experts, v);
      f("top_k", a.top_k, v);
      f("norm_topk_prob", a.norm_topk_prob, v);
      return;
    case OpType::moe_dispatch:
      f("num_experts", a.num_experts, v);
      f("top_k", a.top_k, v);
      f("expert", a.expert, v);
      return;
    case OpType::moe_combine:
      f("num_experts", a.num_experts, v);
      f("top_k", a.top_k, v);
      return;
    case OpType::aten:
      f("aten", a.aten, v);
      f("kind", a.kind, v);
      return;
    case OpType::rope:
    case OpType::relu:
    case OpType::sigmoid_gate:
      return;
  }
}

json attrs_to_json(const Op& op) {
  json j = json::object();
  for_each_attr(op.type, op.attrs, [&](const char* name, const auto& member, AttrForm form) {
    if (!member) return;
    if constexpr (std::is_same_v<std::decay_t<decltype(*member)>, std::string>) {
      if (form == AttrForm::json_text) {
        j[name] = json::parse(*member);
        return;
      }
    }
    j[name] = *member;
  });
  return j;
}

}  // namespace

json graph_to_json(const Graph& graph) {
  json j = json::object();
  j["format"] = kGraphFormat;
  j["version"] = Graph::kSchemaVersion;
  j["model_name"] = graph.model_name;
  j["family"] = graph.family;
  j["max_seq_len"] = graph.max_seq_len;
  j["vocab_size"] = graph.vocab_size;

  json modules = json::array();
  for (const Module& m : graph.modules) {
    modules.push_back({{"name", m.name},
                       {"class_name", m.class_name},
                       {"parent", m.parent},
                       {"is_container", m.is_container}});
  }
  j["modules"] = std::move(modules);

  json params = json::array();
  for (const Param& p : graph.params) {
    params.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"dtype", dtype_name(p.dtype)},
                      {"module", p.module}});
  }
  j["params"] = std::move(params);

  json tensors = json::array();
  for (const Tensor& t : graph.tensors) {
    json shape = json::array();
    for (const Poly& d : t.shape) shape.push_back(d.to_string());
    json jt = {{"name", t.name}, {"shape", std::move(shape)}, {"dtype", dtype_name(t.dtype)}};
    if (t.precision != Precision::compute) jt["precision"] = precision_name(t.precision);
    if (!t.requires_grad) jt["requires_grad"] = false;
    tensors.push_back(std::move(jt));
  }
  j["tensors"] = std::move(tensors);

  json ops = json::array();
  for (const Op& op : graph.ops) {
    ops.push_back({{"name", op.name},
                   {"type", op_type_name(op.type)},
                   {"module", op.module},
                   {"inputs", index_list(op.inputs)},
                   {"outputs", index_list(op.outputs)},
                   {"params", index_list(op.params)},
                   {"saved", index_list(op.saved)},
                   {"fwd_flops", op.fwd_flops.to_string()},
                   {"bwd_flops", op.bwd_flops.to_string()},
                   {"fwd_bytes", op.fwd_bytes.to_string()},
                   {"bwd_bytes", op.bwd_bytes.to_string()},
                   {"workspace_bytes", op.workspace_bytes.to_string()},
                   {"attrs", attrs_to_json(op)}});
    auto temps_json = [](const std::vector<Temp>& temps) {
      json a = json::array();
      for (const Temp& t : temps)
        a.push_back({{"numel", t.numel.to_string()}, {"precision", precision_name(t.precision)}});
      return a;
    };
    if (!op.fwd_temps.empty()) ops.back()["fwd_temps"] = temps_json(op.fwd_temps);
    if (!op.bwd_temps.empty()) ops.back()["bwd_temps"] = temps_json(op.bwd_temps);
  }
  j["ops"] = std::move(ops);
  j["inputs"] = index_list(graph.inputs);
  j["loss"] = graph.loss;
  // Exported graphs' keys: absent when empty, so native graphs keep their bytes.
  if (!graph.default_wrap_classes.empty()) j["default_wrap_classes"] = graph.default_wrap_classes;
  if (!graph.buffers.empty()) j["buffers"] = index_list(graph.buffers);
  if (!graph.exporter.empty()) j["exporter"] = json::parse(graph.exporter);
  return j;
}

// ---- reading ----------------------------------------------------------------

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("graph JSON " + (path.empty() ? std::string("(root)") : path) + ": " + what);
}

// RFC 6901 escaping of one reference token.
std::string escape_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& path, const std::string& key) {
  return path + "/" + escape_token(key);
}
std::string child(const std::string& path, size_t index) {
  return path + "/" + std::to_string(index);
}

const char* type_name(const json& j) {
  return j.type_name();
}

// A value for an error message, cut short when long.
std::string short_dump(const json& j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// A JSON object whose keys must come from a fixed set.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, std::initializer_list<const char*> allowed)
      : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_, std::string("expected an object, got ") + type_name(j_));
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      bool known = false;
      for (const char* key : allowed) known = known || it.key() == key;
      if (!known) {
        std::string keys;
        for (const char* key : allowed) keys += (keys.empty() ? "" : ", ") + std::string(key);
        fail(child(path_, it.key()), "unknown key (expected one of: " + keys + ")");
      }
    }
  }

  // nullptr when absent and optional.
  const json* find(const char* key, bool required = true) const {
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) fail(child(path_, key), "missing required key");
      return nullptr;
    }
    return &*it;
  }
  const json& at(const char* key) const { return *find(key, true); }
  std::string path(const char* key) const { return child(path_, key); }

 private:
  const json& j_;
  std::string path_;
};

std::string read_string(const json& j, const std::string& path) {
  if (!j.is_string()) fail(path, std::string("expected a string, got ") + type_name(j));
  return j.get<std::string>();
}

bool read_bool(const json& j, const std::string& path) {
  if (!j.is_boolean()) fail(path, std::string("expected true or false, got ") + type_name(j));
  return j.get<bool>();
}

int64_t read_int(const json& j, const std::string& path, int64_t min_value, int64_t max_value) {
  int64_t v = 0;
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, "integer " + std::to_string(u) + " does not fit in int64");
    v = static_cast<int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.get<int64_t>();
  } else {
    fail(path, std::string("expected an integer, got ") + type_name(j));
  }
  if (v < min_value || v > max_value)
    fail(path, "value " + std::to_string(v) + " outside [" + std::to_string(min_value) + ", " +
                   std::to_string(max_value) + "]");
  return v;
}

// An index into an array of `size` elements (or -1 when allowed).
int read_index(const json& j, const std::string& path, size_t size, const char* what,
               bool allow_none = false) {
  std::string shown;
  bool ok = false;
  int64_t v = -1;
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    shown = std::to_string(u);
    ok = u < size;
    if (ok) v = static_cast<int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.get<int64_t>();
    shown = std::to_string(v);
    ok = (allow_none && v == -1) || (v >= 0 && static_cast<uint64_t>(v) < size);
  } else {
    fail(path, std::string("expected a ") + what + " index (integer), got " + type_name(j));
  }
  if (!ok)
    fail(path, std::string(what) + " index " + shown + " out of range (" + std::to_string(size) +
                   " " + what + "s" + (allow_none ? "; -1 for none" : "") + ")");
  return static_cast<int>(v);
}

const json& read_array(const json& j, const std::string& path) {
  if (!j.is_array()) fail(path, std::string("expected an array, got ") + type_name(j));
  return j;
}

std::vector<int> read_index_list(const json& j, const std::string& path, size_t size,
                                 const char* what) {
  read_array(j, path);
  std::vector<int> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) out.push_back(read_index(j[i], child(path, i), size, what));
  return out;
}

Poly read_poly(const json& j, const std::string& path) {
  if (!j.is_string())
    fail(path, "expected a string like \"2*B*T*768\", got " + std::string(type_name(j)));
  try {
    return Poly::parse(j.get<std::string>());
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
}

DType read_dtype(const json& j, const std::string& path) {
  const std::string name = read_string(j, path);
  try {
    return parse_dtype(name, "dtype");
  } catch (const Error& e) {
    fail(path, e.what());
  }
}

constexpr int64_t kMaxIndexCount = std::numeric_limits<int>::max();

// The "attrs" object of an op of `type` at `path`: only the attributes that
// type may carry (see for_each_attr), each of its member's JSON type.
OpAttrs read_attrs(const json& j, const std::string& path, OpType type) {
  if (!j.is_object()) fail(path, std::string("expected an object, got ") + type_name(j));
  OpAttrs a;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key_path = child(path, it.key());
    const json& value = *it;
    bool known = false;
    for_each_attr(type, a, [&](const char* name, auto& member, AttrForm form) {
      if (known || it.key() != name) return;
      known = true;
      using T = std::decay_t<decltype(*member)>;
      if constexpr (std::is_same_v<T, int64_t>) {
        member = read_int(value, key_path, std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max());
      } else if constexpr (std::is_same_v<T, double>) {
        if (!value.is_number())
          fail(key_path, std::string("expected a number, got ") + type_name(value));
        member = value.get<double>();
      } else if constexpr (std::is_same_v<T, bool>) {
        member = read_bool(value, key_path);
      } else {
        static_assert(std::is_same_v<T, std::string>);
        member = form == AttrForm::json_text
                     ? value.dump(-1, ' ', false, json::error_handler_t::replace)
                     : read_string(value, key_path);
      }
    });
    if (!known) {
      std::string keys;
      for_each_attr(type, a, [&](const char* name, auto&, AttrForm) {
        keys += (keys.empty() ? "" : ", ") + std::string(name);
      });
      fail(key_path,
           std::string("unknown key for a ") + op_type_name(type) + " op" +
               (keys.empty() ? " (it takes no attributes)" : " (expected one of: " + keys + ")"));
    }
  }
  if (type == OpType::aten) {
    // Both required: the overload names the op in refusals and in per-op
    // checkpointing, the kind chooses its cost model.
    if (!a.aten) fail(child(path, "aten"), "missing required key for an aten op");
    if (a.aten->empty())
      fail(child(path, "aten"), "empty (expected an overload like aten.mm.default)");
    if (!a.kind) fail(child(path, "kind"), "missing required key for an aten op");
    bool known = false;
    for (AtenKind k : {AtenKind::gemm, AtenKind::attention, AtenKind::memory})
      known = known || *a.kind == aten_kind_name(k);
    if (!known)
      fail(child(path, "kind"),
           "unknown kind '" + a.kind->substr(0, 100) + "' (one of gemm, attention, memory)");
  }
  return a;
}

}  // namespace

Graph graph_from_json(const json& j) {
  if (!j.is_object()) fail("", std::string("expected an object, got ") + type_name(j));
  // Format and version first: a future version may have other keys.
  auto format = j.find("format");
  if (format == j.end()) fail("/format", std::string("missing; expected \"") + kGraphFormat + "\"");
  if (!format->is_string() || format->get<std::string>() != kGraphFormat)
    fail("/format", std::string("expected \"") + kGraphFormat + "\", got " + short_dump(*format));
  auto version = j.find("version");
  if (version == j.end()) fail("/version", "missing required key");
  if (!version->is_number_integer() || version->get<int64_t>() != Graph::kSchemaVersion)
    fail("/version", "unsupported version " + short_dump(*version) + " (this build reads version " +
                         std::to_string(Graph::kSchemaVersion) + ")");

  ObjectReader top(j, "",
                   {"format", "version", "model_name", "family", "max_seq_len", "vocab_size",
                    "modules", "params", "tensors", "ops", "inputs", "loss", "default_wrap_classes",
                    "buffers", "exporter"});
  Graph g;
  g.model_name = read_string(top.at("model_name"), top.path("model_name"));
  g.family = read_string(top.at("family"), top.path("family"));
  g.max_seq_len = read_int(top.at("max_seq_len"), top.path("max_seq_len"), 1,
                           std::numeric_limits<int64_t>::max());
  g.vocab_size = read_int(top.at("vocab_size"), top.path("vocab_size"), 0,
                          std::numeric_limits<int64_t>::max());

  // Array sizes first, so that indices can be checked against them in any order.
  const json& modules = read_array(top.at("modules"), top.path("modules"));
  const json& params = read_array(top.at("params"), top.path("params"));
  const json& tensors = read_array(top.at("tensors"), top.path("tensors"));
  const json& ops = read_array(top.at("ops"), top.path("ops"));
  for (const char* key : {"modules", "params", "tensors", "ops"})
    if (static_cast<int64_t>(top.at(key).size()) > kMaxIndexCount)
      fail(top.path(key), "too many elements");

  for (size_t i = 0; i < modules.size(); ++i) {
    const std::string path = child("/modules", i);
    ObjectReader r(modules[i], path, {"name", "class_name", "parent", "is_container"});
    Module m;
    m.name = read_string(r.at("name"), r.path("name"));
    m.class_name = read_string(r.at("class_name"), r.path("class_name"));
    m.parent = read_index(r.at("parent"), r.path("parent"), modules.size(), "module", true);
    m.is_container = read_bool(r.at("is_container"), r.path("is_container"));
    g.modules.push_back(std::move(m));
  }
  // Children are derived: the modules naming a module as parent, in storage order.
  for (size_t i = 0; i < g.modules.size(); ++i) {
    const int p = g.modules[i].parent;
    if (p >= 0 && static_cast<size_t>(p) != i) g.modules[p].children.push_back(static_cast<int>(i));
  }

  for (size_t i = 0; i < params.size(); ++i) {
    const std::string path = child("/params", i);
    ObjectReader r(params[i], path, {"name", "shape", "dtype", "module"});
    Param p;
    p.name = read_string(r.at("name"), r.path("name"));
    const json& shape = read_array(r.at("shape"), r.path("shape"));
    if (shape.empty()) fail(r.path("shape"), "expected at least one dimension");
    for (size_t d = 0; d < shape.size(); ++d)
      p.shape.push_back(
          read_int(shape[d], child(r.path("shape"), d), 1, std::numeric_limits<int64_t>::max()));
    int64_t numel = 1;
    for (int64_t d : p.shape)
      if (__builtin_mul_overflow(numel, d, &numel))
        fail(r.path("shape"), "element count overflows int64");
    p.dtype = read_dtype(r.at("dtype"), r.path("dtype"));
    p.module = read_index(r.at("module"), r.path("module"), g.modules.size(), "module");
    g.params.push_back(std::move(p));
  }

  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string path = child("/tensors", i);
    ObjectReader r(tensors[i], path, {"name", "shape", "dtype", "precision", "requires_grad"});
    Tensor t;
    t.name = read_string(r.at("name"), r.path("name"));
    const json& shape = read_array(r.at("shape"), r.path("shape"));
    for (size_t d = 0; d < shape.size(); ++d)
      t.shape.push_back(read_poly(shape[d], child(r.path("shape"), d)));
    t.dtype = read_dtype(r.at("dtype"), r.path("dtype"));
    if (const json* v = r.find("precision", false)) {
      try {
        t.precision = parse_precision(read_string(*v, r.path("precision")), r.path("precision"));
      } catch (const Error& e) {
        fail(r.path("precision"), e.what());
      }
    }
    if (const json* v = r.find("requires_grad", false))
      t.requires_grad = read_bool(*v, r.path("requires_grad"));
    g.tensors.push_back(std::move(t));
  }

  const size_t n_tensors = g.tensors.size();
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string path = child("/ops", i);
    ObjectReader r(
        ops[i], path,
        {"name", "type", "module", "inputs", "outputs", "params", "saved", "fwd_flops", "bwd_flops",
         "fwd_bytes", "bwd_bytes", "workspace_bytes", "fwd_temps", "bwd_temps", "attrs"});
    Op op;
    op.name = read_string(r.at("name"), r.path("name"));
    const std::string type = read_string(r.at("type"), r.path("type"));
    try {
      op.type = parse_op_type(type, "op '" + op.name + "'");
    } catch (const Error& e) {
      fail(r.path("type"), e.what());
    }
    op.module = read_index(r.at("module"), r.path("module"), g.modules.size(), "module");
    op.inputs = read_index_list(r.at("inputs"), r.path("inputs"), n_tensors, "tensor");
    op.outputs = read_index_list(r.at("outputs"), r.path("outputs"), n_tensors, "tensor");
    if (const json* v = r.find("params", false))
      op.params = read_index_list(*v, r.path("params"), g.params.size(), "param");
    if (const json* v = r.find("saved", false))
      op.saved = read_index_list(*v, r.path("saved"), n_tensors, "tensor");
    op.fwd_flops = read_poly(r.at("fwd_flops"), r.path("fwd_flops"));
    op.bwd_flops = read_poly(r.at("bwd_flops"), r.path("bwd_flops"));
    op.fwd_bytes = read_poly(r.at("fwd_bytes"), r.path("fwd_bytes"));
    op.bwd_bytes = read_poly(r.at("bwd_bytes"), r.path("bwd_bytes"));
    if (const json* v = r.find("workspace_bytes", false))
      op.workspace_bytes = read_poly(*v, r.path("workspace_bytes"));
    for (const auto& [key, temps] :
         {std::pair<const char*, std::vector<Temp>*>{"fwd_temps", &op.fwd_temps},
          {"bwd_temps", &op.bwd_temps}}) {
      const json* v = r.find(key, false);
      if (!v) continue;
      const json& list = read_array(*v, r.path(key));
      for (size_t k = 0; k < list.size(); ++k) {
        ObjectReader tr(list[k], child(r.path(key), k), {"numel", "precision"});
        Temp t;
        t.numel = read_poly(tr.at("numel"), tr.path("numel"));
        try {
          t.precision = parse_precision(read_string(tr.at("precision"), tr.path("precision")),
                                        tr.path("precision"));
        } catch (const Error& e) {
          fail(tr.path("precision"), e.what());
        }
        temps->push_back(std::move(t));
      }
    }
    if (const json* v = r.find("attrs", op.type == OpType::aten))
      op.attrs = read_attrs(*v, r.path("attrs"), op.type);
    g.ops.push_back(std::move(op));
  }

  g.inputs = read_index_list(top.at("inputs"), top.path("inputs"), n_tensors, "tensor");
  g.loss = read_index(top.at("loss"), top.path("loss"), n_tensors, "tensor");
  if (const json* v = top.find("default_wrap_classes", false)) {
    const std::string path = top.path("default_wrap_classes");
    read_array(*v, path);
    if (v->empty()) fail(path, "empty (leave the key out when there are no default classes)");
    for (size_t i = 0; i < v->size(); ++i) {
      std::string c = read_string((*v)[i], child(path, i));
      if (c.empty()) fail(child(path, i), "empty class name");
      g.default_wrap_classes.push_back(std::move(c));
    }
  }
  if (const json* v = top.find("buffers", false))
    g.buffers = read_index_list(*v, top.path("buffers"), n_tensors, "tensor");
  if (const json* v = top.find("exporter", false)) {
    // Provenance only: any object, kept as compact text and written back.
    if (!v->is_object())
      fail(top.path("exporter"), std::string("expected an object, got ") + type_name(*v));
    g.exporter = v->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  g.validate();
  return g;
}

Graph load_graph_file(const std::string& path) {
  const json j = parse_json_input(read_input_file(path, "graph file", kMaxModelFileBytes), path);
  try {
    return graph_from_json(j);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void save_graph_file(const Graph& graph, const std::string& path) {
  io::write_output_file(
      path, graph_to_json(graph).dump(1, ' ', false, json::error_handler_t::replace) + "\n");
}

}  // namespace shardscope::plan
