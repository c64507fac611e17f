#include "plan/units.h"

#include <algorithm>
#include <set>

#include "plan/error.h"
#include "plan/overrides.h"

namespace shardscope::plan {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t fsdp2_shard_numel(const std::vector<int64_t>& shape, int64_t n) {
  if (shape.empty()) return 1;  // a scalar is replicated as one element per rank
  int64_t rest = 1;
  for (size_t i = 1; i < shape.size(); ++i) rest *= shape[i];
  return ceil_div(shape[0], n) * rest;
}

int64_t UnitPlan::total_padded_numel() const {
  int64_t s = 0;
  for (const Unit& u : units) s += u.padded_numel;
  return s;
}

int64_t UnitPlan::total_shard_numel() const {
  int64_t s = 0;
  for (const Unit& u : units) s += u.shard_numel;
  return s;
}

namespace {

// Lowest common ancestor of two modules (parents have smaller indices).
int lca(const Graph& g, int a, int b) {
  while (a != b) {
    if (a > b)
      a = g.modules[a].parent;
    else
      b = g.modules[b].parent;
  }
  return a;
}

// The module classes of a graph, sorted, for error messages.
std::string class_list(const Graph& g) {
  std::set<std::string> classes;
  for (const Module& m : g.modules) classes.insert(m.class_name);
  std::string list;
  for (const std::string& c : classes) list += (list.empty() ? "" : ", ") + c;
  return list;
}

}  // namespace

std::string units_key(const Policy& policy, const World& world) {
  const nlohmann::json doc = policy_to_json(policy);
  return nlohmann::json{{"flavor", doc.at("flavor")},
                        {"wrap", doc.at("wrap")},
                        {"world", {world.world_size, world.shard_group_size, world.replicas}}}
      .dump();
}

UnitPlan build_units(const Graph& g, const Policy& policy, const World& world) {
  const size_t n_modules = g.modules.size();
  UnitPlan plan;
  plan.world = world;

  // Owner of each parameter: LCA of its declaring module and every user op's module.
  std::vector<int> owner(g.params.size());
  for (size_t p = 0; p < g.params.size(); ++p) owner[p] = g.params[p].module;
  for (const Op& op : g.ops)
    for (int p : op.params) owner[p] = lca(g, owner[p], op.module);

  std::vector<std::vector<int>> owned(n_modules);
  for (size_t p = 0; p < g.params.size(); ++p) owned[owner[p]].push_back(static_cast<int>(p));

  // An exported graph is traced in one compute dtype: its upcast copies
  // (Precision::fp32_if_lowp) are priced against each op's own unit dtype, not
  // the dtype the input arrives in from another unit, so a unit whose
  // param_dtype differs from its neighbours' would be mispriced (an fp32 root
  // over bf16 blocks: 13% low against PyTorch). Refused, not approximated.
  if (g.is_exported() && has_precision_overrides(policy))
    throw Error("policy: overrides: a per-unit mixed_precision on exported graph " + g.model_name +
                " is not modelled (the graph was traced in one compute dtype; its casts "
                "between units of different dtypes are not in it): export and simulate one "
                "dtype, or use a built-in model (docs/export.md)");

  // Which modules the policy wraps. An exported graph under wrap type none
  // (the default: the policy does not say) wraps its default_wrap_classes,
  // as the class policy would.
  const bool exported_default = g.is_exported() && policy.wrap.type == WrapType::none;
  if (exported_default && g.default_wrap_classes.empty())
    throw Error("policy: wrap.classes: exported graph " + g.model_name +
                " has no default_wrap_classes and the policy names no wrap classes: set "
                "wrap.type=class and wrap.classes (its classes: " +
                class_list(g) + ")");
  const WrapType wrap_type = exported_default ? WrapType::class_name : policy.wrap.type;
  const std::vector<std::string>& wrap_classes =
      exported_default ? g.default_wrap_classes : policy.wrap.classes;
  std::vector<bool> wrap_by_name(n_modules, false);
  if (wrap_type == WrapType::class_name) {
    std::set<std::string> matched;
    for (size_t m = 0; m < n_modules; ++m) {
      for (const std::string& c : wrap_classes) {
        if (g.modules[m].class_name == c) {
          wrap_by_name[m] = true;
          matched.insert(c);
        }
      }
    }
    const std::string key = exported_default ? "default_wrap_classes" : "wrap.classes";
    if (matched.empty())
      throw Error(std::string(exported_default ? "graph: " : "policy: ") + key + ": no module of " +
                  g.model_name + " has any of these classes (its classes: " + class_list(g) + ")");
    for (const std::string& c : wrap_classes)
      if (!matched.count(c)) plan.warnings.push_back(key + ": class '" + c + "' matches no module");
  } else if (policy.wrap.type == WrapType::modules) {
    for (const std::string& path : policy.wrap.modules) {
      int m = g.find_module(path);
      if (m < 0) throw Error("policy: wrap.modules: no module named '" + path + "'");
      wrap_by_name[m] = true;
    }
  }

  // Post-order: children before parents. Modules are stored in pre-order, so
  // visiting indices in reverse visits every child before its parent.
  std::vector<std::vector<int>> remainder(n_modules);
  std::vector<bool> wrapped(n_modules, false);
  for (size_t i = n_modules; i-- > 0;) {
    std::vector<int>& rem = remainder[i];
    rem = owned[i];
    for (int c : g.modules[i].children) {
      if (wrapped[c]) continue;
      rem.insert(rem.end(), remainder[c].begin(), remainder[c].end());
      remainder[c].clear();
    }
    int64_t numel = 0;
    for (int p : rem) numel += g.params[p].numel();
    bool wrap = false;
    if (i == 0) {
      wrap = true;  // the root is always a unit
    } else if (wrap_type == WrapType::size) {
      wrap = !g.modules[i].is_container && numel >= policy.wrap.min_num_params;
    } else {
      wrap = wrap_by_name[i];
    }
    wrapped[i] = wrap;
  }

  // Units in forward (pre-)order of their modules.
  std::vector<int> unit_of_module(n_modules, -1);
  const int64_t n = world.shard_group_size;
  for (size_t m = 0; m < n_modules; ++m) {
    if (!wrapped[m]) continue;
    Unit u;
    u.module = static_cast<int>(m);
    u.is_root = m == 0;
    u.name = m == 0 ? "<root>" : g.modules[m].name;
    u.params = remainder[m];
    std::sort(u.params.begin(), u.params.end());
    for (int a = g.modules[m].parent; a >= 0; a = g.modules[a].parent) {
      if (unit_of_module[a] >= 0) {
        u.parent = unit_of_module[a];
        break;
      }
    }
    int64_t shard = 0;
    for (int p : u.params) {
      u.numel += g.params[p].numel();
      if (policy.flavor == Flavor::fsdp2) shard += fsdp2_shard_numel(g.params[p].shape, n);
    }
    u.shard_numel = policy.flavor == Flavor::fsdp1 ? ceil_div(u.numel, n) : shard;
    u.padded_numel = n * u.shard_numel;
    unit_of_module[m] = static_cast<int>(plan.units.size());
    plan.units.push_back(std::move(u));
  }

  plan.param_unit.assign(g.params.size(), -1);
  for (size_t ui = 0; ui < plan.units.size(); ++ui)
    for (int p : plan.units[ui].params) plan.param_unit[p] = static_cast<int>(ui);

  // Modules each unit covers, and the innermost unit of each op.
  std::vector<int> module_unit(n_modules, 0);
  for (size_t m = 0; m < n_modules; ++m) {
    int a = static_cast<int>(m);
    while (unit_of_module[a] < 0) a = g.modules[a].parent;
    module_unit[m] = unit_of_module[a];
    plan.units[module_unit[m]].modules.push_back(static_cast<int>(m));
  }
  plan.op_unit.resize(g.ops.size());
  for (size_t o = 0; o < g.ops.size(); ++o) {
    plan.op_unit[o] = module_unit[g.ops[o].module];
    // Every unit whose module encloses the op has the op in its forward span:
    // the units on the op's module's path to the root (O(depth) per op; a scan
    // of all units per op was quadratic with a unit per expert or layer).
    for (int a = g.ops[o].module; a >= 0; a = g.modules[a].parent) {
      if (unit_of_module[a] < 0) continue;
      Unit& u = plan.units[static_cast<size_t>(unit_of_module[a])];
      if (u.first_op < 0) u.first_op = static_cast<int>(o);
      u.last_op = static_cast<int>(o);
    }
  }
  return plan;
}

}  // namespace shardscope::plan
