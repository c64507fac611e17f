// ScheduleRunner, the host side shared by the CPU and CUDA executors, on a
// hand-built schedule with a recording backend: what it hands the backend at
// each action (operands, first-use rules, pending ops of a free), its memory
// accounting and its recording.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "alloc/backing.h"
#include "alloc/caching_allocator.h"
#include "engine/exec/exec_error.h"
#include "engine/exec/schedule_runner.h"
#include "plan/schedule.h"

using namespace shardscope;
using engine::exec::FirstUse;
using plan::BufferRole;

namespace {

// Streams: host 0, compute 1, reduce_scatter 2.
struct Fixture {
  plan::Graph graph;
  plan::UnitPlan units;
  plan::Schedule s;

  Fixture() {
    s.streams = {"host", "compute", "reduce_scatter"};
    s.stream_roles = {plan::StreamRole::host, plan::StreamRole::compute,
                      plan::StreamRole::reduce_scatter};
    s.groups = {plan::ProcessGroup{"world", {0}, plan::GroupRole::world}};
  }
  int buffer(BufferRole role, int64_t bytes, bool persistent = false, int stream = 1) {
    plan::Buffer b;
    b.role = role;
    b.category = plan::buffer_role_category(role);
    b.bytes = bytes;
    b.stream = stream;
    b.persistent = persistent;
    s.buffers.push_back(b);
    return static_cast<int>(s.buffers.size()) - 1;
  }
  int launch(plan::OpKind kind, int stream, std::vector<int> buffers) {
    plan::ScheduleOp op;
    op.kind = kind;
    op.stream = stream;
    for (int b : buffers) op.buffers.push_back(b);
    s.ops.push_back(op);
    const int id = static_cast<int>(s.ops.size()) - 1;
    s.actions.push_back(plan::Action{plan::ActionKind::launch, id, -1, {}});
    return id;
  }
  void alloc(int b) { s.actions.push_back(plan::Action{plan::ActionKind::alloc, -1, b, {}}); }
  void free(int b, plan::SmallVector<int, 4> pending = {}) {
    s.actions.push_back(plan::Action{plan::ActionKind::free, -1, b, pending});
  }
  void host_wait(int op) {
    s.actions.push_back(plan::Action{plan::ActionKind::host_wait, op, -1, {}});
  }
};

// Records every call; ops complete when the host waits on them.
class RecordingBackend : public engine::exec::RunnerBackend {
 public:
  std::vector<std::string> calls;
  std::vector<std::vector<FirstUse>> inits;  // per launch
  std::vector<std::vector<int>> frees;       // pending ops handed to free_events
  std::vector<std::vector<char>> host_blocks;

  void before_action() override { ++actions; }
  void poll_completions() override { ++polls; }
  std::vector<alloc::EventId> free_events(int buffer,
                                          const plan::SmallVector<int, 4>& pending) override {
    calls.push_back("free_events " + std::to_string(buffer));
    frees.emplace_back(pending.begin(), pending.end());
    return {};
  }
  void launch(int op, engine::exec::LaunchBuffers&& buffers) override {
    calls.push_back("launch " + std::to_string(op));
    inits.push_back(buffers.init);
    for (void* p : buffers.ptrs) CHECK(p != nullptr);
  }
  void host_wait(int op) override { calls.push_back("host_wait " + std::to_string(op)); }
  void* host_memory(int buffer, size_t bytes) override {
    calls.push_back("host_memory " + std::to_string(buffer));
    host_blocks.emplace_back(bytes, 0);
    return host_blocks.back().data();
  }
  void zero_persistent(void* /*address*/, size_t bytes) override {
    calls.push_back("zero " + std::to_string(bytes));
  }
  void allocated(int buffer, const alloc::Allocation& a) override {
    calls.push_back("allocated " + std::to_string(buffer) + " " + std::to_string(a.bytes));
  }
  int actions = 0, polls = 0;
};

}  // namespace

