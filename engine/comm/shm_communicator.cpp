// The collectives of the shared-memory communicator over a Segment (protocol:
// shm_communicator.h; layout: shm_layout.h).
#include "engine/comm/shm_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/comm/shm_layout.h"
#include "engine/comm/shm_segment.h"
#include "engine/comm/shm_wait.h"

namespace shardscope::engine::comm {

namespace {

using namespace shm;
using Clock = std::chrono::steady_clock;

constexpr int kSpinChecks = 2000;  // busy checks before yielding (a few tens of us)
constexpr int kYieldChecks = 50;   // yields before sleeping on the futex
constexpr std::chrono::milliseconds kPollPeriod{100};  // abort/liveness check period
// all_reduce steps of fewer bytes (or groups of <= 2) reduce the whole step on
// every member; larger ones reduce 1/n each and exchange the pieces.
constexpr size_t kDirectAllReduceMaxBytes = size_t{64} << 10;

// dst[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... (then / n for avg), in
// float, in member order. dst must not overlap any src.
void reduce_members(float* __restrict dst, const std::vector<const float*>& src, size_t len,
                    ReduceOp op) {
  constexpr size_t kBlock = 2048;  // floats: dst stays in L1 across the member loop
  const int n = static_cast<int>(src.size());
  const float divisor = static_cast<float>(n);
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t e = std::min(len, b + kBlock);
    const float* __restrict s0 = src[0];
    if (n == 1) {
      for (size_t i = b; i < e; ++i) dst[i] = s0[i];
    } else {
      const float* __restrict s1 = src[1];
      for (size_t i = b; i < e; ++i) dst[i] = s0[i] + s1[i];
    }
    for (int j = 2; j < n; ++j) {
      const float* __restrict sj = src[j];
      for (size_t i = b; i < e; ++i) dst[i] += sj[i];
    }
    if (op == ReduceOp::avg)
      for (size_t i = b; i < e; ++i) dst[i] /= divisor;
  }
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream s;
  s << static_cast<double>(ms.count()) / 1000.0 << " s";
  return s.str();
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::shared_ptr<Segment> segment, int rank, int world_size,
                  std::vector<Group> groups, std::chrono::milliseconds timeout, bool processes)
      : seg_(std::move(segment)),
        rank_(rank),
        world_size_(world_size),
        groups_(std::move(groups)),
        timeout_(timeout),
        processes_(processes) {
    for (const Group& g : groups_) {
      auto state = std::make_unique<GroupState>();
      const auto it = std::find(g.ranks.begin(), g.ranks.end(), rank_);
      state->my_index = it == g.ranks.end() ? -1 : static_cast<int>(it - g.ranks.begin());
      group_state_.push_back(std::move(state));
    }
  }

