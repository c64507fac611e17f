#include "sim/sweep.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/op_checkpointing.h"
#include "plan/policy.h"
#include "plan/policy_keys.h"
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
// The graph's sizes, by workload (batch, seq, the experts' token balance as
// the policy JSON writes token_balance and moe_routing).
using SizesCache = SharedCache<std::tuple<int64_t, int64_t, std::string>, plan::WorkloadSizes>;
// Activation liveness, by units key, the checkpointed units (which hold the
// cached units' identity: plan::build_schedule uses it for those only) and
// the ops per-op checkpointing saves.
using ActsCache = SharedCache<std::tuple<std::string, std::vector<bool>, std::vector<bool>>,
                              plan::ActivationPlan>;

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
    policy.device = hw.device;  // the SDPA kernel PyTorch picks there (plan/sdpa.h)
    const plan::World w = plan::validate_policy(policy, graph, world);
    units_key = plan::units_key(policy, w);
    up = units.get(units_key, [&] { return plan::build_units(graph, policy, w); });
    const plan::Workload workload = plan::policy_workload(policy, graph);
    const std::string balance =
        nlohmann::json{{"token_balance", policy.token_balance.weights},
                       {"topk", policy.moe_routing == plan::MoeRouting::topk}}
            .dump();
    sizes = sizes_cache.get({workload.batch, workload.seq, balance},
                            [&] { return plan::workload_sizes(graph, workload); });
    pt.tokens_per_step = plan::tokens_per_step(policy, graph, world);
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
  // Both ran in build_persistent_schedule already: they do not throw here.
  const std::vector<bool> checkpointed = plan::checkpointed_units(policy, *up);
  const std::vector<bool> cached = plan::cached_ops(policy, graph, *up, checkpointed);
  const std::shared_ptr<const plan::ActivationPlan> acts =
      acts_cache.get({units_key, checkpointed, cached}, [&] {
        plan::ActivationPlan a(graph);
        a.set_checkpointed(*up, checkpointed, cached);
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
  for (const SweepAxis& a : axes)
    if (__builtin_mul_overflow(n, a.values.size(), &n)) return SIZE_MAX;
  return n;
}

uint64_t count_configurations(const SweepGrid& grid, size_t worlds) {
  uint64_t n = worlds;
  bool overflow = false;
  for (const SweepAxis& a : grid.axes)
    overflow = overflow || __builtin_mul_overflow(n, uint64_t{a.values.size()}, &n);
  if (!overflow && n <= kMaxSweepConfigurations) return n;
  // The lengths, for the message: "10 x 10 x ... x 1 world".
  std::string dims;
  for (const SweepAxis& a : grid.axes) dims += std::to_string(a.values.size()) + " x ";
  dims += std::to_string(worlds) + (worlds == 1 ? " world" : " worlds");
  char count[64];
  if (overflow)
    std::snprintf(count, sizeof count, "more than 2^64");
  else
    std::snprintf(count, sizeof count, "%llu (%.1e)", static_cast<unsigned long long>(n),
                  static_cast<double>(n));
  throw Error("the sweep has " + std::string(count) + " configurations (" + dims +
              "), over the limit of " + std::to_string(kMaxSweepConfigurations) +
              " (10^7); sweep fewer values, or split the grid into several sweeps");
}

SweepGrid grid_from_json(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object())
    throw Error(source + ": a grid must be a JSON object of policy keys to arrays of values");
  SweepGrid grid;
  for (const auto& [key, values] : doc.items()) {
    const plan::PolicyKey* row = plan::find_policy_key(top_key(key));
    if (!row) throw Error(source + ": grid key '" + key + "' is not a policy key");
    if (!row->sweepable) throw Error(source + ": grid key '" + key + "': " + row->sweep_note);
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

namespace {

// The ranking's order: highest tokens/s, then lower step time, then lower
// peak reserved, then grid order.
bool ranks_above(const SweepPoint& a, const SweepPoint& b) {
  if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
  if (a.metrics.step_time_ms != b.metrics.step_time_ms)
    return a.metrics.step_time_ms < b.metrics.step_time_ms;
  if (a.metrics.peak_reserved_bytes != b.metrics.peak_reserved_bytes)
    return a.metrics.peak_reserved_bytes < b.metrics.peak_reserved_bytes;
  return a.config < b.config;
}

struct RankOrder {
  bool operator()(const SweepPoint& a, const SweepPoint& b) const { return ranks_above(a, b); }
};

// The summary, fed the configurations in config order.
class Summarizer {
 public:
  explicit Summarizer(size_t keep) : keep_(keep) {}

  void add(const SweepPoint& p) {
    ++s_.total;
    s_.sim_events += p.sim_events;
    if (p.rejected) {
      ++s_.rejected;
      auto it = reasons_.find(p.reason);
      if (it != reasons_.end())
        ++it->second;
      else if (reasons_.size() < kMaxSweepReasons)
        reasons_.emplace(p.reason, 1);
      else
        ++s_.other_reasons;
      return;
    }
    const int64_t simulated_index = static_cast<int64_t>(simulated_++);
    if (!p.fits) {
      if (s_.first_do_not_fit.size() < keep_) s_.first_do_not_fit.push_back(p);
      ++s_.do_not_fit;
      return;
    }
    ++s_.fit;
    // The best `keep` of the ranking.
    if (top_.size() < keep_ || (keep_ > 0 && ranks_above(p, *std::prev(top_.end())))) {
      top_.insert(p);
      if (top_.size() > keep_) top_.erase(std::prev(top_.end()));
    }
    if (best_ < 0 || ranks_above(p, best_point_)) {
      best_ = simulated_index;
      best_point_ = p;
    }
    // The front, in ranking order, has strictly decreasing peak reserved
    // memory; p joins it when it reserves less than the member ranked just
    // above it (hence less than everything ranked above it), and then
    // pushes out the members below it that reserve at least as much.
    const int64_t reserved = p.metrics.peak_reserved_bytes;
    auto pos = front_.lower_bound(p);
    if (pos != front_.begin() && std::prev(pos)->metrics.peak_reserved_bytes <= reserved) return;
    while (pos != front_.end() && pos->metrics.peak_reserved_bytes >= reserved)
      pos = front_.erase(pos);
    SweepPoint member = p;
    member.pareto = true;
    front_.insert(pos, std::move(member));
  }

  SweepSummary finish() {
    for (const auto& kv : reasons_) s_.reasons.emplace_back(kv.first, kv.second);
    std::stable_sort(s_.reasons.begin(), s_.reasons.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    const std::set<size_t> on_front = front_configs();
    for (const SweepPoint& p : top_) {
      s_.top.push_back(p);
      s_.top.back().pareto = on_front.count(p.config) != 0;
    }
    s_.pareto.assign(front_.begin(), front_.end());
    s_.best_simulated_index = best_;
    return std::move(s_);
  }

  std::set<size_t> front_configs() const {
    std::set<size_t> out;
    for (const SweepPoint& p : front_) out.insert(p.config);
    return out;
  }

 private:
  size_t keep_;
  SweepSummary s_;
  std::map<std::string, size_t> reasons_;
  std::set<SweepPoint, RankOrder> top_;
  std::set<SweepPoint, RankOrder> front_;
  size_t simulated_ = 0;
  int64_t best_ = -1;
  SweepPoint best_point_;
};

}  // namespace

SweepSummary sweep_stream(const plan::Graph& graph, const SweepGrid& grid, const HardwareModel& hw,
                          const SweepOptions& options, const SweepSink& sink) {
  if (options.worlds.empty()) throw Error("sweep: no world sizes");
  for (int64_t w : options.worlds)
    if (w < 1) throw Error("sweep: world size " + std::to_string(w) + " must be >= 1");
  if (options.memory_limit_bytes < 0) throw Error("sweep: memory limit must be >= 0");
  hw.validate();
  const size_t total = count_configurations(grid, options.worlds.size());
  const size_t per_world = grid.size();

  UnitsCache units;
  SizesCache sizes;
  ActsCache acts;
  Summarizer summary(options.keep);
  int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::min<size_t>(
                                                   std::max<size_t>(total, 1), 1 << 16))));
  // Finished configurations wait in `pending` until every earlier one is
  // done, then go to the summary and the sink in config order. A worker
  // takes no configuration more than `window` past the first unfinished
  // one, which bounds `pending` (that one is always being simulated: it was
  // handed out before any later one).
  const size_t window = 64 * static_cast<size_t>(threads);
  std::mutex mu;
  std::condition_variable room;
  std::map<size_t, SweepPoint> pending;
  size_t next_out = 0;  // the first configuration not yet handed on
  size_t next = 0;      // the next configuration to simulate
  bool stop = false;
  std::exception_ptr failure;
  auto worker = [&] {
    while (true) {
      size_t i = 0;
      {
        std::unique_lock<std::mutex> lock(mu);
        room.wait(lock, [&] { return stop || next >= total || next < next_out + window; });
        if (stop || next >= total) return;
        i = next++;
      }
      try {
        const int64_t world = options.worlds[i / per_world];
        SweepPoint pt = evaluate(graph, hw, options, units, sizes, acts,
                                 grid_policy(grid, options.base_policy, i % per_world), world);
        pt.config = i;
        std::lock_guard<std::mutex> lock(mu);
        if (stop) return;
        pending.emplace(i, std::move(pt));
        bool moved = false;
        for (auto it = pending.begin(); it != pending.end() && it->first == next_out;
             it = pending.erase(it)) {
          summary.add(it->second);
          if (sink) sink(it->second);
          ++next_out;
          moved = true;
          if (options.progress) options.progress(next_out, total);
        }
        if (moved) room.notify_all();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
        stop = true;
        room.notify_all();
        return;
      }
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
    for (std::thread& t : pool) t.join();
  }
  if (failure) std::rethrow_exception(failure);

  SweepSummary result = summary.finish();
  if (!result.pareto.empty()) {
    const SweepPoint& best = result.pareto.front();
    result.baseline = evaluate(
        graph, hw, options, units, sizes, acts,
        options.base_policy.is_null() ? nlohmann::json::object() : options.base_policy, best.world);
    result.has_baseline = true;
  }
  return result;
}

SweepResult run_sweep(const plan::Graph& graph, const SweepGrid& grid, const HardwareModel& hw,
                      const SweepOptions& options) {
  SweepResult result;
  SweepOptions all = options;
  all.keep = 0;  // the ranking below is built from the points
  const SweepSummary summary =
      sweep_stream(graph, grid, hw, all, [&](const SweepPoint& p) { result.points.push_back(p); });
  for (const SweepPoint& front : summary.pareto) result.points[front.config].pareto = true;
  for (size_t i = 0; i < result.points.size(); ++i) {
    const SweepPoint& p = result.points[i];
    if (p.rejected)
      ++result.rejected;
    else if (p.fits)
      result.ranking.push_back(i);
  }
  std::sort(result.ranking.begin(), result.ranking.end(),
            [&](size_t a, size_t b) { return ranks_above(result.points[a], result.points[b]); });
  result.sim_events = summary.sim_events;
  if (!result.ranking.empty()) result.best = static_cast<int64_t>(result.ranking.front());
  result.baseline = summary.baseline;
  result.has_baseline = summary.has_baseline;
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

std::vector<std::string> overrides_labels(const nlohmann::json& policy) {
  std::vector<std::string> out;
  if (!policy.is_object() || !policy.contains("overrides") || !policy.at("overrides").is_array())
    return out;
  for (const nlohmann::json& o : policy.at("overrides")) {
    if (!o.is_object() || !o.contains("units")) {
      out.push_back(o.dump());
      continue;
    }
    const nlohmann::json& units = o.at("units");
    std::string line;
    if (units.is_string()) {
      line = units.get<std::string>();
    } else if (units.is_array()) {
      line = "[";
      for (size_t i = 0; i < units.size(); ++i)
        line += (i ? ", " : "") +
                (units[i].is_string() ? units[i].get<std::string>() : units[i].dump());
      line += "]";
    } else {
      line = units.dump();
    }
    line += ":";
    for (const auto& [k, v] : o.items()) {
      if (k == "units") continue;
      if (k == "mixed_precision" && v.is_object()) {
        const std::string param = v.value("param_dtype", "fp32");
        const std::string reduce = v.contains("reduce_dtype") && v.at("reduce_dtype").is_string()
                                       ? v.at("reduce_dtype").get<std::string>()
                                       : param;
        line += " mixed_precision " + param + "/" + reduce;
      } else {
        line += " " + k + " " + v.dump();
      }
    }
    out.push_back(line);
  }
  return out;
}

}  // namespace shardscope::sim
