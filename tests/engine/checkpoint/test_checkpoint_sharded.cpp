// Sharded checkpoints: round trips over 1, 2 and 3 ranks in both FSDP splits,
// resharding onto other world sizes, and every kind of damage refused.
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/shard_format.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/engine/checkpoint/sharded_test_model.h"
#include "tests/temp_dir.h"

using namespace shardscope::engine::checkpoint;
using shardscope::test::TempDir;
namespace t = shardscope::test;
using nlohmann::json;

namespace {

const Metadata kMeta{{"step", "42"}, {"world", "set by the test"}};

void check_equal_to_model(const Reader& r, const std::vector<t::ModelTensor>& model) {
  REQUIRE(r.names().size() == model.size());
  for (const t::ModelTensor& m : model) {
    INFO(m.name);
    CHECK(r.shape(m.name) == m.shape);
    CHECK(r.read_all(m.name) == m.values);
  }
}

json load_index(const std::string& dir) {
  return json::parse(t::read_bytes(dir + "/index.json"));
}

// Writes `index` re-sealed with a valid checksum: a writer with a bug, not damage.
void write_sealed_index(const std::string& dir, json index) {
  index["crc32c"] = crc32c_hex(index_checksum(index, "test"));
  t::write_bytes(dir + "/index.json", index.dump(1));
}

}  // namespace

TEST_CASE("sharded: dim-0 split round trip on 1, 2 and 3 ranks, with padding and empty slices") {
  const int world = GENERATE(1, 2, 3);
  INFO("world " << world);
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const auto model = t::small_model();
  const auto per_rank = t::split_dim0(model, world);
  t::write_sharded(d, model, per_rank, kMeta);
  for (int r = 0; r < world; ++r)
    CHECK(std::filesystem::exists(d + "/" + shard_file_name(r, world)));
  CHECK(t::temp_files_in(d) == 0);

  const Reader reader = Reader::open(d);
  CHECK(reader.metadata() == kMeta);
  check_equal_to_model(reader, model);
  // 5 rows in ceil(5/world)-row chunks: pieces = ranks holding rows.
  const size_t expected_pieces[] = {0, 1, 2, 3};
  CHECK(reader.info("h.0.attn.weight").pieces.size() == expected_pieces[world]);
  CHECK(reader.info("h.0.attn.bias").pieces.size() == 1);  // ranks > 0 hold nothing
  CHECK(reader.info("empty").pieces.empty());
  CHECK(reader.files().size() == static_cast<size_t>(world));

  // The index records the padding: on 3 ranks the last holds 1 of 2 rows (3 padded).
  const json index = load_index(d);
  CHECK(index["world"] == world);
  if (world == 3) {
    CHECK(index["ranks"][2]["slices"][0]["begin"] == 12);
    CHECK(index["ranks"][2]["slices"][0]["end"] == 15);
    CHECK(index["ranks"][2]["slices"][0]["padding"] == 3);
    CHECK(index["ranks"][1]["slices"][1]["begin"] == 1);  // bias: empty, padded by 1
    CHECK(index["ranks"][1]["slices"][1]["end"] == 1);
    CHECK(index["ranks"][1]["slices"][1]["padding"] == 1);
  }
  // Offsets follow the shard layout: the first slice's data right after the table.
  const std::string shard0 = t::read_bytes(d + "/" + shard_file_name(0, world));
  const uint64_t first = index["ranks"][0]["slices"][0]["offset"];
  REQUIRE(first + 4 <= shard0.size());
  float v0 = 0;
  std::memcpy(&v0, shard0.data() + first, 4);
  CHECK(v0 == model[0].values[0]);
  CHECK(index["ranks"][0]["file_bytes"] == shard0.size());
}

TEST_CASE("sharded: flat-parameter split round trip, tensors spanning rank boundaries") {
  const int world = GENERATE(1, 2, 3);
  INFO("world " << world);
  TempDir dir("ckpt");
  const auto model = t::small_model();
  const auto per_rank = t::split_flat(model, world);
  t::write_sharded(dir.path.string(), model, per_rank, kMeta);
  const Reader reader = Reader::open(dir.path.string() + "/index.json");
  check_equal_to_model(reader, model);
  // 15 + 1 + 0 + 1 + 15 = 32 elements; on 3 ranks 11 per rank: the first weight lies
  // in [0, 15) = rank 0 [0, 11) + rank 1 [11, 15).
  if (world == 3) {
    const auto& pieces = reader.info("h.0.attn.weight").pieces;
    REQUIRE(pieces.size() == 2);
    CHECK(pieces[0].begin == 0);
    CHECK(pieces[0].end == 11);
    CHECK(pieces[1].begin == 11);
    CHECK(pieces[1].end == 15);
    CHECK(load_index(dir.path.string())["ranks"][2]["slices"][4]["padding"] == 1);  // 33 - 32
  }
}

