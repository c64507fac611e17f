// Invariant checker for step schedules (used by tests and by `plan --check`).
// It replays the host order with per-stream vector clocks: op X is known to
// have completed before op Y starts when Y's clock covers X's position on X's
// stream (stream order, explicit waits, and host waits all advance clocks).
#include <algorithm>
#include <functional>
#include <string>

#include "plan/schedule.h"

namespace shardscope::plan {

namespace detail {
void check_roles(const Graph& g, const Schedule& s, const std::function<void(std::string)>& err);
}  // namespace detail

std::vector<std::string> check_schedule(const Graph& g, const UnitPlan& up, const Schedule& s) {
  std::vector<std::string> errors;
  auto err = [&](const std::string& m) {
    if (errors.size() < 50) errors.push_back(m);
  };
  const size_t ns = s.streams.size();
  const size_t nops = s.ops.size();
  std::vector<int> pos(nops, -1);  // position of each op on its stream
  std::vector<int> stream_len(ns, 0);
  std::vector<int> last_on_stream(ns, -1);
  std::vector<std::vector<int>> clock(
      nops);  // per op: completed position per stream before it starts
  std::vector<int> host_clock(ns, -1);
  std::vector<char> launched(nops, 0);
  std::vector<char> alive(s.buffers.size(), 0);
  std::vector<char> freed(s.buffers.size(), 0);
  std::vector<int> first_user(s.buffers.size(), -1);
  // Per buffer and stream: the last op on that stream that used the buffer.
  std::vector<std::vector<int>> last_use(s.buffers.size(), std::vector<int>(ns, -1));
  for (size_t b = 0; b < s.buffers.size(); ++b) alive[b] = s.buffers[b].persistent ? 1 : 0;
  // Block reuse (FSDP_SEMANTICS.md section 10): a freed block may back any
  // later allocation from the pool of the stream that allocated it. Per
  // pool: the clock every use of such a later buffer must cover: after every
  // use of every buffer freed to the pool so far, except uses named as the
  // free's pending_ops (record_stream: the allocator itself waits for them).
  std::vector<std::vector<int>> reuse_frontier(ns, std::vector<int>(ns, -1));
  std::vector<std::vector<int>> reuse_required(s.buffers.size());  // per buffer, at its alloc
  // Per buffer: every op that used it (for the frontier).
  std::vector<std::vector<int>> users(s.buffers.size());

  auto after = [&](int op) {
    std::vector<int> c = clock[op];
    c[s.ops[op].stream] = std::max(c[s.ops[op].stream], pos[op]);
    return c;
  };
  auto merge = [](std::vector<int>& into, const std::vector<int>& from) {
    for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
  };
  auto op_name = [&](int o) {
    const ScheduleOp& op = s.ops[o];
    std::string n = "op " + std::to_string(o) + " (" + op_kind_name(op.kind);
    if (op.graph_op >= 0) n += " " + g.ops[op.graph_op].name;
    if (op.unit >= 0) n += ", unit " + up.units[op.unit].name;
    return n + ", micro-step " + std::to_string(op.micro_step) + ")";
  };

  for (size_t ai = 0; ai < s.actions.size(); ++ai) {
    const Action& a = s.actions[ai];
    switch (a.kind) {
      case ActionKind::alloc: {
        const Buffer& b = s.buffers[a.buffer];
        if (b.persistent)
          err("persistent buffer " + buffer_name(g, b) + " allocated inside the step");
        if (alive[a.buffer]) err("buffer " + buffer_name(g, b) + " allocated twice");
        if (freed[a.buffer]) err("buffer " + buffer_name(g, b) + " allocated again after its free");
        alive[a.buffer] = 1;
        if (b.stream >= 0 && b.stream < static_cast<int>(ns))
          reuse_required[a.buffer] = reuse_frontier[b.stream];
        break;
      }
      case ActionKind::free: {
        const Buffer& b = s.buffers[a.buffer];
        if (b.persistent) err("persistent buffer " + buffer_name(g, b) + " freed inside the step");
        if (!alive[a.buffer]) err("buffer " + buffer_name(g, b) + " freed while not allocated");
        alive[a.buffer] = 0;
        freed[a.buffer] = 1;
        for (int p : a.pending_ops)
          if (p < 0 || p >= static_cast<int>(nops) || !launched[p])
            err("free of " + buffer_name(g, b) + " names a pending op not launched yet");
        if (b.stream >= 0 && b.stream < static_cast<int>(ns)) {
          for (int u : users[a.buffer]) {
            if (std::find(a.pending_ops.begin(), a.pending_ops.end(), u) != a.pending_ops.end())
              continue;
            merge(reuse_frontier[b.stream], after(u));
          }
        }
        break;
      }
      case ActionKind::host_wait: {
        if (a.op < 0 || a.op >= static_cast<int>(nops) || !launched[a.op]) {
          err("host waits on an op not launched yet");
          break;
        }
        merge(host_clock, after(a.op));
        break;
      }
      case ActionKind::launch: {
        const int o = a.op;
        const ScheduleOp& op = s.ops[o];
        if (launched[o]) err(op_name(o) + " launched twice");
        launched[o] = 1;
        std::vector<int> c = host_clock;
        if (last_on_stream[op.stream] >= 0) merge(c, after(last_on_stream[op.stream]));
        for (int w : op.waits) {
          if (w < 0 || w >= o || !launched[w]) {
            err(op_name(o) + " waits on op " + std::to_string(w) + " not launched before it");
            continue;
          }
          merge(c, after(w));
        }
        clock[o] = c;
        pos[o] = stream_len[op.stream]++;
        last_on_stream[op.stream] = o;
        for (int b : op.buffers) {
          if (!alive[b])
            err(op_name(o) + " uses buffer " + buffer_name(g, s.buffers[b]) +
                " outside [alloc, free]");
          if (first_user[b] < 0) first_user[b] = o;
          users[b].push_back(o);
          // Reuse hazard: the block may have belonged to a buffer freed to
          // this pool earlier; every use of that buffer must be ordered
          // before this op (its own stream's earlier ops are, by stream order).
          const std::vector<int>& need = reuse_required[b];
          for (size_t st = 0; st < need.size(); ++st) {
            if (static_cast<int>(st) == op.stream || need[st] <= c[st]) continue;
            err(op_name(o) + " uses buffer " + buffer_name(g, s.buffers[b]) + ", allocated on " +
                s.streams[s.buffers[b].stream] +
                " after a free to that pool, without waiting for stream " + s.streams[st] +
                "'s use of the freed block (position " + std::to_string(need[st]) + ")");
            break;
          }
          // Cross-stream hazard: every earlier use of the buffer on another
          // stream must happen before this op (streams run concurrently on a
          // GPU; buffers do not say read or write, so two unordered uses are
          // a hazard whatever they do).
          for (size_t st = 0; st < ns; ++st) {
            const int u = last_use[b][st];
            if (u < 0 || static_cast<int>(st) == op.stream) continue;
            if (c[st] < pos[u])
              err(op_name(o) + " uses buffer " + buffer_name(g, s.buffers[b]) +
                  " concurrently with " + op_name(u) + " on stream " + s.streams[st] +
                  " (no wait orders them)");
          }
          last_use[b][op.stream] = o;
        }
        // The host runs its own ops at launch: later launches come after them.
        if (s.stream_roles[op.stream] == StreamRole::host) merge(host_clock, after(o));
        // Each unit whose parameters a compute op reads must be gathered, and
        // the op ordered after the op that filled the unsharded buffer.
        if (op.graph_op >= 0) {
          for (int p : g.ops[op.graph_op].params) {
            const int u = up.param_unit[p];
            int found = -1;
            for (int b : op.buffers) {
              const Buffer& buf = s.buffers[b];
              if (buf.unit != u) continue;
              if (buf.category == BufferCategory::unsharded_params ||
                  (buf.category == BufferCategory::parameters && s.world.shard_group_size == 1) ||
                  (buf.category == BufferCategory::comm_buffers && s.world.shard_group_size == 1))
                found = b;
            }
            if (found < 0) {
              err(op_name(o) + " reads parameter " + g.params[p].name + " of unit " +
                  up.units[u].name + " but no gathered buffer of that unit");
              continue;
            }
            const int filler = first_user[found];
            if (filler >= 0 && filler != o && c[s.ops[filler].stream] < pos[filler])
              err(op_name(o) + " is not ordered after " + op_name(filler) +
                  ", which fills the parameters it reads");
          }
        }
        break;
      }
    }
  }
  for (size_t o = 0; o < nops; ++o)
    if (!launched[o]) err(op_name(static_cast<int>(o)) + " is never launched");
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (!s.buffers[b].persistent && alive[b])
      err("transient buffer " + buffer_name(g, s.buffers[b]) +
          " is still allocated at the end of the step");
  // Collective sequence numbers increase by one per group.
  std::vector<int64_t> next_seq(s.groups.size(), 0);
  for (const Action& a : s.actions) {
    if (a.kind != ActionKind::launch) continue;
    const ScheduleOp& op = s.ops[a.op];
    if (!is_collective(op.kind)) continue;
    if (op.group < 0 || op.group >= static_cast<int>(s.groups.size())) {
      err(op_name(a.op) + " has no process group");
      continue;
    }
    if (op.seq != next_seq[op.group]++) err(op_name(a.op) + " breaks its group's sequence");
    const std::vector<int>& ranks = s.groups[op.group].ranks;
    if (!std::binary_search(ranks.begin(), ranks.end(), s.rank))
      err(op_name(a.op) + " runs on group " + s.groups[op.group].name + " without this rank");
  }
  detail::check_roles(g, s, [&](const std::string& m) { err(m); });
  return errors;
}

}  // namespace shardscope::plan
