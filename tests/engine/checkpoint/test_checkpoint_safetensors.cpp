// Consolidated checkpoints: the safetensors writer against a hand-computed byte
// layout, round trips, and every kind of damage refused with the file named.
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/crc32c.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/temp_dir.h"

using namespace shardscope::engine::checkpoint;
using shardscope::test::TempDir;
namespace t = shardscope::test;

namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}
std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}
// A safetensors file as another tool would write it: no shardscope checksum keys.
std::string foreign_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// The two-tensor file whose bytes the exact-layout test computes by hand.
void write_tiny(const std::string& path) {
  const float a = 0.5f;
  const float b[2] = {1.0f, -2.0f};
  write_safetensors(path, {{"b", {2}, b}, {"a", {}, &a}}, {{"step", "7"}});
}

}  // namespace

TEST_CASE("crc32c: check value of 123456789 is e3069283, chunked equals whole") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  std::string big(1000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  const uint32_t whole = crc32c(big.data(), big.size());
  for (size_t split : {size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{999}})
    CHECK(crc32c(big.data() + split, big.size() - split, crc32c(big.data(), split)) == whole);
  CHECK(crc32c_hex(0x0000ab01u) == "0000ab01");
  uint32_t v = 0;
  CHECK(parse_crc32c_hex("E3069283", &v));
  CHECK(v == 0xE3069283u);
  CHECK_FALSE(parse_crc32c_hex("e306928", &v));
  CHECK_FALSE(parse_crc32c_hex("e306928g", &v));
}

TEST_CASE("safetensors: bytes of a tiny file equal the hand-computed layout") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "tiny.safetensors").string();
  write_tiny(path);
  // Header computed by hand: sorted names, offsets from the data section start, the
  // data CRC-32C over 0.5f 1.0f -2.0f (00 00 00 3f 00 00 80 3f 00 00 00 c0) = ed717df2,
  // the header CRC-32C over the length and header with its own value zeroed = b1499083;
  // 209 JSON bytes padded with 7 spaces to 216.
  const std::string header =
      "{\"__metadata__\":{\"shardscope.data_crc32c\":\"ed717df2\","
      "\"shardscope.header_crc32c\":\"b1499083\",\"step\":\"7\"},"
      "\"a\":{\"data_offsets\":[0,4],\"dtype\":\"F32\",\"shape\":[]},"
      "\"b\":{\"data_offsets\":[4,12],\"dtype\":\"F32\",\"shape\":[2]}}       ";
  REQUIRE(header.size() == 216);
  const std::string expected = le64(216) + header + floats({0.5f, 1.0f, -2.0f});
  CHECK(t::read_bytes(path) == expected);
  CHECK(t::temp_files_in(dir.path.string()) == 0);

  const Reader r = Reader::open(path);
  CHECK(r.names() == std::vector<std::string>{"a", "b"});
  CHECK(r.metadata() == Metadata{{"step", "7"}});
  CHECK(r.shape("a").empty());
  CHECK(r.read_all("a") == std::vector<float>{0.5f});
  CHECK(r.read_all("b") == std::vector<float>{1.0f, -2.0f});
}

TEST_CASE("safetensors: round trip of weights, a scalar and an empty tensor, with ranges") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "model.safetensors").string();
  const std::vector<float> wte = t::test_values(1, 12 * 8), ln = t::test_values(2, 8),
                           scalar = t::test_values(3, 1);
  const Metadata meta{{"step", "100"}, {"model", "gpt2-tiny"}, {"policy", "{\"shard\":\"full\"}"}};
  write_safetensors(path,
                    {{"transformer.wte.weight", {12, 8}, wte.data()},
                     {"transformer.ln_f.weight", {8}, ln.data()},
                     {"loss_scale", {}, scalar.data()},
                     {"empty", {0, 8}, nullptr}},
                    meta);
  // Directory form finds model.safetensors.
  for (const std::string& open_path : {path, dir.path.string()}) {
    const Reader r = Reader::open(open_path);
    CHECK(r.metadata() == meta);
    CHECK(r.names().size() == 4);
    CHECK(r.shape("transformer.wte.weight") == std::vector<int64_t>{12, 8});
    CHECK(r.shape("empty") == std::vector<int64_t>{0, 8});
    CHECK(r.read_all("transformer.wte.weight") == wte);
    CHECK(r.read_all("transformer.ln_f.weight") == ln);
    CHECK(r.read_all("loss_scale") == scalar);
    CHECK(r.read_all("empty").empty());
    std::vector<float> part(13);
    r.read("transformer.wte.weight", 40, 53, part.data());
    CHECK(part == std::vector<float>(wte.begin() + 40, wte.begin() + 53));
    CHECK_FALSE(r.has("missing"));
    CHECK_THROWS_WITH(r.read("missing", 0, 1, part.data()), Catch::Contains("no tensor 'missing'"));
    CHECK_THROWS_WITH(r.read("transformer.ln_f.weight", 4, 9, part.data()),
                      Catch::Contains("[4, 9) is not within [0, 8)"));
    CHECK_THROWS_WITH(r.read("transformer.ln_f.weight", 5, 4, part.data()),
                      Catch::Contains("is not within"));
  }
}

