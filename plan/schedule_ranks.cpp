// rank_groups: maps one rank's process groups onto every other rank's.
#include <map>
#include <string>
#include <vector>

#include "plan/error.h"
#include "plan/schedule.h"

namespace shardscope::plan {

RankGroups rank_groups(const Schedule& s) {
  const auto world = static_cast<size_t>(s.world.world_size);
  // role -> rank -> group holding it (-1: none).
  std::map<GroupRole, std::vector<int>> holder;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    std::vector<int>& table = holder[s.groups[g].role];
    if (table.empty()) table.assign(world, -1);
    for (int r : s.groups[g].ranks) {
      if (r < 0 || static_cast<size_t>(r) >= world)
        throw Error("group '" + s.groups[g].name + "' holds rank " + std::to_string(r) +
                    " outside the world of " + std::to_string(world));
      if (table[static_cast<size_t>(r)] >= 0)
        throw Error("rank " + std::to_string(r) + " is in two groups of role '" +
                    group_role_name(s.groups[g].role) + "'");
      table[static_cast<size_t>(r)] = static_cast<int>(g);
    }
  }
  RankGroups out;
  std::vector<const std::vector<int>*> tables;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const std::vector<int>& table = holder.at(s.groups[g].role);
    if (table.at(static_cast<size_t>(s.rank)) != static_cast<int>(g)) continue;
    out.used.push_back(static_cast<int>(g));
    tables.push_back(&table);
  }
  out.of_rank.assign(world, std::vector<int>(out.used.size(), -1));
  for (size_t r = 0; r < world; ++r)
    for (size_t i = 0; i < tables.size(); ++i) {
      const int g = (*tables[i])[r];
      if (g < 0)
        throw Error("rank " + std::to_string(r) + " is in no group of role '" +
                    group_role_name(s.groups[static_cast<size_t>(out.used[i])].role) + "'");
      out.of_rank[r][i] = g;
    }
  return out;
}

}  // namespace shardscope::plan
