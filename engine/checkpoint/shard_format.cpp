#include "engine/checkpoint/shard_format.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/json_fields.h"

namespace shardscope::engine::checkpoint {

using nlohmann::json;

void encode_shard_header(const ShardHeader& h, unsigned char out[kShardHeaderBytes]) {
  std::memset(out, 0, kShardHeaderBytes);
  std::memcpy(out, kShardMagic, 8);
  put_le(out + 8, h.version, 4);
  put_le(out + 12, h.rank, 4);
  put_le(out + 16, h.world, 4);
  put_le(out + 24, h.slice_count, 8);
  put_le(out + 32, h.table_bytes, 8);
  put_le(out + 40, h.data_bytes, 8);
  put_le(out + 48, h.metadata_bytes, 8);
}

ShardHeader decode_shard_header(const unsigned char in[kShardHeaderBytes],
                                const std::string& file) {
  if (std::memcmp(in, kShardMagic, 8) != 0) fail_at(file, "bad magic: not a shardscope shard file");
  ShardHeader h;
  h.version = static_cast<uint32_t>(get_le(in + 8, 4));
  if (h.version != kShardVersion)
    fail_at(file, "shard file version " + std::to_string(h.version) +
                      " is not supported (this build reads version " +
                      std::to_string(kShardVersion) + ")");
  h.rank = static_cast<uint32_t>(get_le(in + 12, 4));
  h.world = static_cast<uint32_t>(get_le(in + 16, 4));
  h.slice_count = get_le(in + 24, 8);
  h.table_bytes = get_le(in + 32, 8);
  h.data_bytes = get_le(in + 40, 8);
  h.metadata_bytes = get_le(in + 48, 8);
  if (get_le(in + 20, 4) != 0 || get_le(in + 56, 8) != 0)
    fail_at(file, "reserved header fields are not zero");
  return h;
}

std::string shard_file_name(int rank, int world) {
  return "shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".bin";
}

void validate_entries(const std::vector<IndexEntry>& slices, const std::string& where) {
  std::set<std::string> seen;
  for (size_t i = 0; i < slices.size(); ++i) {
    const IndexEntry& e = slices[i];
    const std::string at = where + ": slice " + std::to_string(i) + " '" + e.name + "'";
    if (e.name.empty()) fail_at(at, "empty name");
    if (!seen.insert(e.name).second) fail_at(at, "name appears twice in one rank");
    const int64_t numel = checked_numel(e.shape, at);
    if (e.begin < 0 || e.end < e.begin || e.end > numel)
      fail_at(at, "range [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") is not within [0, " + std::to_string(numel) + ") of shape " +
                      shape_text(e.shape));
    if (e.padding < 0 || e.padding > kMaxElements)
      fail_at(at, "padding " + std::to_string(e.padding) + " is out of range");
  }
}

ShardLayout layout_shard(const std::vector<IndexEntry>& slices, const Metadata& metadata,
                         const std::string& where) {
  ShardLayout layout;
  json table = json::array();
  uint64_t cursor = 0;
  std::vector<uint64_t> relative;
  for (const IndexEntry& e : slices) {
    const uint64_t bytes = static_cast<uint64_t>(e.end - e.begin) * sizeof(float);
    if (bytes > kMaxDataBytes - cursor) fail_at(where, "slices hold more than 2^62 bytes in total");
    table.push_back({{"name", e.name},
                     {"shape", e.shape},
                     {"begin", e.begin},
                     {"end", e.end},
                     {"padding", e.padding},
                     {"data_offsets", {cursor, cursor + bytes}}});
    relative.push_back(cursor);
    cursor += bytes;
  }
  layout.table = dump_json(table, where + ": slice table");
  layout.table.resize((layout.table.size() + 7) / 8 * 8, ' ');
  layout.metadata = dump_json(json(metadata), where + ": metadata");
  layout.data_offset = kShardHeaderBytes + layout.table.size();
  layout.data_bytes = cursor;
  for (uint64_t r : relative) layout.offsets.push_back(layout.data_offset + r);
  layout.file_bytes =
      layout.data_offset + layout.data_bytes + layout.metadata.size() + kShardFooterBytes;
  return layout;
}

