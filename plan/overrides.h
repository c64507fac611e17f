// Per-unit policy settings: the policy's `overrides` (plan/policy.h,
// UnitOverride) resolved against a model's units. Everything that differs
// per FSDP unit (per fully_shard call) is read from here by the schedule
// builder and the closed forms; the rest of the policy is global.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/units.h"

namespace shardscope::plan {

struct UnitSettings {
  // Backward all-gather degree (FSDP_SEMANTICS.md section 4): N when
  // resharded after forward, 1 when kept unsharded, k for an integer. The
  // root keeps its parameters (1) unless an override sets its
  // reshard_after_forward (PyTorch 2.9 honours an explicit value on the root:
  // _fsdp_state.py _lazy_init clears post_forward_mesh_info only when
  // _auto_reshard_after_forward).
  int64_t reshard_k = 1;
  DType param_dtype = DType::f32;   // all-gathered parameters and the unit's compute dtype
  DType reduce_dtype = DType::f32;  // gradient reduction
  int param_bytes() const { return dtype_bytes(param_dtype); }
  int reduce_bytes() const { return dtype_bytes(reduce_dtype); }
};

// One entry per unit (indexed like UnitPlan::units): the policy's values,
// then each override in list order applied to the units it names (a later
// override wins for the keys it sets). Throws plan::Error naming
// overrides[i].units when an override names no unit (a regex that matches
// none, a name that is no unit's), listing a few unit names; and
// overrides[i].reshard_after_forward when k does not divide the shard group
// size. (An invalid regex is refused when the policy is read.) Matching is
// linear in each name (plan/unit_pattern.h).
std::vector<UnitSettings> unit_settings(const Policy& policy, const UnitPlan& units);

// True when some unit's param or reduce dtype differs from the policy's.
bool has_precision_overrides(const Policy& policy);

}  // namespace shardscope::plan