TEST_CASE("runner: first use from roles, pending ops of frees, accounting", "[exec][runner]") {
  Fixture f;
  const int shard = f.buffer(BufferRole::grad_shard, 1000, true);  // 1024 B block
  const int input = f.buffer(BufferRole::input, 512);
  const int grad = f.buffer(BufferRole::activation_grad, 1536);
  const int act = f.buffer(BufferRole::activation, 2048);
  f.alloc(input);
  f.alloc(grad);
  const int op0 = f.launch(plan::OpKind::backward, 1, {input, grad, shard});
  const int op1 = f.launch(plan::OpKind::reduce_scatter, 2, {grad});
  f.free(grad, {op1});
  f.alloc(act);
  const int op2 = f.launch(plan::OpKind::forward, 1, {input, act});
  f.host_wait(op1);
  f.free(act);
  f.free(input);
  (void)op0;
  (void)op2;

  alloc::HostBacking backing;
  alloc::CachingAllocator allocator(backing);
  RecordingBackend backend;
  engine::exec::ScheduleRunner runner(f.graph, f.units, f.s, allocator, backend,
                                      traces::Source::engine_cpu, false);
  runner.allocate_persistent();
  CHECK(runner.persistent_allocated_bytes() == 1024);  // 1000 B rounded to 512 B blocks
  CHECK(backend.calls == std::vector<std::string>{"allocated 0 1024", "zero 1000"});
  backend.calls.clear();
  backend.polls = 0;

  runner.run_actions();
  CHECK(backend.actions == static_cast<int>(f.s.actions.size()));
  CHECK(backend.polls == 6);  // before every alloc and free
  // The input is filled and the gradient zeroed by their first user only;
  // the persistent shard is never initialised by a user.
  REQUIRE(backend.inits.size() == 3);
  CHECK(backend.inits[0] == std::vector<FirstUse>{FirstUse::data, FirstUse::zero, FirstUse::none});
  CHECK(backend.inits[1] == std::vector<FirstUse>{FirstUse::none});
  CHECK(backend.inits[2] == std::vector<FirstUse>{FirstUse::none, FirstUse::none});
  REQUIRE(backend.frees.size() == 3);
  CHECK(backend.frees[0] == std::vector<int>{op1});
  CHECK(backend.frees[1].empty());
  // Live: 1024 -> 1536 (input) -> 3072 (grad) -> 1536 -> 3584 (act, peak) -> 1536 -> 1024.
  CHECK(runner.peak_allocated_bytes() == 3584);
  CHECK(runner.allocated_bytes() == 1024);

  // Recording: every allocation and free; the host wait on the host lane.
  const traces::RankTrace& r = runner.rank_trace();
  REQUIRE(r.memory.size() == 7);
  CHECK(r.memory[0].bytes == 1024);
  CHECK(r.memory.back().allocated == 1024);
  CHECK(r.lanes.size() == 3);
  REQUIRE(r.events.size() == 1);
  CHECK(r.events[0].category == traces::Category::sync);
  CHECK(r.events[0].lane == runner.lane(0));

  runner.record_step(0, 10, 50, [](int op, int64_t* start, int64_t* end) {
    if (op == 1) return false;  // recorded elsewhere (CUPTI)
    *start = 10 + op;
    *end = 20 + op;
    return true;
  });
  CHECK(runner.rank_trace().events.size() == 3);
  REQUIRE(runner.rank_trace().steps.size() == 1);
  CHECK(runner.rank_trace().steps[0].end_ns == 50);
}

TEST_CASE("runner: the backend can ask for zeroing at every allocation", "[exec][runner]") {
  Fixture f;
  const int out = f.buffer(BufferRole::ag_out, 4096);
  f.alloc(out);
  f.launch(plan::OpKind::all_gather, 1, {out});
  f.launch(plan::OpKind::copy_out, 1, {out});
  f.free(out);
  f.alloc(out);  // allocated again: zeroed again by its next first user
  f.launch(plan::OpKind::all_gather, 1, {out});
  f.free(out);
  alloc::HostBacking backing;
  alloc::CachingAllocator allocator(backing);
  RecordingBackend backend;
  engine::exec::ScheduleRunner runner(f.graph, f.units, f.s, allocator, backend,
                                      traces::Source::engine_cuda, false);
  runner.zero_at_alloc(out);
  runner.run_actions();
  REQUIRE(backend.inits.size() == 3);
  CHECK(backend.inits[0] == std::vector<FirstUse>{FirstUse::zero});
  CHECK(backend.inits[1] == std::vector<FirstUse>{FirstUse::none});
  CHECK(backend.inits[2] == std::vector<FirstUse>{FirstUse::zero});
}

TEST_CASE("runner: errors name the rank and the action when asked to", "[exec][runner]") {
  Fixture f;
  const int a = f.buffer(BufferRole::activation, 256);
  f.launch(plan::OpKind::forward, 1, {a});  // never allocated
  alloc::HostBacking backing;
  alloc::CachingAllocator allocator(backing);
  RecordingBackend backend;
  engine::exec::ScheduleRunner labelled(f.graph, f.units, f.s, allocator, backend,
                                        traces::Source::engine_cuda, true);
  CHECK_THROWS_WITH(labelled.run_actions(),
                    "rank 0, op 0 (forward forward, stream compute): op 0 uses buffer 'act' that "
                    "is not allocated");
  engine::exec::ScheduleRunner plain(f.graph, f.units, f.s, allocator, backend,
                                     traces::Source::engine_cpu, false);
  CHECK_THROWS_WITH(plain.run_actions(), "op 0 uses buffer 'act' that is not allocated");
}

TEST_CASE("runner: a transient host buffer and a double allocation are refused", "[exec][runner]") {
  Fixture f;
  const int a = f.buffer(BufferRole::activation, 256);
  f.alloc(a);
  f.alloc(a);
  alloc::HostBacking backing;
  alloc::CachingAllocator allocator(backing);
  RecordingBackend backend;
  engine::exec::ScheduleRunner runner(f.graph, f.units, f.s, allocator, backend,
                                      traces::Source::engine_cpu, false);
  CHECK_THROWS_WITH(runner.run_actions(), "buffer 'act' allocated twice");
  Fixture h;
  const int host = h.buffer(BufferRole::h2d_shard, 256);
  h.s.buffers[static_cast<size_t>(host)].on_host = true;
  h.alloc(host);
  engine::exec::ScheduleRunner runner2(h.graph, h.units, h.s, allocator, backend,
                                       traces::Source::engine_cpu, false);
  CHECK_THROWS_AS(runner2.run_actions(), engine::exec::ExecError);
}
