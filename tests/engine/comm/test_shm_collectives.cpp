// Collectives of the shared-memory communicator against hand-computed results,
// for world sizes 1..4, with ranks as threads and as processes. Rank r
// contributes element i = r * 10 + i (exact small integers in float), so a sum
// over n members is 10 * n(n-1)/2 + n * i exactly.
#include <sys/mman.h>

#include <new>

#include <catch2/catch.hpp>

#include "tests/engine/comm/comm_harness.h"

using namespace shardscope::test::comm;

namespace {

constexpr Mode kModes[] = {Mode::threads, Mode::processes};

float contribution(int rank, size_t i) {
  return static_cast<float>(rank * 10) + static_cast<float>(i);
}

std::vector<float> contributions(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = contribution(rank, i);
  return v;
}

// Sum over ranks 0..n-1 of contribution(r, i): 10 * n(n-1)/2 + n * i.
float sum_closed_form(int n, size_t i) {
  return static_cast<float>(5 * n * (n - 1)) + static_cast<float>(n) * static_cast<float>(i);
}

void require_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].error);
    REQUIRE(results[r].ok);
  }
}

}  // namespace

TEST_CASE("all_gather places member m's bytes at offset m * bytes_per_rank (world 1..4)") {
  for (Mode mode : kModes) {
    for (int world = 1; world <= 4; ++world) {
      constexpr size_t count = 7;
      const auto results = run_world(mode, {world}, [](Communicator& c) {
        const std::vector<float> in = contributions(c.rank(), count);
        std::vector<float> out(count * static_cast<size_t>(c.world_size()), -1.0f);
        c.all_gather(0, in.data(), out.data(), count * sizeof(float));
        return to_bytes(out);
      });
      INFO(mode_name(mode) << " world " << world);
      require_all_ok(results);
      for (int r = 0; r < world; ++r) {
        const auto out = to_floats(results[static_cast<size_t>(r)].data);
        REQUIRE(out.size() == count * static_cast<size_t>(world));
        for (int m = 0; m < world; ++m)
          for (size_t i = 0; i < count; ++i)
            REQUIRE(out[static_cast<size_t>(m) * count + i] == contribution(m, i));
      }
    }
  }
}

TEST_CASE("all_gather in place: in aliases the caller's own block of out") {
  for (Mode mode : kModes) {
    constexpr size_t bytes = 13;  // not a multiple of 4 or 8
    const auto results = run_world(mode, {3}, [](Communicator& c) {
      std::string out(bytes * 3, '\0');
      for (size_t i = 0; i < bytes; ++i)
        out[static_cast<size_t>(c.rank()) * bytes + i] = static_cast<char>('a' + c.rank() + i);
      c.all_gather(0, out.data() + static_cast<size_t>(c.rank()) * bytes, out.data(), bytes);
      return out;
    });
    INFO(mode_name(mode));
    require_all_ok(results);
    for (const auto& r : results)
      for (size_t m = 0; m < 3; ++m)
        for (size_t i = 0; i < bytes; ++i)
          REQUIRE(r.data[m * bytes + i] == static_cast<char>('a' + m + i));
  }
}

TEST_CASE("reduce_scatter sum and avg: member m gets block m reduced over members (world 1..4)") {
  for (Mode mode : kModes) {
    for (int world = 1; world <= 4; ++world) {
      constexpr size_t count = 5;
      const auto results = run_world(mode, {world}, [](Communicator& c) {
        const size_t n = static_cast<size_t>(c.world_size());
        const std::vector<float> in = contributions(c.rank(), n * count);
        std::vector<float> sum(count, -1.0f), avg(count, -1.0f);
        c.reduce_scatter(0, in.data(), sum.data(), count, ReduceOp::sum);
        c.reduce_scatter(0, in.data(), avg.data(), count, ReduceOp::avg);
        sum.insert(sum.end(), avg.begin(), avg.end());
        return to_bytes(sum);
      });
      INFO(mode_name(mode) << " world " << world);
      require_all_ok(results);
      for (int m = 0; m < world; ++m) {
        const auto out = to_floats(results[static_cast<size_t>(m)].data);
        REQUIRE(out.size() == 2 * count);
        for (size_t i = 0; i < count; ++i) {
          const float expect = sum_closed_form(world, static_cast<size_t>(m) * count + i);
          REQUIRE(out[i] == expect);
          REQUIRE(out[count + i] == expect / static_cast<float>(world));
        }
      }
    }
  }
}

TEST_CASE("all_reduce sum and avg equal the closed form on every member (world 1..4)") {
  for (Mode mode : kModes) {
    for (int world = 1; world <= 4; ++world) {
      constexpr size_t count = 9;
      const auto results = run_world(mode, {world}, [](Communicator& c) {
        std::vector<float> sum = contributions(c.rank(), count);
        std::vector<float> avg = sum;
        c.all_reduce(0, sum.data(), count, ReduceOp::sum);
        c.all_reduce(0, avg.data(), count, ReduceOp::avg);
        sum.insert(sum.end(), avg.begin(), avg.end());
        return to_bytes(sum);
      });
      INFO(mode_name(mode) << " world " << world);
      require_all_ok(results);
      for (const auto& r : results) {
        const auto out = to_floats(r.data);
        for (size_t i = 0; i < count; ++i) {
          REQUIRE(out[i] == sum_closed_form(world, i));
          // avg = 5 (n - 1) + i exactly
          REQUIRE(out[count + i] == static_cast<float>(5 * (world - 1)) + static_cast<float>(i));
        }
      }
    }
  }
}

