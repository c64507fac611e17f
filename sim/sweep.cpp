#include "sim/sweep.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/simulator.h"

namespace shardscope::sim {

namespace {

std::string top_key(const std::string& key) {
  return key.substr(0, key.find('.'));
}

nlohmann::json::json_pointer pointer_of(const std::string& dotted) {
  std::string p;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    p += "/" + dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return nlohmann::json::json_pointer(p);
}

// What configurations share, built once by whichever thread asks first
// (another thread asking meanwhile may build it too; the first stored wins).
template <typename Key, typename Value>
class SharedCache {
 public:
  template <typename Build>
  std::shared_ptr<const Value> get(const Key& key, const Build& build) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return it->second;
    }
    auto built = std::make_shared<const Value>(build());
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.emplace(key, std::move(built)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<Key, std::shared_ptr<const Value>> cache_;
};

// FSDP units, by plan::units_key (flavor, wrap, world).
using UnitsCache = SharedCache<std::string, plan::UnitPlan>;
// The graph's sizes, by workload (batch, seq).
using SizesCache = SharedCache<std::pair<int64_t, int64_t>, plan::WorkloadSizes>;
// Activation liveness, by units key and the checkpointed units (which hold
// the cached units' identity: plan::build_schedule uses it for those only).
using ActsCache = SharedCache<std::pair<std::string, std::vector<bool>>, plan::ActivationPlan>;

SweepPoint evaluate(const plan::Graph& graph, const HardwareModel& hw, const SweepOptions& options,
                    UnitsCache& units, SizesCache& sizes_cache, ActsCache& acts_cache,
                    nlohmann::json doc, int64_t world) {
  SweepPoint pt;
  pt.world = world;
  pt.policy = std::move(doc);
  std::shared_ptr<const plan::UnitPlan> up;
  std::shared_ptr<const plan::WorkloadSizes> sizes;
  std::string units_key;
  plan::Policy policy;
  plan::Schedule persistent;
  try {
    policy = plan::policy_from_json(pt.policy);
    const plan::World w = plan::validate_policy(policy, graph, world);
    units_key = plan::units_key(policy, w);
    up = units.get(units_key, [&] { return plan::build_units(graph, policy, w); });
    const plan::Workload workload{policy.batch_size, plan::resolve_seq_len(policy, graph)};
    sizes = sizes_cache.get({workload.batch, workload.seq},
                            [&] { return plan::workload_sizes(graph, workload); });
    int64_t tokens = world;
    for (int64_t factor : {policy.batch_size, sizes->workload.seq, policy.grad_accum_steps})
      if (__builtin_mul_overflow(tokens, factor, &tokens))
        throw std::overflow_error(
            "tokens per step (world x batch_size x seq_len x "
            "grad_accum_steps) overflow int64");
    pt.tokens_per_step = tokens;
    persistent = plan::build_persistent_schedule(graph, policy, *up, 0);
  } catch (const plan::Error& e) {
    pt.rejected = true;
    pt.reason = e.what();
    return pt;
  } catch (const std::overflow_error& e) {
    // Sizes beyond int64 (a batch of 1e15): an impossible configuration, rejected like one.
    pt.rejected = true;
    pt.reason = std::string("sizes: ") + e.what();
    return pt;
  }
  SimOptions so;
  so.memory_limit_bytes = options.memory_limit_bytes;
  so.record_trace = false;
  so.sizes = sizes.get();
  auto record = [&](const SimResult& r) {
    pt.fits = r.fits;
    pt.oom_buffer = r.oom_buffer;
    pt.metrics = r.metrics.total;
    // A step that ran out of memory stopped partway: no throughput.
    if (r.fits && pt.metrics.step_time_ms > 0)
      pt.tokens_per_s = static_cast<double>(pt.tokens_per_step) / (pt.metrics.step_time_ms / 1e3);
    pt.rank_classes = r.rank_classes.size();
    pt.sim_events = r.sim_events;
  };
  // The simulator allocates the persistent buffers before any action, so when
  // they alone do not fit, the persistent schedule's result is the step's
  // (same buffer, same metrics, no events) and neither the step's schedule
  // nor its simulation is needed. Only tried when they take over half the
  // memory, where such failures are; the gate decides speed, never results.
  const int64_t capacity =
      options.memory_limit_bytes > 0 ? options.memory_limit_bytes : hw.memory_bytes;
  if (persistent.persistent_device_bytes() > capacity / 2) {
    const SimResult r = simulate(graph, *up, persistent, hw, so);
    if (!r.fits) {
      record(r);
      return pt;
    }
  }
  std::vector<bool> checkpointed = plan::checkpointed_units(policy, *up);
  const std::shared_ptr<const plan::ActivationPlan> acts =
      acts_cache.get({units_key, checkpointed}, [&] {
        plan::ActivationPlan a(graph);
        a.set_checkpointed(*up, checkpointed);
        return a;
      });
  const plan::Schedule schedule =
      plan::build_schedule(graph, policy, *up, 0, sizes.get(), acts.get());
  record(simulate(graph, *up, schedule, hw, so));
  return pt;
}

void flatten(const nlohmann::json& j, const std::string& prefix,
             std::map<std::string, nlohmann::json>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out[prefix] = j;
}

// The policy document with every default written out (for comparisons).
nlohmann::json normalized(const nlohmann::json& doc) {
  try {
    return plan::policy_to_json(plan::policy_from_json(doc));
  } catch (const plan::Error&) {
    return doc;
  }
}

}  // namespace

size_t SweepGrid::size() const {
  size_t n = 1;
  for (const SweepAxis& a : axes) n *= a.values.size();
  return n;
}

SweepGrid grid_from_json(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object())
    throw Error(source + ": a grid must be a JSON object of policy keys to arrays of values");
  const nlohmann::json known = plan::policy_to_json(plan::Policy{});
  SweepGrid grid;
  for (const auto& [key, values] : doc.items()) {
    if (key == "world_size")
      throw Error(source + ": grid key 'world_size': give the worlds with --world N[,N...]");
    if (!known.contains(top_key(key)))
      throw Error(source + ": grid key '" + key + "' is not a policy key");
    if (!values.is_array() || values.empty())
      throw Error(source + ": grid key '" + key + "' must be a non-empty array of values");
    SweepAxis axis;
    axis.key = key;
    for (const nlohmann::json& v : values) axis.values.push_back(v);
    grid.axes.push_back(std::move(axis));
  }
  return grid;
}

