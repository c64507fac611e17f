// Calls larger than a slot (chunked), the two all_reduce paths, bit-identical
// results run to run, and concurrent collectives on two groups from two
// threads of each rank.
#include <catch2/catch.hpp>

#include "tests/engine/comm/comm_harness.h"

using namespace shardscope::test::comm;

namespace {

constexpr Mode kModes[] = {Mode::threads, Mode::processes};

float contribution(int rank, size_t i) {
  return static_cast<float>(rank * 10) + static_cast<float>(i);
}

// A float in [-1, 1) from (rank, i), reproducible anywhere (splitmix64).
float noise(int rank, size_t i) {
  uint64_t z = (static_cast<uint64_t>(rank) << 40) + i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / static_cast<float>(1ull << 23) - 1.0f;
}

void require_all_ok(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << ": " << results[r].error);
    REQUIRE(results[r].ok);
  }
}

}  // namespace

TEST_CASE("chunked collectives: 1024-byte slots, sizes not a multiple of the chunk (world 3)") {
  // slot 1024 B -> 512 B per step: all_gather 1300 B = 512 + 512 + 276; reduce_scatter
  // 512 / (4 * 3) = 42 floats per step, 301 = 7 * 42 + 7; all_reduce 128 floats per step.
  for (Mode mode : kModes) {
    WorldSpec spec{3};
    spec.slot_bytes = 1024;
    constexpr size_t ag_bytes = 1300, rs_count = 301, ar_count = 1000, bc_bytes = 1500;
    const auto results = run_world(mode, spec, [](Communicator& c) {
      const int r = c.rank();
      std::string ag_in(ag_bytes, '\0'), ag_out(3 * ag_bytes, '\0');
      for (size_t i = 0; i < ag_bytes; ++i) ag_in[i] = static_cast<char>((r * 31 + i) & 0xff);
      c.all_gather(0, ag_in.data(), ag_out.data(), ag_bytes);
      std::vector<float> rs_in(3 * rs_count), rs_out(rs_count);
      for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = contribution(r, i);
      c.reduce_scatter(0, rs_in.data(), rs_out.data(), rs_count, ReduceOp::sum);
      std::vector<float> ar(ar_count);
      for (size_t i = 0; i < ar_count; ++i) ar[i] = contribution(r, i);
      c.all_reduce(0, ar.data(), ar_count, ReduceOp::avg);
      std::string bc(bc_bytes, r == 1 ? 'x' : '\0');
      for (size_t i = 0; r == 1 && i < bc_bytes; ++i) bc[i] = static_cast<char>(i % 251);
      c.broadcast(0, bc.data(), bc_bytes, 1);
      return ag_out + to_bytes(rs_out) + to_bytes(ar) + bc;
    });
    INFO(mode_name(mode));
    require_all_ok(results);
    for (int r = 0; r < 3; ++r) {
      const std::string& d = results[static_cast<size_t>(r)].data;
      REQUIRE(d.size() == 3 * ag_bytes + 4 * (rs_count + ar_count) + bc_bytes);
      for (size_t m = 0; m < 3; ++m)
        for (size_t i = 0; i < ag_bytes; ++i)
          REQUIRE(d[m * ag_bytes + i] == static_cast<char>((m * 31 + i) & 0xff));
      const auto rs = to_floats(d.substr(3 * ag_bytes, 4 * rs_count));
      for (size_t i = 0; i < rs_count; ++i)  // 0 + 10 + 20 + 3 * (r * count + i)
        REQUIRE(rs[i] == 30.0f + 3.0f * static_cast<float>(static_cast<size_t>(r) * rs_count + i));
      const auto ar = to_floats(d.substr(3 * ag_bytes + 4 * rs_count, 4 * ar_count));
      for (size_t i = 0; i < ar_count; ++i) REQUIRE(ar[i] == 10.0f + static_cast<float>(i));
      const std::string bc = d.substr(3 * ag_bytes + 4 * (rs_count + ar_count));
      for (size_t i = 0; i < bc_bytes; ++i) REQUIRE(bc[i] == static_cast<char>(i % 251));
    }
  }
}

TEST_CASE("all_reduce is bit-identical to the ascending-order float sum, run to run (world 3, 4)") {
  // 256 KiB slots: 32768 floats per step. count 70001 = 32768 + 32768 + 4465: the
  // first two steps take the reduce-then-exchange path (>= 64 KiB, >= 3 members),
  // the last the direct path; both must give the same bits as the reference.
  constexpr size_t count = 70001;
  for (int world : {3, 4}) {
    std::vector<float> reference(count);
    for (size_t i = 0; i < count; ++i) {
      float acc = noise(0, i);
      for (int r = 1; r < world; ++r) acc += noise(r, i);
      reference[i] = acc;
    }
    std::vector<std::string> runs;
    for (Mode mode : {Mode::threads, Mode::processes, Mode::threads}) {
      WorldSpec spec{world};
      spec.slot_bytes = 256 << 10;
      const auto results = run_world(mode, spec, [](Communicator& c) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = noise(c.rank(), i);
        c.all_reduce(0, data.data(), count, ReduceOp::sum);
        return to_bytes(data);
      });
      INFO(mode_name(mode) << " world " << world);
      require_all_ok(results);
      for (const auto& r : results) runs.push_back(r.data);
    }
    const std::string expect = to_bytes(reference);
    for (size_t k = 0; k < runs.size(); ++k) {
      INFO("world " << world << " result " << k);
      REQUIRE(runs[k] == expect);
    }
  }
}

