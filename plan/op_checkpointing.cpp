#include "plan/op_checkpointing.h"

#include <algorithm>

#include "plan/error.h"
#include "plan/policy.h"
#include "plan/units.h"

namespace shardscope::plan {

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw Error("policy: " + key + ": " + what);
}

constexpr const char* kForms =
    "{\"save_ops\": [...], \"save_every_other_matmul\": b} or {\"preset\": \"torchtitan\"}, "
    "each with optional every and offset";

// Every name save_ops accepts: the graph op types and the two linear kernels.
std::vector<std::string> known_names() {
  std::vector<std::string> names = {"mm", "addmm"};
  for (OpType t : {OpType::embedding, OpType::linear, OpType::layernorm, OpType::rmsnorm,
                   OpType::attention, OpType::gelu, OpType::swiglu, OpType::residual,
                   OpType::cross_entropy, OpType::rope, OpType::relu, OpType::moe_router,
                   OpType::moe_dispatch, OpType::moe_combine, OpType::sigmoid_gate})
    names.push_back(op_type_name(t));
  return names;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// An aten operator name: "aten.<op>" or "aten.<op>.<overload>".
bool is_aten_name(const std::string& s) {
  return s.size() > 5 && s.compare(0, 5, "aten.") == 0;
}

// "aten.mm.default" -> "aten.mm" (the overload packet).
std::string aten_packet(const std::string& overload) {
  const size_t dot = overload.find('.', 5);
  return dot == std::string::npos ? overload : overload.substr(0, dot);
}

// The aten matrix multiply an op dispatches: "mm", "addmm" or "" (none).
std::string matmul_of(const Op& op) {
  if (op.type == OpType::linear) return op.attrs.bias.value_or(false) ? "addmm" : "mm";
  if (op.type == OpType::aten && op.attrs.aten) {
    const std::string packet = aten_packet(*op.attrs.aten);
    if (packet == "aten.mm") return "mm";
    if (packet == "aten.addmm") return "addmm";
  }
  return "";
}

// Whether save_ops entry `name` names op `op`. Native ops: their type, or
// (linear) the kernel it dispatches. Aten ops (exported graphs): the overload
// ("aten.mm.default") or its packet ("aten.mm"); "mm" / "addmm" / "linear"
// as for linear ops; "attention" names every op of kind attention (the SDPA
// kernels torchtitan's list names).
bool names_op(const std::string& name, const Op& op) {
  if (op.type != OpType::aten)
    return name == op_type_name(op.type) || (op.type == OpType::linear && (name == matmul_of(op)));
  const std::string& overload = *op.attrs.aten;
  if (name == overload || name == aten_packet(overload)) return true;
  const std::string mm = matmul_of(op);
  if (!mm.empty() && (name == mm || name == "linear")) return true;
  return name == "attention" && op.attrs.kind == aten_kind_name(AtenKind::attention);
}

}  // namespace

OpCheckpointing op_checkpointing_preset(const std::string& name, const std::string& key) {
  if (name != "torchtitan")
    fail(key, "unknown preset '" + name.substr(0, 100) + "' (known: torchtitan)");
  // torchtitan v0.2.2 _op_sac_save_list + _custom_policy (see the header).
  OpCheckpointing c;
  c.preset = name;
  c.save_ops = {"mm", "attention"};
  c.save_every_other_matmul = true;
  return c;
}