TEST_CASE("safetensors: truncation at every length is refused naming the file") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "tiny.safetensors").string();
  write_tiny(path);
  const std::string good = t::read_bytes(path);
  REQUIRE(good.size() == 8 + 216 + 12);
  for (size_t size = 0; size < good.size(); ++size) {
    INFO("truncated to " << size << " bytes");
    t::write_bytes(path, good.substr(0, size));
    t::require_refused(path, path,
                       size < 8     ? "shorter than the 8-byte header length"
                       : size < 224 ? "runs past the end"
                                    : "(truncated)");
  }
  t::write_bytes(path, good + "x");
  t::require_refused(path, path, "(trailing bytes)");
}

TEST_CASE("safetensors: every bit flip in the length or header is refused naming the file") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "tiny.safetensors").string();
  write_tiny(path);
  const std::string good = t::read_bytes(path);
  int checksum_refusals = 0;
  for (size_t at = 0; at < 8 + 216; ++at) {
    for (unsigned char mask : {0x01, 0x80}) {
      INFO("byte " << at << " xor " << int{mask});
      t::write_bytes(path, good);
      t::flip_byte(path, at, mask);
      t::require_refused(path, path, "");
      try {
        Reader::open(path);
      } catch (const CheckpointError& e) {
        checksum_refusals +=
            std::string(e.what()).find("header checksum mismatch") != std::string::npos;
      }
    }
  }
  // Flips that keep the JSON valid (a digit of an offset, a letter of a name) are
  // caught by the header checksum: at least the 2 x 2 flips of the name letters.
  CHECK(checksum_refusals >= 4);
}

TEST_CASE("safetensors: a flipped data byte is a data checksum mismatch") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "tiny.safetensors").string();
  write_tiny(path);
  const std::string good = t::read_bytes(path);
  for (size_t at = 224; at < good.size(); ++at) {
    INFO("data byte " << at);
    t::write_bytes(path, good);
    t::flip_byte(path, at, 0x10);
    t::require_refused(path, path, "data checksum mismatch");
  }
}

TEST_CASE("safetensors: F16 tensor refused naming the tensor and its dtype") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "half.safetensors").string();
  t::write_bytes(path,
                 foreign_file("{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
                              std::string(4, '\0')));
  t::require_refused(path, path, "tensor 'h': dtype F16 is not supported");
}

TEST_CASE("safetensors: a file from another tool (no checksum keys, unsorted, unpadded) reads") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "foreign.safetensors").string();
  t::write_bytes(path,
                 foreign_file("{\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                              "\"__metadata__\":{\"format\":\"pt\"},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                              floats({3.5f, -1.0f, 0.25f})));
  const Reader r = Reader::open(path);
  CHECK(r.metadata() == Metadata{{"format", "pt"}});
  CHECK(r.read_all("z") == std::vector<float>{3.5f});
  CHECK(r.read_all("a") == std::vector<float>{-1.0f, 0.25f});
}

TEST_CASE("safetensors: malformed headers are refused with the problem named") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "bad.safetensors").string();
  const std::string data = floats({1.0f, 2.0f, 3.0f});
  struct Case {
    std::string file, problem;
  };
  const std::vector<Case> cases = {
      {le64(uint64_t{1} << 62) + "{}", "exceeds the limit"},
      {le64(2) + "[]", "does not start with '{'"},
      {foreign_file("{\"a\":", ""), "not valid JSON"},
      {foreign_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    data),
       "overlaps 'a'"},
      {foreign_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                    data),
       "(gap)"},
      {foreign_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", data),
       "needs 8"},
      {foreign_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,12]}}", data),
       "negative dimension"},
      {foreign_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12],\"x\":1}}",
                    data),
       "unknown key 'x'"},
      {foreign_file("{\"__metadata__\":{\"k\":1}}", ""), "'k': expected a string"},
      {foreign_file("{\"__metadata__\":{\"shardscope.data_crc32c\":\"00000000\"}}", ""),
       "but not shardscope.header_crc32c"},
  };
  for (const Case& c : cases) {
    INFO(c.problem);
    t::write_bytes(path, c.file);
    t::require_refused(path, path, c.problem);
  }
}

TEST_CASE("safetensors: the writer refuses what it cannot write faithfully") {
  TempDir dir("ckpt");
  const std::string path = (dir.path / "w.safetensors").string();
  const float x[2] = {1, 2};
  CHECK_THROWS_WITH(write_safetensors(path, {{"a", {2}, x}, {"a", {2}, x}}, {}),
                    Catch::Contains("tensor 'a': name appears twice"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"a", {2}, nullptr}}, {}),
                    Catch::Contains("data is null"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"a", {-2}, x}}, {}),
                    Catch::Contains("negative dimension"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"__metadata__", {2}, x}}, {}),
                    Catch::Contains("reserved"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"a", {2}, x}}, {{"shardscope.data_crc32c", "0"}}),
                    Catch::Contains("'shardscope.data_crc32c' is reserved"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"a", {2}, x}}, {{"bad", "\xff"}}),
                    Catch::Contains("cannot encode as JSON"));
  CHECK(std::filesystem::is_empty(dir.path));  // nothing written, no temporary left
}
