// Fixtures shared by the sweep tests (test_sweep.cpp, test_sweep_limits.cpp).
#pragma once

#include <nlohmann/json.hpp>

namespace shardscope::test::sweep {

// flavor (2) x limit_all_gathers (2) x reshard (2) x checkpointing (2) on
// gpt2-tiny: 16 per world; fsdp2 with limit_all_gathers=true is rejected (4).
inline nlohmann::json small_grid() {
  return {{"flavor", {"fsdp1", "fsdp2"}},
          {"limit_all_gathers", {false, true}},
          {"reshard_after_forward", {true, false}},
          {"activation_checkpointing", {"none", "full"}}};
}

inline nlohmann::json base_policy() {
  return {{"wrap", {{"type", "class"}, {"classes", {"GPT2Block"}}}}, {"seq_len", 64}};
}

}  // namespace shardscope::test::sweep
