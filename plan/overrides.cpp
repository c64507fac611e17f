#include "plan/overrides.h"

#include <string>

#include "plan/error.h"

namespace shardscope::plan {

namespace {

// "<root>, layers.0, layers.1, ... (30 units)": what a user can name.
std::string some_unit_names(const UnitPlan& up) {
  constexpr size_t kShown = 6;
  std::string list;
  for (size_t i = 0; i < up.units.size() && i < kShown; ++i)
    list += (i ? ", " : "") + up.units[i].name;
  if (up.units.size() > kShown) list += ", ...";
  return list + " (" + std::to_string(up.units.size()) + " units)";
}

}  // namespace

std::vector<UnitSettings> unit_settings(const Policy& policy, const UnitPlan& up) {
  const int64_t n = up.world.shard_group_size;
  std::vector<UnitSettings> out(up.units.size());
  const int64_t k = reshard_degree(policy, up.world);
  for (size_t u = 0; u < up.units.size(); ++u) {
    out[u].reshard_k = up.units[u].is_root ? 1 : k;
    out[u].param_dtype = policy.mixed_precision.param_dtype;
    out[u].reduce_dtype = policy.mixed_precision.reduce_dtype;
  }
  for (size_t i = 0; i < policy.overrides.size(); ++i) {
    const UnitOverride& o = policy.overrides[i];
    const std::string at = "policy: overrides[" + std::to_string(i) + "]";
    std::vector<bool> hit(up.units.size(), false);
    if (o.pattern) {
      bool any = false;
      for (size_t u = 0; u < up.units.size(); ++u) {
        hit[u] = o.pattern->matches(up.units[u].name);
        any = any || hit[u];
      }
      if (!any)
        throw Error(
            at + ".units: the regex " + o.units_text() +
            " matches no unit (a full match against the unit names: " + some_unit_names(up) + ")");
    } else {
      for (const std::string& name : o.names) {
        bool found = false;
        for (size_t u = 0; u < up.units.size(); ++u)
          if (up.units[u].name == name) hit[u] = found = true;
        if (!found)
          throw Error(at + ".units: '" + name.substr(0, 100) +
                      "' is not a unit (units: " + some_unit_names(up) + ")");
      }
    }
    for (size_t u = 0; u < up.units.size(); ++u) {
      if (!hit[u]) continue;
      if (o.reshard_after_forward) {
        const ReshardAfterForward& r = *o.reshard_after_forward;
        const int64_t ku = r.is_int ? r.k : (r.flag ? n : 1);
        if (ku < 1 || n % ku != 0)
          throw Error(at + ".reshard_after_forward: " + std::to_string(ku) +
                      " does not divide the shard group size " + std::to_string(n));
        out[u].reshard_k = ku;
      }
      if (o.mixed_precision) {
        out[u].param_dtype = o.mixed_precision->param_dtype;
        out[u].reduce_dtype = o.mixed_precision->reduce_dtype;
      }
    }
  }
  // One schedule has one set of reshard groups: every unit that keeps a 1/k
  // slice (1 < k < N) uses the same k.
  int64_t partial = 0;
  for (size_t u = 0; u < up.units.size(); ++u) {
    const int64_t ku = out[u].reshard_k;
    if (ku <= 1 || ku >= n || up.units[u].numel == 0) continue;
    if (partial != 0 && ku != partial)
      throw Error("policy: overrides: reshard_after_forward degrees " + std::to_string(partial) +
                  " and " + std::to_string(ku) + " in one policy (unit " +
                  up.units[u].name.substr(0, 100) +
                  "); a schedule keeps one partial degree, give every unit resharding to k ranks "
                  "the same k");
    partial = ku;
  }
  return out;
}

bool has_precision_overrides(const Policy& policy) {
  for (const UnitOverride& o : policy.overrides)
    if (o.mixed_precision &&
        (o.mixed_precision->param_dtype != policy.mixed_precision.param_dtype ||
         o.mixed_precision->reduce_dtype != policy.mixed_precision.reduce_dtype))
      return true;
  return false;
}

}  // namespace shardscope::plan
