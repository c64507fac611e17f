// The sharded checkpoint's layout, shared by the shard-file writer, the index writer
// and the reader so that they cannot disagree.
//
// shard-<rank>-of-<world>.bin, all integers little-endian:
//   [0, 64)     fixed header: magic "SSCKSHRD", u32 version, u32 rank, u32 world,
//               u32 zero, u64 slice count, u64 table bytes, u64 data bytes,
//               u64 metadata bytes, u64 zero
//   table       JSON array, one object per slice in the order given:
//               {"name", "shape", "begin", "end", "padding", "data_offsets": [b, e]}
//               ([b, e): bytes in the data section), space-padded to a multiple of 8
//   data        each slice's end - begin fp32 values, contiguous, in table order
//   metadata    JSON object string -> string (the same as the index's)
//   footer      u32 CRC-32C of every byte before the footer, magic "SEND"
// index.json: {"format": "shardscope-sharded", "version": 1, "world", "metadata",
//   "ranks": [{"rank", "file", "file_bytes", "slices": [{"name", "shape", "begin",
//   "end", "padding", "offset"}]}], "crc32c"}, offset = absolute file offset of the
//   slice's first element; crc32c = CRC-32C of dump() of the object without "crc32c".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"

namespace shardscope::engine::checkpoint {

inline constexpr char kShardMagic[8] = {'S', 'S', 'C', 'K', 'S', 'H', 'R', 'D'};
inline constexpr char kShardEndMagic[4] = {'S', 'E', 'N', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 64;
inline constexpr uint64_t kShardFooterBytes = 8;
inline constexpr const char* kIndexFormat = "shardscope-sharded";
inline constexpr int kIndexVersion = 1;
inline constexpr int kMaxWorld = 1 << 20;
inline constexpr uint64_t kMaxDataBytes = uint64_t{1} << 62;  // one shard file's data section

struct ShardHeader {
  uint32_t version = kShardVersion, rank = 0, world = 0;
  uint64_t slice_count = 0, table_bytes = 0, data_bytes = 0, metadata_bytes = 0;
};
void encode_shard_header(const ShardHeader& h, unsigned char out[kShardHeaderBytes]);
// Checks the magic, version and zero fields; `file` names the file in errors.
ShardHeader decode_shard_header(const unsigned char in[kShardHeaderBytes], const std::string& file);

// Byte layout of one shard file, a function of its slices and metadata only.
struct ShardLayout {
  std::string table;         // JSON table, space-padded to a multiple of 8
  std::string metadata;      // JSON metadata section
  uint64_t data_offset = 0;  // absolute offset of the data section
  uint64_t data_bytes = 0;
  std::vector<uint64_t> offsets;  // absolute offset of each slice's first element
  uint64_t file_bytes = 0;        // whole file, footer included
};
ShardLayout layout_shard(const std::vector<IndexEntry>& slices, const Metadata& metadata,
                         const std::string& where);

std::string shard_file_name(int rank, int world);  // "shard-<rank>-of-<world>.bin"

// One rank's entries: names non-empty and unique, shapes valid, 0 <= begin <= end <=
// numel, padding >= 0.
void validate_entries(const std::vector<IndexEntry>& slices, const std::string& where);

// The non-empty slices of every tensor across ranks, sorted by begin; fails unless each
// tensor's shape is the same on every rank and its slices cover [0, numel) exactly once.
struct CoveredSlice {
  int rank = 0;
  size_t slice = 0;  // index in per_rank[rank]
  int64_t begin = 0, end = 0;
};
struct CoveredTensor {
  std::vector<int64_t> shape;
  std::vector<CoveredSlice> slices;
};
std::map<std::string, CoveredTensor> check_coverage(
    const std::vector<std::vector<IndexEntry>>& per_rank, const std::string& where);

// index.json's content without validation (tests use it to build bad indexes), sealed
// with its "crc32c".
nlohmann::json build_index_json(int world, const std::vector<std::vector<IndexEntry>>& per_rank,
                                const Metadata& metadata, const std::string& where);
// CRC-32C of `index` without its "crc32c" key (canonical dump()).
uint32_t index_checksum(const nlohmann::json& index, const std::string& where);

}  // namespace shardscope::engine::checkpoint
