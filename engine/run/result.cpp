// Rank 0's result (RunResult) from the merged trace, and its JSON form for
// the hand-off to the launcher.
#include <algorithm>
#include <vector>

#include "engine/run/run_internal.h"
#include "plan/policy.h"
#include "traces/metrics.h"
#include "traces/trace_io.h"

namespace shardscope::engine::run {

nlohmann::json to_json(const RunResult& r) {
  return {{"exit_code", r.exit_code},
          {"error", r.error},
          {"has_report", r.has_report},
          {"metrics", r.metrics},
          {"losses", r.losses},
          {"tokens_per_step", r.tokens_per_step},
          {"tokens_per_s", r.tokens_per_s},
          {"persistent_bytes", r.persistent_bytes},
          {"peak_allocated_bytes", r.peak_allocated_bytes},
          {"notes", r.notes},
          {"failure", r.failure}};
}

RunResult result_from_json(const nlohmann::json& j) {
  RunResult r;
  r.exit_code = j.at("exit_code").get<int>();
  r.error = j.at("error").get<std::string>();
  r.has_report = j.at("has_report").get<bool>();
  r.metrics = j.at("metrics");
  r.losses = j.at("losses").get<std::vector<double>>();
  r.tokens_per_step = j.at("tokens_per_step").get<int64_t>();
  r.tokens_per_s = j.at("tokens_per_s").get<double>();
  r.persistent_bytes = j.at("persistent_bytes").get<int64_t>();
  r.peak_allocated_bytes = j.at("peak_allocated_bytes").get<int64_t>();
  r.notes = j.at("notes").get<std::string>();
  r.failure = j.value("failure", nlohmann::json());
  return r;
}

namespace detail {

nlohmann::json moe_routing_json(const plan::Graph& graph, const plan::Policy& policy,
                                const exec::RankRun& r0) {
  if (r0.expert_tokens.empty()) return nullptr;
  const auto stated = plan::stated_token_balance(policy);
  const int64_t seq = plan::resolve_seq_len(policy, graph);
  nlohmann::json layers = nlohmann::json::array();
  size_t router = 0;
  for (const plan::Op& op : graph.ops) {
    if (op.type != plan::OpType::moe_router) continue;
    const int64_t experts = op.attrs.num_experts.value_or(0), k = op.attrs.top_k.value_or(1);
    std::vector<int64_t> assumed;
    for (int64_t e = 0; e < experts; ++e)
      assumed.push_back(policy.grad_accum_steps * policy.batch_size *
                        plan::routed_tokens(seq, e, experts, k, stated.get()));
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& rank : r0.expert_tokens) ranks.push_back(rank.at(router));
    layers.push_back({{"router", op.name}, {"assumed", assumed}, {"measured", ranks}});
    ++router;
  }
  const nlohmann::json p = plan::policy_to_json(policy);
  return {{"routing", policy.moe_routing == plan::MoeRouting::topk ? "topk" : "forced"},
          {"token_balance", p.contains("token_balance") ? p["token_balance"] : "uniform"},
          {"layers", std::move(layers)}};
}

exec::TrainHooks progress_hooks(const RunRequest& request, int64_t tokens) {
  exec::TrainHooks hooks;
  if (request.on_progress)
    hooks.on_step = [cb = request.on_progress, steps = request.steps,
                     tokens](const exec::StepReport& r) {
      cb(StepProgress{r, steps, tokens});
    };
  return hooks;
}

RunResult make_result(const RunRequest& request, traces::Trace& merged, const exec::RankRun& r0,
                      int64_t tokens, const BackendReport& report) {
  merged.meta.source = report.source;
  if (!report.hardware.empty()) merged.meta.hardware = report.hardware;
  if (!request.trace_path.empty()) traces::save_trace(merged, request.trace_path);

  RunResult r;
  r.has_report = true;
  r.losses = r0.losses;
  // Throughput: the median step after the first (ARCHITECTURE.md).
  std::vector<double> s(r0.step_seconds.begin() + (r0.step_seconds.size() > 1 ? 1 : 0),
                        r0.step_seconds.end());
  std::sort(s.begin(), s.end());
  const double median = s.empty() ? 0 : s[s.size() / 2];
  r.tokens_per_s = median > 0 ? static_cast<double>(tokens) / median : 0.0;
  r.tokens_per_step = tokens;
  r.persistent_bytes = r0.persistent_bytes;
  r.peak_allocated_bytes = r0.peak_allocated_bytes;
  r.notes = report.notes;

  r.metrics = traces::metrics_to_json(traces::compute_metrics(merged));
  r.metrics["losses"] = r.losses;
  r.metrics["tokens_per_s"] = r.tokens_per_s;
  r.metrics["tokens_per_step"] = tokens;
  for (const auto& [key, value] : report.extra.items()) r.metrics[key] = value;
  if (request.graph) {
    nlohmann::json moe = moe_routing_json(*request.graph, request.policy, r0);
    if (!moe.is_null()) r.metrics["moe_routing"] = std::move(moe);
  }
  return r;
}

}  // namespace detail

}  // namespace shardscope::engine::run
