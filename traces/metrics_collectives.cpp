#include "traces/metrics_collectives.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

namespace shardscope::traces {

using nlohmann::json;

namespace {

// How many earlier events `doing` looks at before an arrival: bounds its cost
// on large traces (the event that ended last before an arrival is almost
// always among the few that started last).
constexpr size_t kDoingLookback = 256;

bool is_activity(Category c) {
  return !is_comm(c) && c != Category::sync && c != Category::marker;
}

// One rank's non-collective busy events by start, to ask what it was doing.
struct Activities {
  bool ready = false;
  std::vector<uint32_t> by_start;  // event indices
};

ArrivalActivity doing_at(const Trace& t, const RankTrace& r, const Activities& a, int64_t at) {
  ArrivalActivity out;
  const auto it = std::lower_bound(a.by_start.begin(), a.by_start.end(), at,
                                   [&](uint32_t i, int64_t x) { return r.events[i].start_ns < x; });
  size_t n = static_cast<size_t>(it - a.by_start.begin());
  int64_t best_end = INT64_MIN;
  int64_t best_start = INT64_MIN;
  const Event* best = nullptr;
  for (size_t looked = 0; n > 0 && looked < kDoingLookback; ++looked) {
    const Event& e = r.events[a.by_start[--n]];
    const int64_t end = std::min(e.start_ns + e.dur_ns, at);
    if (end > best_end || (end == best_end && e.start_ns > best_start)) {
      best = &e;
      best_end = end;
      best_start = e.start_ns;
    }
  }
  if (!best) return out;
  out.found = true;
  out.name = std::string(t.strings.get(best->name));
  out.category = best->category;
  out.gap_ns = at - best_end;
  return out;
}

int64_t step_of(const RankTrace& r, int64_t t) {
  if (r.steps.empty() || t < r.steps.front().start_ns) return 0;
  auto it = std::upper_bound(r.steps.begin(), r.steps.end(), t,
                             [](int64_t x, const Step& s) { return x < s.start_ns; });
  return std::prev(it)->number;
}

std::string ms(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1e6);
  return buf;
}

}  // namespace