SweepGrid load_grid(const std::string& path) {
  nlohmann::json doc;
  try {
    doc = plan::load_json_input(path, "grid");
  } catch (const plan::Error& e) {
    throw Error(e.what());
  }
  return grid_from_json(doc, path);
}

nlohmann::json grid_policy(const SweepGrid& grid, const nlohmann::json& base, size_t index) {
  nlohmann::json doc = base.is_null() ? nlohmann::json::object() : base;
  for (size_t a = grid.axes.size(); a-- > 0;) {
    const SweepAxis& axis = grid.axes[a];
    const size_t n = axis.values.size();
    nlohmann::json::json_pointer ptr = pointer_of(axis.key);
    // A nested key under a null or absent object creates the object.
    nlohmann::json::json_pointer parent = ptr.parent_pointer();
    if (!parent.empty() && (!doc.contains(parent) || doc[parent].is_null()))
      doc[parent] = nlohmann::json::object();
    doc[ptr] = axis.values[index % n];
    index /= n;
  }
  return doc;
}

SweepResult run_sweep(const plan::Graph& graph, const SweepGrid& grid, const HardwareModel& hw,
                      const SweepOptions& options) {
  if (options.worlds.empty()) throw Error("sweep: no world sizes");
  for (int64_t w : options.worlds)
    if (w < 1) throw Error("sweep: world size " + std::to_string(w) + " must be >= 1");
  if (options.memory_limit_bytes < 0) throw Error("sweep: memory limit must be >= 0");
  hw.validate();
  const size_t per_world = grid.size();
  const size_t total = per_world * options.worlds.size();

  SweepResult result;
  result.points.resize(total);
  UnitsCache units;
  SizesCache sizes;
  ActsCache acts;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex progress_mu;
  std::exception_ptr failure;
  std::mutex failure_mu;
  auto worker = [&] {
    while (true) {
      const size_t i = next.fetch_add(1);
      if (i >= total) return;
      try {
        const int64_t world = options.worlds[i / per_world];
        SweepPoint pt = evaluate(graph, hw, options, units, sizes, acts,
                                 grid_policy(grid, options.base_policy, i % per_world), world);
        pt.config = i;
        result.points[i] = std::move(pt);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mu);
        if (!failure) failure = std::current_exception();
        next.store(total);
        return;
      }
      const size_t d = done.fetch_add(1) + 1;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        options.progress(d, total);
      }
    }
  };
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<size_t>(total, 1))));
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);

  // Ranking and the Pareto front of (tokens/s, peak reserved) among those that fit.
  for (size_t i = 0; i < total; ++i) {
    const SweepPoint& p = result.points[i];
    result.sim_events += p.sim_events;
    if (p.rejected)
      ++result.rejected;
    else if (p.fits)
      result.ranking.push_back(i);
  }
  std::stable_sort(result.ranking.begin(), result.ranking.end(), [&](size_t a, size_t b) {
    const traces::MetricValues& ma = result.points[a].metrics;
    const traces::MetricValues& mb = result.points[b].metrics;
    const double ta = result.points[a].tokens_per_s, tb = result.points[b].tokens_per_s;
    if (ta != tb) return ta > tb;
    if (ma.step_time_ms != mb.step_time_ms) return ma.step_time_ms < mb.step_time_ms;
    return ma.peak_reserved_bytes < mb.peak_reserved_bytes;
  });
  int64_t lowest_reserved = INT64_MAX;
  for (size_t i : result.ranking) {
    SweepPoint& p = result.points[i];
    if (p.metrics.peak_reserved_bytes < lowest_reserved) {
      p.pareto = true;
      lowest_reserved = p.metrics.peak_reserved_bytes;
    }
  }
  if (!result.ranking.empty()) {
    result.best = static_cast<int64_t>(result.ranking.front());
    const SweepPoint& best = result.points[static_cast<size_t>(result.best)];
    result.baseline = evaluate(
        graph, hw, options, units, sizes, acts,
        options.base_policy.is_null() ? nlohmann::json::object() : options.base_policy, best.world);
    result.has_baseline = true;
  }
  return result;
}

std::vector<std::string> policy_differences(const nlohmann::json& from, const nlohmann::json& to) {
  std::map<std::string, nlohmann::json> a, b;
  flatten(normalized(from), "", a);
  flatten(normalized(to), "", b);
  std::set<std::string> keys;
  for (const auto& kv : a) keys.insert(kv.first);
  for (const auto& kv : b) keys.insert(kv.first);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    const nlohmann::json va = a.count(k) ? a.at(k) : nlohmann::json();
    const nlohmann::json vb = b.count(k) ? b.at(k) : nlohmann::json();
    if (va != vb) out.push_back(k + ": " + va.dump() + " -> " + vb.dump());
  }
  return out;
}

}  // namespace shardscope::sim
