// Communication volume per rank: measured from a schedule, and the closed
// forms of FSDP_SEMANTICS.md section 9 computed from the units alone.
#include "plan/overrides.h"
#include "plan/schedule.h"

namespace shardscope::plan {

double collective_wire_bytes(const ScheduleOp& op, const Schedule& s) {
  if (!is_collective(op.kind) || op.group < 0) return 0.0;
  const double n = static_cast<double>(s.groups[op.group].ranks.size());
  const double S = static_cast<double>(op.bytes);
  if (op.kind == OpKind::all_reduce) return 2.0 * S * (n - 1.0) / n;
  return S * (n - 1.0) / n;
}

CommBytes schedule_comm_bytes(const Schedule& s) {
  CommBytes c;
  for (const ScheduleOp& op : s.ops) {
    const double w = collective_wire_bytes(op, s);
    if (op.kind == OpKind::all_gather)
      c.all_gather += w;
    else if (op.kind == OpKind::reduce_scatter)
      c.reduce_scatter += w;
    else if (op.kind == OpKind::all_reduce)
      c.all_reduce += w;
  }
  return c;
}

CommBytes closed_form_comm_bytes(const Graph& /*graph*/, const Policy& p, const UnitPlan& up) {
  CommBytes c;
  const double N = static_cast<double>(up.world.shard_group_size);
  const double R = static_cast<double>(up.world.replicas);
  const double W = static_cast<double>(up.world.world_size);
  const double M = static_cast<double>(p.grad_accum_steps);
  // Per unit: its backward all-gather degree and dtypes (policy overrides).
  const std::vector<UnitSettings> settings = unit_settings(p, up);
  for (size_t i = 0; i < up.units.size(); ++i) {
    const Unit& u = up.units[i];
    if (u.numel == 0) continue;
    const double k = static_cast<double>(settings[i].reshard_k);
    const double bp = settings[i].param_bytes();
    const double br = settings[i].reduce_bytes();
    const double padded = static_cast<double>(u.padded_numel);  // Psi_i with padding
    const double shard = static_cast<double>(u.shard_numel);
    if (N > 1) {
      // Forward all-gather every micro-step; backward again when resharded
      // after forward (k ranks for an integer k; the root only when an
      // override sets it).
      double per_micro = (N - 1) / N * bp * padded;
      if (k > 1) per_micro += (k - 1) / k * bp * padded;
      c.all_gather += M * per_micro;
      c.reduce_scatter += (N - 1) / N * br * padded;  // last micro-step only
    }
    if (R > 1) c.all_reduce += 2 * (R - 1) / R * br * shard;
  }
  // Scalars: clip-norm all-reduce over the shard group, inf check over the world.
  if (p.grad_clip_norm && N > 1) c.all_reduce += 2 * (N - 1) / N * 4;
  if (p.loss_scale_mode && *p.loss_scale_mode == "dynamic" && W > 1)
    c.all_reduce += 2 * (W - 1) / W * 4;
  return c;
}

}  // namespace shardscope::plan