void read_op_checkpointing(const json& v, const std::string& key, Policy& p) {
  const bool preset = v.contains("preset"), ops = v.contains("save_ops");
  if (preset == ops)
    fail(key, std::string(preset ? "preset and save_ops exclude each other" : "expected ") +
                  (preset ? "" : kForms));
  for (auto f = v.begin(); f != v.end(); ++f) {
    const std::string& n = f.key();
    const bool ok = n == "every" || n == "offset" || n == "preset" || n == "save_ops" ||
                    (n == "save_every_other_matmul" && !preset);
    if (!ok)
      fail(key + "." + n, preset ? "not a key of the preset form (it takes every and offset)"
                                 : "unknown key (the per-op form takes save_ops, "
                                   "save_every_other_matmul, every and offset)");
  }
  OpCheckpointing c;
  if (preset) {
    const json& name = v.at("preset");
    if (!name.is_string()) fail(key + ".preset", "expected a string, got " + name.dump());
    c = op_checkpointing_preset(name.get<std::string>(), key + ".preset");
  } else {
    const json& list = v.at("save_ops");
    const std::string lk = key + ".save_ops";
    if (!list.is_array())
      fail(lk, "expected an array of op names, got " + list.dump().substr(0, 100));
    if (list.empty()) fail(lk, "is empty: saving nothing is \"full\" (recompute the whole block)");
    const std::vector<std::string> names = known_names();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string ik = lk + "[" + std::to_string(i) + "]";
      if (!list[i].is_string()) fail(ik, "expected a string, got " + list[i].dump());
      const std::string s = list[i].get<std::string>();
      if (!has(names, s) && !is_aten_name(s)) {
        std::string known;
        for (const std::string& k : names) known += (known.empty() ? "" : ", ") + k;
        fail(ik, "unknown op '" + s.substr(0, 100) + "' (known: " + known +
                     ", or an aten operator of an exported graph: aten.<op>[.<overload>])");
      }
      if (has(c.save_ops, s)) fail(ik, "'" + s + "' is listed twice");
      c.save_ops.push_back(s);
    }
    if (has(c.save_ops, "linear") && (has(c.save_ops, "mm") || has(c.save_ops, "addmm")))
      fail(lk, "\"linear\" already covers \"mm\" and \"addmm\"");
    if (v.contains("save_every_other_matmul")) {
      const json& b = v.at("save_every_other_matmul");
      if (!b.is_boolean())
        fail(key + ".save_every_other_matmul", "expected true or false, got " + b.dump());
      c.save_every_other_matmul = b.get<bool>();
      if (c.save_every_other_matmul && !has(c.save_ops, "mm") && !has(c.save_ops, "linear"))
        fail(key + ".save_every_other_matmul",
             "needs \"mm\" or \"linear\" in save_ops (it recomputes every second mm of them)");
    }
  }
  int64_t every = 1, offset = 0;
  auto get_count = [&](const char* name, int64_t lo) {
    const json& x = v.at(name);
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > (1ull << 62)))
      fail(key + "." + name, "expected an integer, got " + x.dump());
    const int64_t n = x.get<int64_t>();
    if (n < lo) fail(key + "." + name, "must be >= " + std::to_string(lo) + ", got " + x.dump());
    return n;
  };
  if (v.contains("every")) every = get_count("every", 1);
  if (v.contains("offset")) offset = get_count("offset", 0);
  if (offset >= every)
    fail(key + ".offset", std::to_string(offset) + " must be below every (" +
                              std::to_string(every) +
                              "): blocks j with j % every == offset are checkpointed");
  p.activation_checkpointing = CheckpointMode::ops;
  p.checkpoint_every = every;
  p.checkpoint_offset = offset;
  p.op_checkpointing = std::move(c);
}

json op_checkpointing_to_json(const Policy& p) {
  const OpCheckpointing& c = p.op_checkpointing;
  json j;
  if (!c.preset.empty()) {
    j["preset"] = c.preset;
  } else {
    j["save_ops"] = c.save_ops;
    j["save_every_other_matmul"] = c.save_every_other_matmul;
  }
  if (p.checkpoint_every != 1) j["every"] = p.checkpoint_every;
  if (p.checkpoint_offset != 0) j["offset"] = p.checkpoint_offset;
  return j;
}

std::vector<bool> cached_ops(const Policy& p, const Graph& g, const UnitPlan& up,
                             const std::vector<bool>& checkpointed) {
  std::vector<bool> cached(g.ops.size(), false);
  if (p.activation_checkpointing != CheckpointMode::ops) return cached;
  const OpCheckpointing& c = p.op_checkpointing;
  for (size_t u = 0; u < up.units.size(); ++u) {
    if (!checkpointed[u] || up.units[u].first_op < 0) continue;
    // One count per block wrapper and forward (torchtitan: a fresh meta per
    // checkpointed call).
    int64_t mm_count = 0;
    for (int o = up.units[u].first_op; o <= up.units[u].last_op; ++o) {
      const Op& op = g.ops[static_cast<size_t>(o)];
      bool save = false;
      for (const std::string& name : c.save_ops) save = save || names_op(name, op);
      // torchtitan counts aten.mm only (addmm is not in its list).
      if (matmul_of(op) == "mm" && ++mm_count % 2 == 0 && c.save_every_other_matmul) save = false;
      cached[static_cast<size_t>(o)] = save;
    }
  }
  // An explicit save_ops entry that names no op of any checkpointed block is
  // a mistake (a preset applies to whatever the model has).
  if (c.preset.empty())
    for (size_t i = 0; i < c.save_ops.size(); ++i) {
      bool found = false;
      for (size_t u = 0; u < up.units.size() && !found; ++u) {
        if (!checkpointed[u] || up.units[u].first_op < 0) continue;
        for (int o = up.units[u].first_op; o <= up.units[u].last_op && !found; ++o) {
          found = names_op(c.save_ops[i], g.ops[static_cast<size_t>(o)]);
        }
      }
      if (!found)
        fail("activation_checkpointing.save_ops[" + std::to_string(i) + "]",
             "'" + c.save_ops[i] + "' matches no op of the checkpointed blocks of " +
                 g.model_name.substr(0, 100));
    }
  return cached;
}

}  // namespace shardscope::plan
