// The policy grid every schedule invariant is checked over:
// flavor x wrap x reshard x backward prefetch x precision x offload x checkpointing.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardscope::test {

inline std::vector<nlohmann::json> schedule_policy_grid(const std::string& block_class) {
  using nlohmann::json;
  std::vector<json> grid;
  const std::vector<json> wraps = {{{"type", "none"}},
                                   {{"type", "size"}, {"min_num_params", 20000}},
                                   {{"type", "class"}, {"classes", {block_class}}}};
  const std::vector<json> precisions = {
      nullptr, {{"param_dtype", "bf16"}}, {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}};
  for (const char* flavor : {"fsdp1", "fsdp2"}) {
    const bool f2 = std::string(flavor) == "fsdp2";
    std::vector<json> reshards = {true, false};
    if (f2) reshards.push_back(2);
    std::vector<std::string> prefetches = {"none", "pre"};
    if (!f2) prefetches.push_back("post");
    for (const json& wrap : wraps)
      for (const json& reshard : reshards)
        for (const std::string& prefetch : prefetches)
          for (const json& mp : precisions)
            for (bool offload : {false, true})
              for (const char* ckpt : {"none", "full"}) {
                if (wrap["type"] == "none" && std::string(ckpt) == "full") continue;
                json p = {{"flavor", flavor},
                          {"wrap", wrap},
                          {"reshard_after_forward", reshard},
                          {"backward_prefetch", prefetch},
                          {"mixed_precision", mp},
                          {"cpu_offload", offload},
                          {"activation_checkpointing", ckpt},
                          {"batch_size", 2},
                          {"seq_len", 16}};
                grid.push_back(p);
              }
  }
  return grid;
}

}  // namespace shardscope::test
