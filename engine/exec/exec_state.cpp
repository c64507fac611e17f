// Parameter state of a rank outside the step: initial weights (each rank
// generates its own shard, no communication) and gathering the full
// parameters back (tests, consolidated checkpoints).
#include <cstring>

#include "engine/exec/rank_executor.h"
#include "engine/exec/schedule_info.h"

namespace shardscope::engine::exec {

void RankExecutor::init_weights(uint64_t seed) {
  for (size_t u = 0; u < up_.units.size(); ++u) {
    const UnitLayout& lay = layouts_[u];
    if (lay.shard_numel() == 0) continue;
    fill_initial_shard(g_, lay, shard_index_, seed, param_shard(static_cast<int>(u)));
  }
}

std::vector<std::vector<float>> RankExecutor::gather_full_params() {
  std::vector<std::vector<float>> out(g_.params.size());
  const int shard_group = group_indices(s_).shard_group;
  for (size_t u = 0; u < up_.units.size(); ++u) {
    const UnitLayout& lay = layouts_[u];
    if (lay.shard_numel() == 0) continue;
    std::vector<float> gathered(static_cast<size_t>(lay.full_numel()));
    if (lay.n() == 1)
      std::memcpy(gathered.data(), param_shard(static_cast<int>(u)),
                  gathered.size() * sizeof(float));
    else
      comm_.all_gather(shard_group, param_shard(static_cast<int>(u)), gathered.data(),
                       static_cast<size_t>(lay.shard_numel()) * sizeof(float));
    std::vector<float> full(gathered.size());
    lay.gathered_to_unsharded(gathered.data(), full.data(), 4);
    for (const ParamPlace& pp : lay.params())
      out[static_cast<size_t>(pp.param)].assign(full.begin() + pp.unsharded,
                                                full.begin() + pp.unsharded + pp.numel);
  }
  return out;
}

}  // namespace shardscope::engine::exec