TEST_CASE("sharded: resharding a 3-rank checkpoint onto 1, 2 and 4 ranks reads the same values") {
  TempDir dir("ckpt");
  const auto model = t::small_model();
  t::write_sharded(dir.path.string(), model, t::split_flat(model, 3), kMeta);
  const Reader reader = Reader::open(dir.path.string());
  for (int target : {1, 2, 4}) {
    INFO("target world " << target);
    for (const auto& rank_entries : t::split_dim0(model, target)) {
      for (const IndexEntry& e : rank_entries) {
        const auto& m = *std::find_if(model.begin(), model.end(),
                                      [&](const t::ModelTensor& x) { return x.name == e.name; });
        std::vector<float> out(static_cast<size_t>(e.end - e.begin));
        reader.read(e.name, e.begin, e.end, out.data());
        CHECK(out == std::vector<float>(m.values.begin() + e.begin, m.values.begin() + e.end));
      }
    }
  }
  // A range crossing two ranks' files: elements [9, 13) of the first weight live in
  // rank 0 [0, 11) and rank 1 [11, 15).
  std::vector<float> out(4);
  reader.read("h.0.attn.weight", 9, 13, out.data());
  CHECK(out == std::vector<float>(model[0].values.begin() + 9, model[0].values.begin() + 13));
}

TEST_CASE("sharded: truncated, bit-flipped or missing shard files are refused naming the file") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const auto model = t::small_model();
  t::write_sharded(d, model, t::split_dim0(model, 2), kMeta);
  const std::string shard = d + "/" + shard_file_name(1, 2);
  const std::string good = t::read_bytes(shard);
  REQUIRE(good.size() > 100);

  for (size_t size : {size_t{0}, size_t{7}, size_t{64}, size_t{70}, good.size() / 2,
                      good.size() - 8, good.size() - 1}) {
    INFO("truncated to " << size);
    t::write_bytes(shard, good.substr(0, size));
    t::require_refused(d, shard, "(truncated)");
  }
  const uint64_t data_at = load_index(d)["ranks"][1]["slices"][0]["offset"];
  for (size_t at : {size_t{3}, size_t{13}, size_t{30}, size_t{70}, size_t{data_at},
                    size_t{data_at + 5}, good.size() - 9, good.size() - 6}) {
    INFO("flipped byte " << at);
    t::write_bytes(shard, good);
    t::flip_byte(shard, at, 0x04);
    t::require_refused(d, shard, "checksum mismatch");
  }
  t::write_bytes(shard, good);
  t::flip_byte(shard, good.size() - 1);
  t::require_refused(d, shard, "end marker missing");
  std::filesystem::remove(shard);
  t::require_refused(d, "shard-1-of-2.bin", "shard file missing or unreadable");
  t::write_bytes(shard, good);
  CHECK(Reader::open(d).read_all("h.0.attn.weight") == model[0].values);
}

TEST_CASE("sharded: damaged or inconsistent index.json is refused naming it") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const std::string index_path = d + "/index.json";
  const auto model = t::small_model();
  t::write_sharded(d, model, t::split_dim0(model, 2), kMeta);
  const std::string good = t::read_bytes(index_path);
  const json index = json::parse(good);

  t::write_bytes(index_path, good.substr(0, good.size() / 2));
  t::require_refused(d, index_path, "not valid JSON");

  json edited = index;
  edited["ranks"][1]["slices"][0]["end"] = 11;
  t::write_bytes(index_path, edited.dump(1));
  t::require_refused(d, index_path, "checksum mismatch");

  edited = index;
  edited["world"] = 3;
  write_sealed_index(d, edited);
  t::require_refused(d, index_path, "lists 2 ranks but world is 3");

  edited = index;
  edited["version"] = 2;
  write_sealed_index(d, edited);
  t::require_refused(d, index_path, "index version 2 is not supported");

  edited = index;
  edited["ranks"][1]["slices"][0]["offset"] = 8;
  write_sealed_index(d, edited);
  t::require_refused(d, index_path, "disagrees with the layout");

  edited = index;
  edited["metadata"]["step"] = "43";  // files of another save
  write_sealed_index(d, edited);
  t::require_refused(d, "shard-0-of-2.bin", "metadata differs from index.json's");
}