  ~ShmCommunicator() override {
    // Peers still waiting for this rank fail at once instead of timing out.
    seg_->rank_entry(rank_).state.store(kRankDeparted);
    wake_all_groups();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const std::vector<Group>& groups() const override { return groups_; }

  void all_gather(int group, const void* in, void* out, size_t bytes_per_rank) override {
    Call c = enter(group, OpKind::all_gather);
    CallGuard guard(c);
    check_pointers(c, bytes_per_rank, in, out);
    const auto* src = static_cast<const std::byte*>(in);
    auto* dst = static_cast<std::byte*>(out);
    if (c.n == 1) {
      if (bytes_per_rank && in != out) std::memmove(dst, src, bytes_per_rank);
      return;
    }
    const size_t chunk = seg_->slot_bytes() / 2;
    size_t off = 0;
    do {
      const size_t len = std::min(chunk, bytes_per_rank - off);
      const int p = next_parity(c);
      if (len) std::memcpy(half(c, c.me, p), src + off, len);
      sync_step(c, p, bytes_per_rank, -1);
      for (int m = 0; m < c.n && len; ++m)
        std::memcpy(dst + m * bytes_per_rank + off, half(c, m, p), len);
      off += len;
    } while (off < bytes_per_rank);
  }

  void reduce_scatter(int group, const float* in, float* out, size_t count, ReduceOp op) override {
    Call c = enter(group, OpKind::reduce_scatter);
    CallGuard guard(c);
    check_pointers(c, count, in, out);
    if (c.n == 1) {
      if (count && in != out) std::memmove(out, in, count * sizeof(float));
      return;  // avg over one member divides by 1: unchanged
    }
    const size_t n = static_cast<size_t>(c.n);
    const size_t chunk = seg_->slot_bytes() / 2 / (sizeof(float) * n);
    std::vector<const float*> src(n);
    size_t off = 0;
    do {
      const size_t len = std::min(chunk, count - off);
      const int p = next_parity(c);
      // My slot half holds n blocks of len floats: block b = in[b * count + off, + len).
      float* mine = half_floats(c, c.me, p);
      for (size_t b = 0; b < n && len; ++b)
        std::memcpy(mine + b * len, in + b * count + off, len * sizeof(float));
      sync_step(c, p, count * sizeof(float), -1);
      for (size_t j = 0; j < n; ++j) src[j] = half_floats(c, static_cast<int>(j), p) + c.me * len;
      reduce_members(out + off, src, len, op);
      off += len;
    } while (off < count);
  }

  void all_reduce(int group, float* data, size_t count, ReduceOp op) override {
    Call c = enter(group, OpKind::all_reduce);
    CallGuard guard(c);
    check_pointers(c, count, data, data);
    if (c.n == 1) return;  // sum of one member, or avg dividing by 1: unchanged
    const size_t n = static_cast<size_t>(c.n);
    const size_t chunk = seg_->slot_bytes() / 2 / sizeof(float);
    std::vector<const float*> src(n);
    size_t off = 0;
    do {
      const size_t len = std::min(chunk, count - off);
      const int p = next_parity(c);
      float* mine = half_floats(c, c.me, p);
      if (len) std::memcpy(mine, data + off, len * sizeof(float));
      sync_step(c, p, count * sizeof(float), -1);
      if (n <= 2 || len * sizeof(float) < kDirectAllReduceMaxBytes) {
        for (size_t j = 0; j < n; ++j) src[j] = half_floats(c, static_cast<int>(j), p);
        reduce_members(data + off, src, len, op);
      } else {
        // Member m reduces floats [len*m/n, len*(m+1)/n) into its own slot (no
        // other member reads that range of it in this phase), then all copy.
        const size_t me = static_cast<size_t>(c.me);
        const size_t lo = len * me / n, hi = len * (me + 1) / n;
        for (size_t j = 0; j < n; ++j) src[j] = half_floats(c, static_cast<int>(j), p) + lo;
        reduce_members(data + off + lo, src, hi - lo, op);
        std::memcpy(mine + lo, data + off + lo, (hi - lo) * sizeof(float));
        arrive_and_wait(c);
        for (size_t j = 0; j < n; ++j) {
          if (j == me) continue;
          const size_t jlo = len * j / n, jhi = len * (j + 1) / n;
          std::memcpy(data + off + jlo, half_floats(c, static_cast<int>(j), p) + jlo,
                      (jhi - jlo) * sizeof(float));
        }
      }
      off += len;
    } while (off < count);
  }

  void broadcast(int group, void* data, size_t bytes, int root) override {
    Call c = enter(group, OpKind::broadcast);
    CallGuard guard(c);
    check_pointers(c, bytes, data, data);
    const std::vector<int>& ranks = groups_[group].ranks;
    const auto it = std::find(ranks.begin(), ranks.end(), root);
    if (it == ranks.end())
      fail("broadcast root " + std::to_string(root) + " is not a member of group " +
           groups_[group].name + ": " + describe(c) + " cannot run");
    const int root_index = static_cast<int>(it - ranks.begin());
    if (c.n == 1) return;
    auto* buf = static_cast<std::byte*>(data);
    const size_t chunk = seg_->slot_bytes() / 2;
    size_t off = 0;
    do {
      const size_t len = std::min(chunk, bytes - off);
      const int p = next_parity(c);
      if (c.me == root_index && len) std::memcpy(half(c, c.me, p), buf + off, len);
      sync_step(c, p, bytes, root);
      if (c.me != root_index && len) std::memcpy(buf + off, half(c, root_index, p), len);
      off += len;
    } while (off < bytes);
  }

  void barrier(int group) override {
    Call c = enter(group, OpKind::barrier);
    CallGuard guard(c);
    if (c.n == 1) return;
    sync_step(c, next_parity(c), 0, -1);
  }

  void abort(const std::string& message) override {
    const std::string text = "rank " + std::to_string(rank_) + " aborted: " + message;
    record_failure(text);
    publish_abort(seg_->header(), rank_, text);
    wake_all_groups();
  }

 private:
  // Per-group state of this rank; used by one thread at a time (`busy`).
  struct GroupState {
    int my_index = -1;   // position in the group's ranks; -1: not a member
    uint64_t epoch = 0;  // barriers reached on this group
    uint64_t step = 0;   // steps begun (parity selects the slot half)
    uint64_t seq = 0;    // collectives called on this group
    std::atomic<bool> busy{false};
  };

  struct Call {
    int group;
    OpKind op;
    uint64_t seq;
    GroupState* state;
    int n;   // group size
    int me;  // my member index
  };

  struct CallGuard {
    explicit CallGuard(const Call& call) : c(call) {}
    ~CallGuard() { c.state->busy.store(false, std::memory_order_release); }
    CallGuard(const CallGuard&) = delete;
    CallGuard& operator=(const CallGuard&) = delete;
    const Call& c;
  };

  std::string describe(const Call& c) const {
    return std::string(op_name(c.op)) + " on group " + groups_[c.group].name + " (seq " +
           std::to_string(c.seq) + ")";
  }

  Call enter(int group, OpKind op) {
    throw_if_failed(group, op);
    if (group < 0 || group >= static_cast<int>(groups_.size()))
      fail("rank " + std::to_string(rank_) + ": " + op_name(op) + " on group index " +
           std::to_string(group) + ", but there are " + std::to_string(groups_.size()) + " groups");
    GroupState& state = *group_state_[group];
    const Group& g = groups_[group];
    if (state.my_index < 0) {
      std::string ranks;
      for (size_t i = 0; i < g.ranks.size(); ++i)
        ranks += (i ? "," : "") + std::to_string(g.ranks[i]);
      fail("rank " + std::to_string(rank_) + " is not a member of group " + g.name + " {" + ranks +
           "}: " + op_name(op) + " cannot run");
    }
    bool idle = false;
    if (!state.busy.compare_exchange_strong(idle, true, std::memory_order_acquire))
      fail("rank " + std::to_string(rank_) + " called " + op_name(op) + " on group " + g.name +
           " while another thread of it is in a collective on that group: calls on one group "
           "must be serialised");
    Call c{group, op, ++state.seq, &state, static_cast<int>(g.ranks.size()), state.my_index};
    MemberControl& mc = seg_->member(group, c.me);
    mc.current_op.store(static_cast<uint32_t>(op), std::memory_order_relaxed);
    mc.current_seq.store(c.seq, std::memory_order_relaxed);
    return c;
  }

  void check_pointers(const Call& c, size_t size, const void* in, const void* out) {
    if (size > 0 && (in == nullptr || out == nullptr))
      fail("null buffer passed to " + describe(c) + " on rank " + std::to_string(rank_));
  }

  int next_parity(const Call& c) { return static_cast<int>(c.state->step++ & 1); }

  std::byte* half(const Call& c, int member, int parity) const {
    return seg_->slot(c.group, member) + static_cast<size_t>(parity) * (seg_->slot_bytes() / 2);
  }
  float* half_floats(const Call& c, int member, int parity) const {
    return reinterpret_cast<float*>(half(c, member, parity));
  }

  // The first barrier of a step: publish my descriptor, wait for everyone, and
  // check that every member runs the same step.
  void sync_step(const Call& c, int parity, uint64_t bytes, int root) {
    const StepDescriptor mine{static_cast<uint32_t>(c.op), root, c.seq, bytes};
    seg_->member(c.group, c.me).step[parity] = mine;
    arrive_and_wait(c);
    for (int m = 0; m < c.n; ++m) {
      const StepDescriptor& d = seg_->member(c.group, m).step[parity];
      if (d.op == mine.op && d.seq == mine.seq && d.bytes == mine.bytes && d.root == mine.root)
        continue;
      const auto text = [](const StepDescriptor& s) {
        std::string t = std::string(op_name(static_cast<OpKind>(s.op))) + " seq " +
                        std::to_string(s.seq) + " of " + std::to_string(s.bytes) + " bytes";
        if (s.root >= 0) t += " root " + std::to_string(s.root);
        return t;
      };
      fail("collectives do not match on group " + groups_[c.group].name + ": rank " +
           std::to_string(rank_) + " called " + text(mine) + " but rank " +
           std::to_string(groups_[c.group].ranks[m]) + " called " + text(d) +
           " (every member must call the same collectives in the same order with the same "
           "sizes)");
    }
  }

  bool all_arrived(const Call& c, uint64_t epoch) const {
    for (int m = 0; m < c.n; ++m)
      if (seg_->member(c.group, m).arrived.load(std::memory_order_acquire) < epoch) return false;
    return true;
  }

  void arrive_and_wait(const Call& c) {
    const uint64_t epoch = ++c.state->epoch;
    GroupControl& ctl = seg_->group_control(c.group);
    seg_->member(c.group, c.me).arrived.store(epoch, std::memory_order_seq_cst);
    ctl.wake_seq.fetch_add(1, std::memory_order_seq_cst);
    if (ctl.waiters.load(std::memory_order_seq_cst) != 0) futex_wake_all(&ctl.wake_seq);

    for (int i = 0; i < kSpinChecks; ++i) {
      if (all_arrived(c, epoch)) return;
      cpu_relax();
    }
    const auto start = Clock::now();
    for (int i = 0; i < kYieldChecks; ++i) {
      if (all_arrived(c, epoch)) return;
      std::this_thread::yield();
    }
    auto last_poll = start;
    const SegmentHeader& header = seg_->header();
    for (;;) {
      if (all_arrived(c, epoch)) return;
      if (header.abort_state.load(std::memory_order_acquire) != kNoAbort) fail_from_abort(c);
      const auto now = Clock::now();
      if (now - last_poll >= kPollPeriod) {
        check_missing_members(c, epoch);
        last_poll = now;
      }
      if (now - start >= timeout_) fail_timeout(c, epoch);
      const auto remaining = timeout_ - (now - start);
      ctl.waiters.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = ctl.wake_seq.load(std::memory_order_seq_cst);
      if (!all_arrived(c, epoch) && header.abort_state.load() == kNoAbort)
        futex_wait(&ctl.wake_seq, seen, std::min<Clock::duration>(kPollPeriod, remaining));
      ctl.waiters.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // Members that have not reached `epoch`: departed, or (processes) dead.
  void check_missing_members(const Call& c, uint64_t epoch) {
    for (int m = 0; m < c.n; ++m) {
      if (seg_->member(c.group, m).arrived.load(std::memory_order_acquire) >= epoch) continue;
      const int peer = groups_[c.group].ranks[m];
      const RankEntry& e = seg_->rank_entry(peer);
      if (e.state.load(std::memory_order_acquire) == kRankDeparted)
        fail("rank " + std::to_string(peer) + " closed its communicator: " + describe(c) +
             " cannot complete");
      if (!processes_) continue;
      const int pid = e.pid.load();
      const Liveness live = process_liveness(pid, e.start_time.load());
      if (live != Liveness::alive)
        fail("rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ") is " +
             liveness_name(live) + ": " + describe(c) + " cannot complete");
    }
  }

  [[noreturn]] void fail_timeout(const Call& c, uint64_t epoch) {
    std::string missing;
    for (int m = 0; m < c.n; ++m) {
      const MemberControl& mc = seg_->member(c.group, m);
      if (mc.arrived.load(std::memory_order_acquire) >= epoch) continue;
      if (!missing.empty()) missing += ", ";
      missing += "rank " + std::to_string(groups_[c.group].ranks[m]) + " (its latest call: " +
                 op_name(static_cast<OpKind>(mc.current_op.load(std::memory_order_relaxed))) +
                 " seq " + std::to_string(mc.current_seq.load(std::memory_order_relaxed)) + ")";
    }
    fail("timeout after " + seconds_text(timeout_) + ": " + describe(c) + " on rank " +
         std::to_string(rank_) + " cannot complete: not arrived: " + missing);
  }

  [[noreturn]] void fail_from_abort(const Call& c) {
    const std::string text = read_abort(seg_->header()) + "; " + describe(c) + " on rank " +
                             std::to_string(rank_) + " cannot complete";
    record_failure(text);
    throw CommError(text);
  }

  // Records the failure, publishes it to every rank and throws it.
  [[noreturn]] void fail(const std::string& message) {
    record_failure(message);
    publish_abort(seg_->header(), rank_, message);
    wake_all_groups();
    throw CommError(message);
  }

  void record_failure(const std::string& message) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (failed_.load(std::memory_order_relaxed)) return;
    failure_ = message;
    failed_.store(true, std::memory_order_release);
  }

  void throw_if_failed(int group, OpKind op) {
    const auto context = [&] {
      const bool known = group >= 0 && group < static_cast<int>(groups_.size());
      return std::string(op_name(op)) + " on group " +
             (known ? groups_[group].name : std::to_string(group)) + " on rank " +
             std::to_string(rank_) + " not run";
    };
    if (failed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(failure_mutex_);
      throw CommError(failure_ + " (earlier failure; " + context() + ")");
    }
    if (seg_->header().abort_state.load(std::memory_order_acquire) != kNoAbort) {
      const std::string text = read_abort(seg_->header());
      record_failure(text);
      throw CommError(text + "; " + context());
    }
  }

  void wake_all_groups() {
    for (int g = 0; g < seg_->num_groups(); ++g) {
      GroupControl& ctl = seg_->group_control(g);
      ctl.wake_seq.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(&ctl.wake_seq);
    }
  }

  std::shared_ptr<Segment> seg_;
  int rank_;
  int world_size_;
  std::vector<Group> groups_;
  std::chrono::milliseconds timeout_;
  bool processes_;  // ranks are processes: check peers' pids while waiting
  std::vector<std::unique_ptr<GroupState>> group_state_;
  std::atomic<bool> failed_{false};
  std::mutex failure_mutex_;
  std::string failure_;  // the first failure seen by this rank
};

}  // namespace

Group world_group(int world_size) {
  Group g{"world", {}};
  for (int r = 0; r < world_size; ++r) g.ranks.push_back(r);
  return g;
}

std::unique_ptr<Communicator> open_shm_communicator(const ShmOptions& options) {
  auto segment = open_process_segment(options);
  return std::make_unique<ShmCommunicator>(std::move(segment), options.rank, options.world_size,
                                           options.groups, options.timeout, true);
}

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(
    int world_size, std::vector<Group> groups, const ThreadCommOptions& options) {
  if (options.timeout.count() <= 0) throw CommError("timeout must be positive");
  auto segment = make_heap_segment(world_size, groups, options.slot_bytes);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r)
    comms.push_back(
        std::make_unique<ShmCommunicator>(segment, r, world_size, groups, options.timeout, false));
  return comms;
}

}  // namespace shardscope::engine::comm