CollectiveMatch match_collectives(const Trace& t) {
  CollectiveMatch m;
  size_t comm_events = 0;
  for (const RankTrace& r : t.ranks)
    for (const Event& e : r.events) comm_events += is_comm(e.category) ? 1 : 0;
  if (comm_events == 0) return m;
  const auto nranks = static_cast<int32_t>(t.ranks.size());
  for (const RankTrace& r : t.ranks)
    if (!r.represents.empty() && r.represents != std::vector<int32_t>{r.rank}) {
      m.reason = "rank " + std::to_string(r.rank) + " stands for " +
                 std::to_string(r.represents.size()) +
                 " ranks (a simulated representative): no arrivals to compare";
      return m;
    }
  if (nranks < 2 || (t.meta.world_size > 0 && t.meta.world_size != nranks)) {
    m.reason = "the trace holds " + std::to_string(nranks) + " of " +
               std::to_string(t.meta.world_size > 0 ? t.meta.world_size : nranks) +
               " ranks: a collective's wait can only be told from its transfer with every rank "
               "of its group";
    return m;
  }
  m.split = true;

  // Per rank: collectives by (name, category), each in start order.
  using Key = std::pair<std::string, Category>;
  std::vector<std::map<Key, std::vector<uint32_t>>> by_key(t.ranks.size());
  std::set<Key> keys;
  for (size_t k = 0; k < t.ranks.size(); ++k) {
    const RankTrace& r = t.ranks[k];
    m.transfer_start[r.rank].resize(r.events.size());
    for (size_t i = 0; i < r.events.size(); ++i) {
      const Event& e = r.events[i];
      m.transfer_start[r.rank][i] = e.start_ns;
      if (!is_comm(e.category)) continue;
      Key key{std::string(t.strings.get(e.name)), e.category};
      by_key[k][key].push_back(static_cast<uint32_t>(i));
      keys.insert(std::move(key));
    }
    for (auto& [key, list] : by_key[k]) {
      (void)key;
      std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
        return r.events[a].start_ns < r.events[b].start_ns;
      });
    }
  }
  std::vector<Activities> activities(t.ranks.size());
  auto activity_of = [&](size_t k) -> const Activities& {
    Activities& a = activities[k];
    if (!a.ready) {
      a.ready = true;
      const RankTrace& r = t.ranks[k];
      for (size_t i = 0; i < r.events.size(); ++i)
        if (is_activity(r.events[i].category)) a.by_start.push_back(static_cast<uint32_t>(i));
      std::stable_sort(a.by_start.begin(), a.by_start.end(), [&](uint32_t x, uint32_t y) {
        return r.events[x].start_ns < r.events[y].start_ns;
      });
    }
    return a;
  };

  for (const Key& key : keys) {
    size_t count = SIZE_MAX;
    bool same = true;
    for (size_t k = 0; k < t.ranks.size(); ++k) {
      const auto it = by_key[k].find(key);
      const size_t n = it == by_key[k].end() ? 0 : it->second.size();
      if (count != SIZE_MAX && n != count) same = false;
      count = std::min(count, n);
    }
    if (!same) {
      for (size_t k = 0; k < t.ranks.size(); ++k) {
        const auto it = by_key[k].find(key);
        if (it != by_key[k].end()) m.unmatched += static_cast<int64_t>(it->second.size());
      }
      continue;
    }
    for (size_t j = 0; j < count; ++j) {
      MatchedCollective c;
      c.name = key.first;
      c.category = key.second;
      c.first_arrival_ns = INT64_MAX;
      c.last_arrival_ns = INT64_MIN;
      size_t slowest = 0;
      for (size_t k = 0; k < t.ranks.size(); ++k) {
        const RankTrace& r = t.ranks[k];
        const uint32_t i = by_key[k].at(key)[j];
        const Event& e = r.events[i];
        c.arrivals.push_back(CollectiveArrival{r.rank, i, e.start_ns, e.start_ns + e.dur_ns});
        c.first_arrival_ns = std::min(c.first_arrival_ns, e.start_ns);
        if (e.start_ns > c.last_arrival_ns) {
          c.last_arrival_ns = e.start_ns;
          slowest = k;
        }
      }
      c.slowest_rank = t.ranks[slowest].rank;
      c.step = step_of(t.ranks.front(), c.arrivals.front().start_ns);
      c.slowest_doing = doing_at(t, t.ranks[slowest], activity_of(slowest), c.last_arrival_ns);
      for (const CollectiveArrival& a : c.arrivals)
        m.transfer_start[a.rank][a.event] = c.last_arrival_ns;
      m.collectives.push_back(std::move(c));
    }
  }
  std::stable_sort(m.collectives.begin(), m.collectives.end(),
                   [](const MatchedCollective& a, const MatchedCollective& b) {
                     return a.first_arrival_ns < b.first_arrival_ns;
                   });
  for (MatchedCollective& c : m.collectives)
    std::sort(
        c.arrivals.begin(), c.arrivals.end(),
        [](const CollectiveArrival& a, const CollectiveArrival& b) { return a.rank < b.rank; });
  return m;
}

json collectives_to_json(const CollectiveMatch& m, int limit) {
  json j = json::object();
  j["split"] = m.split;
  j["reason"] = m.reason;
  j["unmatched"] = m.unmatched;
  std::vector<const MatchedCollective*> order;
  for (const MatchedCollective& c : m.collectives) order.push_back(&c);
  if (limit >= 0) {
    std::stable_sort(order.begin(), order.end(),
                     [](const MatchedCollective* a, const MatchedCollective* b) {
                       return a->skew_ns() > b->skew_ns();
                     });
    if (order.size() > static_cast<size_t>(limit)) order.resize(static_cast<size_t>(limit));
  }
  json list = json::array();
  for (const MatchedCollective* c : order) {
    json e = {{"step", c->step},
              {"name", c->name},
              {"category", category_name(c->category)},
              {"skew_ms", static_cast<double>(c->skew_ns()) / 1e6},
              {"slowest_rank", c->slowest_rank}};
    e["slowest_doing"] = c->slowest_doing.found
                             ? json{{"name", c->slowest_doing.name},
                                    {"category", category_name(c->slowest_doing.category)},
                                    {"gap_ms", static_cast<double>(c->slowest_doing.gap_ns) / 1e6}}
                             : json();
    json arrivals = json::array();
    for (const CollectiveArrival& a : c->arrivals) {
      const int64_t wait = std::min(c->last_arrival_ns, a.end_ns) - a.start_ns;
      const int64_t transfer = a.end_ns - std::max(c->last_arrival_ns, a.start_ns);
      arrivals.push_back(
          {{"rank", a.rank},
           {"offset_ms", static_cast<double>(a.start_ns - c->first_arrival_ns) / 1e6},
           {"wait_ms", static_cast<double>(std::max<int64_t>(wait, 0)) / 1e6},
           {"transfer_ms", static_cast<double>(std::max<int64_t>(transfer, 0)) / 1e6}});
    }
    e["arrivals"] = std::move(arrivals);
    list.push_back(std::move(e));
  }
  j["collectives"] = std::move(list);
  return j;
}