TEST_CASE("sharded: shard files claiming another world or rank are refused") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const auto model = t::small_model();
  const auto per_rank = t::split_dim0(model, 2);
  // The same slices written as ranks of world 3, then named as world 2's files.
  for (int r = 0; r < 2; ++r) {
    std::vector<Slice> slices;
    for (const IndexEntry& e : per_rank[static_cast<size_t>(r)]) {
      const auto& m = *std::find_if(model.begin(), model.end(),
                                    [&](const t::ModelTensor& x) { return x.name == e.name; });
      slices.push_back({e.name, e.shape, e.begin, e.end, e.padding, m.values.data() + e.begin});
    }
    write_shard_file(d, r, 3, slices, kMeta);
    std::filesystem::rename(d + "/" + shard_file_name(r, 3), d + "/" + shard_file_name(r, 2));
  }
  write_shard_index(d, 2, per_rank, kMeta);
  t::require_refused(d, "shard-0-of-2.bin",
                     "header says rank 0 of world 3, index.json says rank 0 of world 2");

  // Rank 0's file where rank 1's should be.
  t::write_sharded(d, model, per_rank, kMeta);
  std::filesystem::copy_file(d + "/" + shard_file_name(0, 2), d + "/" + shard_file_name(1, 2),
                             std::filesystem::copy_options::overwrite_existing);
  t::require_refused(d, "shard-1-of-2.bin", "");
}

TEST_CASE("sharded: a shard table that differs from the index names the slice and field") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const std::vector<float> a = t::test_values(1, 4), b = t::test_values(2, 4);
  // Same sizes, slices swapped: the index lists a then b, the file b then a.
  write_shard_file(d, 0, 1, {{"b", {4}, 0, 4, 0, b.data()}, {"a", {4}, 0, 4, 0, a.data()}}, kMeta);
  write_shard_index(d, 1, {{{"a", {4}, 0, 4, 0}, {"b", {4}, 0, 4, 0}}}, kMeta);
  t::require_refused(d, "shard-0-of-1.bin", "slice 0 'a': name is \"b\"");
}

TEST_CASE("sharded: overlapping, missing or mis-shaped ranges are refused by writer and reader") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const std::vector<float> v = t::test_values(1, 15);
  struct Case {
    std::vector<std::vector<IndexEntry>> per_rank;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {{{{"w", {5, 3}, 0, 8, 0}}, {{"w", {5, 3}, 6, 15, 0}}},
       "tensor 'w': elements [6, 15) on rank 1 overlap elements up to 8 on rank 0"},
      {{{{"w", {5, 3}, 0, 6, 0}}, {{"w", {5, 3}, 8, 15, 0}}},
       "tensor 'w': elements [6, 8) are held by no rank"},
      {{{{"w", {5, 3}, 0, 6, 0}}, {{"w", {5, 3}, 6, 12, 0}}},
       "tensor 'w': elements [12, 15) are held by no rank"},
      {{{{"w", {5, 3}, 0, 6, 0}}, {{"w", {15}, 6, 15, 0}}},
       "tensor 'w' has shape [15] on rank 1 but [5, 3] on rank 0"},
  };
  for (const Case& c : cases) {
    INFO(c.problem);
    for (size_t r = 0; r < 2; ++r) {
      const IndexEntry& e = c.per_rank[r][0];
      write_shard_file(d, static_cast<int>(r), 2,
                       {{e.name, e.shape, e.begin, e.end, 0, v.data() + e.begin}}, kMeta);
    }
    CHECK_THROWS_WITH(write_shard_index(d, 2, c.per_rank, kMeta), Catch::Contains(c.problem));
    write_sealed_index(d, build_index_json(2, c.per_rank, kMeta, "test"));
    t::require_refused(d, d + "/index.json", c.problem);
  }
}

TEST_CASE("sharded: writers refuse bad ranks, ranges and data") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const std::vector<float> v = t::test_values(1, 4);
  CHECK_THROWS_WITH(write_shard_file(d, 2, 2, {}, {}), Catch::Contains("rank 2 is not in [0, 2)"));
  CHECK_THROWS_WITH(write_shard_file(d, 0, 0, {}, {}), Catch::Contains("world 0 is not in"));
  CHECK_THROWS_WITH(write_shard_file(d, 0, 1, {{"a", {4}, 3, 5, 0, v.data()}}, {}),
                    Catch::Contains("range [3, 5) is not within [0, 4)"));
  CHECK_THROWS_WITH(write_shard_file(d, 0, 1, {{"a", {4}, 0, 4, -1, v.data()}}, {}),
                    Catch::Contains("padding -1"));
  CHECK_THROWS_WITH(write_shard_file(d, 0, 1, {{"a", {4}, 0, 4, 0, nullptr}}, {}),
                    Catch::Contains("data is null"));
  CHECK_THROWS_WITH(
      write_shard_file(d, 0, 1, {{"a", {4}, 0, 2, 0, v.data()}, {"a", {4}, 2, 4, 0, v.data()}}, {}),
      Catch::Contains("name appears twice"));
  CHECK_THROWS_WITH(write_shard_index(d, 2, {{{"a", {4}, 0, 4, 0}}}, {}),
                    Catch::Contains("per_rank lists 1 ranks, world is 2"));
  CHECK(std::filesystem::is_empty(d));
  t::require_refused(d, d, "neither index.json nor model.safetensors");
  t::require_refused(d + "/nothing", d + "/nothing", "No such file");
}