TEST_CASE("reduce_scatter avg is bit-identical to (ascending sum) / n for random data (world 4)") {
  constexpr size_t count = 3001;
  constexpr int world = 4;
  for (Mode mode : kModes) {
    WorldSpec spec{world};
    spec.slot_bytes = 4096;  // 2048 B per step: 128 floats of each block
    const auto results = run_world(mode, spec, [](Communicator& c) {
      std::vector<float> in(world * count), out(count);
      for (size_t i = 0; i < in.size(); ++i) in[i] = noise(c.rank(), i);
      c.reduce_scatter(0, in.data(), out.data(), count, ReduceOp::avg);
      return to_bytes(out);
    });
    INFO(mode_name(mode));
    require_all_ok(results);
    for (int m = 0; m < world; ++m) {
      const auto out = to_floats(results[static_cast<size_t>(m)].data);
      for (size_t i = 0; i < count; ++i) {
        const size_t k = static_cast<size_t>(m) * count + i;
        float acc = noise(0, k);
        for (int r = 1; r < world; ++r) acc += noise(r, k);
        REQUIRE(bits(out[i]) == bits(acc / 4.0f));
      }
    }
  }
}

TEST_CASE("concurrent collectives on shard and replica groups from two threads per rank") {
  // World 4, hybrid groups. Thread A of each rank: 150 all_reduces on its shard
  // group; thread B: 150 all_gathers + reduce_scatters on its replica group.
  // Small slots (1 KiB) force many chunked steps to interleave.
  for (Mode mode : kModes) {
    WorldSpec spec{4, hybrid4_groups()};
    spec.slot_bytes = 1024;
    const auto results = run_world(mode, spec, [](Communicator& c) {
      const int r = c.rank();
      std::string err_a, err_b;
      std::thread a([&] {
        try {
          constexpr size_t count = 300;
          for (int it = 0; it < 150 && err_a.empty(); ++it) {
            std::vector<float> d(count);
            for (size_t i = 0; i < count; ++i) d[i] = contribution(r, i) + static_cast<float>(it);
            c.all_reduce(1 + r / 2, d.data(), count, ReduceOp::sum);
            const int s0 = (r / 2) * 2;
            for (size_t i = 0; i < count; ++i)
              if (d[i] !=
                  contribution(s0, i) + contribution(s0 + 1, i) + 2.0f * static_cast<float>(it))
                err_a =
                    "all_reduce iteration " + std::to_string(it) + " element " + std::to_string(i);
          }
        } catch (const std::exception& e) {
          err_a = e.what();
        }
      });
      std::thread b([&] {
        try {
          constexpr size_t count = 200;
          for (int it = 0; it < 150 && err_b.empty(); ++it) {
            std::vector<float> in(count), out(2 * count);
            for (size_t i = 0; i < count; ++i) in[i] = contribution(r, i) - static_cast<float>(it);
            c.all_gather(3 + r % 2, in.data(), out.data(), count * sizeof(float));
            for (size_t m = 0; m < 2; ++m)
              for (size_t i = 0; i < count; ++i)
                if (out[m * count + i] !=
                    contribution(r % 2 + 2 * static_cast<int>(m), i) - static_cast<float>(it))
                  err_b = "all_gather iteration " + std::to_string(it);
            std::vector<float> rs(count / 2);
            c.reduce_scatter(3 + r % 2, in.data(), rs.data(), count / 2, ReduceOp::sum);
            const size_t me = static_cast<size_t>(r / 2);  // my index in the replica group
            for (size_t i = 0; i < count / 2; ++i)
              if (rs[i] != contribution(r % 2, me * (count / 2) + i) +
                               contribution(r % 2 + 2, me * (count / 2) + i) -
                               2.0f * static_cast<float>(it))
                err_b = "reduce_scatter iteration " + std::to_string(it);
          }
        } catch (const std::exception& e) {
          err_b = e.what();
        }
      });
      a.join();
      b.join();
      return "A:" + (err_a.empty() ? std::string("ok") : err_a) +
             " B:" + (err_b.empty() ? std::string("ok") : err_b);
    });
    INFO(mode_name(mode));
    require_all_ok(results);
    for (const auto& r : results) REQUIRE(r.data == "A:ok B:ok");
  }
}