std::string format_collectives(const CollectiveMatch& m, int per_step) {
  std::string out;
  char buf[512];
  if (!m.split) {
    return "collectives: not split into wait and transfer" +
           (m.reason.empty() ? std::string(" (no collectives)") : ": " + m.reason) + "\n";
  }
  std::snprintf(buf, sizeof buf,
                "collectives: %zu matched across ranks, %lld events unmatched (counts differ "
                "between ranks); wait = until the last rank arrives, transfer = after\n",
                m.collectives.size(), static_cast<long long>(m.unmatched));
  out += buf;
  std::map<int64_t, std::vector<const MatchedCollective*>> by_step;
  for (const MatchedCollective& c : m.collectives) by_step[c.step].push_back(&c);
  for (auto& [step, list] : by_step) {
    std::map<int32_t, int64_t> wait, transfer, slowest;
    int64_t skew = 0;
    for (const MatchedCollective* c : list) {
      skew += c->skew_ns();
      ++slowest[c->slowest_rank];
      for (const CollectiveArrival& a : c->arrivals) {
        wait[a.rank] += std::max<int64_t>(std::min(c->last_arrival_ns, a.end_ns) - a.start_ns, 0);
        transfer[a.rank] +=
            std::max<int64_t>(a.end_ns - std::max(c->last_arrival_ns, a.start_ns), 0);
      }
    }
    std::snprintf(buf, sizeof buf, "\nstep %lld: %zu collectives, arrival skew %s ms in all\n",
                  static_cast<long long>(step), list.size(), ms(skew).c_str());
    out += buf;
    std::snprintf(buf, sizeof buf, "  %-8s %12s %14s %14s\n", "rank", "wait ms", "transfer ms",
                  "slowest (n)");
    out += buf;
    for (const auto& [rank, w] : wait) {
      std::snprintf(buf, sizeof buf, "  %-8d %12s %14s %14lld\n", rank, ms(w).c_str(),
                    ms(transfer[rank]).c_str(), static_cast<long long>(slowest[rank]));
      out += buf;
    }
    std::stable_sort(list.begin(), list.end(),
                     [](const MatchedCollective* a, const MatchedCollective* b) {
                       return a->skew_ns() > b->skew_ns();
                     });
    const size_t shown = std::min(list.size(), static_cast<size_t>(std::max(per_step, 0)));
    if (shown == 0) continue;
    std::snprintf(buf, sizeof buf, "  %-32s %10s %8s  %s\n", "largest skews", "skew ms", "slowest",
                  "it was doing");
    out += buf;
    for (size_t i = 0; i < shown; ++i) {
      const MatchedCollective& c = *list[i];
      std::string name = c.name.size() > 32 ? c.name.substr(0, 29) + "..." : c.name;
      std::string doing = "(nothing recorded)";
      if (c.slowest_doing.found) {
        doing = c.slowest_doing.name.size() > 48 ? c.slowest_doing.name.substr(0, 45) + "..."
                                                 : c.slowest_doing.name;
        doing +=
            std::string(" (") + category_name(c.slowest_doing.category) +
            (c.slowest_doing.gap_ns > 0 ? ", ended " + ms(c.slowest_doing.gap_ns) + " ms before"
                                        : ", until it arrived") +
            ")";
      }
      std::snprintf(buf, sizeof buf, "  %-32s %10s %8d  %s\n", name.c_str(),
                    ms(c.skew_ns()).c_str(), c.slowest_rank, doing.c_str());
      out += buf;
    }
  }
  return out;
}

}  // namespace shardscope::traces