std::map<std::string, CoveredTensor> check_coverage(
    const std::vector<std::vector<IndexEntry>>& per_rank, const std::string& where) {
  std::map<std::string, CoveredTensor> tensors;
  std::map<std::string, int> shape_rank;  // first rank that named the tensor
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (size_t i = 0; i < per_rank[r].size(); ++i) {
      const IndexEntry& e = per_rank[r][i];
      auto [it, inserted] = tensors.try_emplace(e.name);
      if (inserted) {
        it->second.shape = e.shape;
        shape_rank[e.name] = static_cast<int>(r);
      } else if (it->second.shape != e.shape) {
        fail_at(where, "tensor '" + e.name + "' has shape " + shape_text(e.shape) + " on rank " +
                           std::to_string(r) + " but " + shape_text(it->second.shape) +
                           " on rank " + std::to_string(shape_rank[e.name]));
      }
      if (e.end > e.begin) it->second.slices.push_back({static_cast<int>(r), i, e.begin, e.end});
    }
  }
  for (auto& [name, t] : tensors) {
    std::sort(t.slices.begin(), t.slices.end(), [](const CoveredSlice& a, const CoveredSlice& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const int64_t numel = checked_numel(t.shape, where + ": tensor '" + name + "'");
    int64_t cursor = 0;
    for (size_t k = 0; k < t.slices.size(); ++k) {
      const CoveredSlice& s = t.slices[k];
      const std::string range = "[" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                                ") on rank " + std::to_string(s.rank);
      if (s.begin < cursor)
        fail_at(where, "tensor '" + name + "': elements " + range + " overlap elements up to " +
                           std::to_string(cursor) + " on rank " +
                           std::to_string(t.slices[k - 1].rank));
      if (s.begin > cursor)
        fail_at(where, "tensor '" + name + "': elements [" + std::to_string(cursor) + ", " +
                           std::to_string(s.begin) + ") are held by no rank");
      cursor = s.end;
    }
    if (cursor != numel)
      fail_at(where, "tensor '" + name + "': elements [" + std::to_string(cursor) + ", " +
                         std::to_string(numel) + ") are held by no rank");
  }
  return tensors;
}

uint32_t index_checksum(const json& index, const std::string& where) {
  json copy = index;
  if (copy.is_object()) copy.erase("crc32c");
  const std::string text = dump_json(copy, where);
  return crc32c(text.data(), text.size());
}

json build_index_json(int world, const std::vector<std::vector<IndexEntry>>& per_rank,
                      const Metadata& metadata, const std::string& where) {
  json ranks = json::array();
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const std::string file = shard_file_name(static_cast<int>(r), world);
    const ShardLayout layout =
        layout_shard(per_rank[r], metadata, where + ": rank " + std::to_string(r));
    json slices = json::array();
    for (size_t i = 0; i < per_rank[r].size(); ++i) {
      const IndexEntry& e = per_rank[r][i];
      slices.push_back({{"name", e.name},
                        {"shape", e.shape},
                        {"begin", e.begin},
                        {"end", e.end},
                        {"padding", e.padding},
                        {"offset", layout.offsets[i]}});
    }
    ranks.push_back(
        {{"rank", r}, {"file", file}, {"file_bytes", layout.file_bytes}, {"slices", slices}});
  }
  json index = {{"format", kIndexFormat},
                {"version", kIndexVersion},
                {"world", world},
                {"metadata", json(metadata)},
                {"ranks", ranks}};
  index["crc32c"] = crc32c_hex(index_checksum(index, where));
  return index;
}

}  // namespace shardscope::engine::checkpoint