TEST_CASE("all_reduce adds in ascending member order in float: 3 members (1, 1e8, -1e8) give 0") {
  // (1 + 1e8) rounds to 1e8 in float (spacing 8), so ((1 + 1e8) - 1e8) = 0,
  // whereas 1 + (1e8 - 1e8) would be 1. Two members: a + b exactly.
  for (Mode mode : kModes) {
    const auto results = run_world(mode, {3}, [](Communicator& c) {
      const float first[3] = {1.0f, 1e8f, -1e8f}, second[3] = {0.1f, 0.2f, 0.3f};
      std::vector<float> data{first[c.rank()], second[c.rank()]};
      c.all_reduce(0, data.data(), data.size(), ReduceOp::sum);
      return to_bytes(data);
    });
    INFO(mode_name(mode));
    require_all_ok(results);
    for (const auto& r : results) {
      const auto out = to_floats(r.data);
      REQUIRE(out[0] == 0.0f);
      REQUIRE(bits(out[1]) == bits((0.1f + 0.2f) + 0.3f));
    }
  }
}

TEST_CASE("broadcast copies the root's bytes to every member, root not 0 (world 1..4)") {
  for (Mode mode : kModes) {
    for (int world = 1; world <= 4; ++world) {
      constexpr size_t bytes = 1001;
      const auto results = run_world(mode, {world}, [](Communicator& c) {
        const int root = c.world_size() - 1;
        std::string data(bytes, '\0');
        if (c.rank() == root)
          for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>((i * 7 + 3) & 0xff);
        c.broadcast(0, data.data(), bytes, root);
        return data;
      });
      INFO(mode_name(mode) << " world " << world);
      require_all_ok(results);
      for (const auto& r : results) {
        REQUIRE(r.data.size() == bytes);
        for (size_t i = 0; i < bytes; ++i)
          REQUIRE(r.data[i] == static_cast<char>((i * 7 + 3) & 0xff));
      }
    }
  }
}

TEST_CASE("barrier: every member's write before it is visible to all after it") {
  for (Mode mode : kModes) {
    constexpr int world = 4;
    // A shared anonymous mapping, inherited by forked children.
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    auto* flags = static_cast<std::atomic<int>*>(p);
    for (int i = 0; i < world * 8; ++i) new (&flags[i]) std::atomic<int>(0);
    const auto results = run_world(mode, {world}, [flags](Communicator& c) {
      std::string seen;
      for (int round = 0; round < 8; ++round) {
        // Rank 3 arrives late so the others really wait.
        if (c.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        flags[round * world + c.rank()].store(1);
        c.barrier(0);
        int n = 0;
        for (int r = 0; r < world; ++r) n += flags[round * world + r].load();
        seen += std::to_string(n);
      }
      return seen;
    });
    munmap(p, 4096);
    INFO(mode_name(mode));
    require_all_ok(results);
    for (const auto& r : results) REQUIRE(r.data == "44444444");
  }
}

TEST_CASE("sub-groups of hybrid sharding (world 4: shards {0,1} {2,3}, replicas {0,2} {1,3})") {
  for (Mode mode : kModes) {
    WorldSpec spec{4, hybrid4_groups()};
    constexpr size_t count = 6;
    const auto results = run_world(mode, spec, [](Communicator& c) {
      const int r = c.rank();
      const int shard = 1 + r / 2, replica = 3 + r % 2;
      // all_reduce within my shard: members {2s, 2s+1}.
      std::vector<float> a = contributions(r, count);
      c.all_reduce(shard, a.data(), count, ReduceOp::sum);
      // all_gather across my replica group: members {r%2, r%2+2}.
      std::vector<float> in = contributions(r, count), g(2 * count);
      c.all_gather(replica, in.data(), g.data(), count * sizeof(float));
      // reduce_scatter (avg) over the world.
      std::vector<float> rs_in = contributions(r, 4 * count), rs(count);
      c.reduce_scatter(0, rs_in.data(), rs.data(), count, ReduceOp::avg);
      a.insert(a.end(), g.begin(), g.end());
      a.insert(a.end(), rs.begin(), rs.end());
      return to_bytes(a);
    });
    INFO(mode_name(mode));
    require_all_ok(results);
    for (int r = 0; r < 4; ++r) {
      const auto out = to_floats(results[static_cast<size_t>(r)].data);
      REQUIRE(out.size() == 4 * count);
      const int s0 = (r / 2) * 2;  // first member of my shard
      for (size_t i = 0; i < count; ++i) {
        REQUIRE(out[i] == contribution(s0, i) + contribution(s0 + 1, i));
        REQUIRE(out[count + i] == contribution(r % 2, i));
        REQUIRE(out[2 * count + i] == contribution(r % 2 + 2, i));
        REQUIRE(out[3 * count + i] ==
                sum_closed_form(4, static_cast<size_t>(r) * count + i) / 4.0f);
      }
    }
  }
}
