// Reader::open_sharded: validates index.json and every shard file it names up front
// (sizes, checksums, rank/world, tables and metadata equal to the index's, coverage).
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/json_fields.h"
#include "engine/checkpoint/shard_format.h"

namespace shardscope::engine::checkpoint {

using nlohmann::json;

namespace {

struct IndexRank {
  int64_t rank = 0;
  std::string file;
  int64_t file_bytes = 0;
  std::vector<IndexEntry> slices;
  std::vector<int64_t> offsets;  // index's "offset" of each slice
};

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A readable message for a shard table that differs from the index's slices.
std::string table_difference(const std::string& stored, const std::vector<IndexEntry>& expected) {
  json table;
  try {
    table = json::parse(stored);
  } catch (const json::exception&) {
    return "its slice table is not valid JSON";
  }
  if (!table.is_array()) return "its slice table is not an array";
  if (table.size() != expected.size())
    return "it holds " + std::to_string(table.size()) + " slices, index.json lists " +
           std::to_string(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const IndexEntry& e = expected[i];
    const json& t = table[i];
    const json want = {{"name", e.name},
                       {"shape", e.shape},
                       {"begin", e.begin},
                       {"end", e.end},
                       {"padding", e.padding}};
    for (const auto& item : want.items())
      if (!t.is_object() || !t.contains(item.key()) || t[item.key()] != item.value())
        return "slice " + std::to_string(i) + " '" + e.name + "': " + item.key() + " is " +
               (t.is_object() && t.contains(item.key()) ? t[item.key()].dump() : "absent") +
               ", index.json says " + item.value().dump();
  }
  return "its slice table's bytes differ from the layout of index.json's slices";
}

}  // namespace

Reader Reader::open_sharded(const std::string& index_path) {
  const std::string dir = dir_of(index_path);
  json index;
  {
    ReadOnlyFile file(index_path);
    if (file.size() > kMaxHeaderBytes)
      fail_at(index_path, "index is " + std::to_string(file.size()) + " bytes, over the limit of " +
                              std::to_string(kMaxHeaderBytes));
    index = parse_json(file.read_string(0, static_cast<size_t>(file.size())), index_path);
  }
  // Structure first (bounded depth), then the checksum, then the meaning.
  expect_keys(index, {"format", "version", "world", "metadata", "ranks", "crc32c"}, index_path);
  const std::string format = json_string(index["format"], index_path + ": format");
  const int64_t version = json_int(index["version"], index_path + ": version");
  const int64_t world = json_int(index["world"], index_path + ": world");
  Metadata metadata = json_metadata(index["metadata"], index_path + ": metadata");
  const std::string stored_crc_text = json_string(index["crc32c"], index_path + ": crc32c");
  const json& ranks_json = index["ranks"];
  if (!ranks_json.is_array()) fail_at(index_path, "ranks: expected an array");
  std::vector<IndexRank> ranks;
  for (size_t r = 0; r < ranks_json.size(); ++r) {
    const std::string where = index_path + ": ranks[" + std::to_string(r) + "]";
    const json& rj = ranks_json[r];
    expect_keys(rj, {"rank", "file", "file_bytes", "slices"}, where);
    IndexRank ir;
    ir.rank = json_int(rj["rank"], where + ": rank");
    ir.file = json_string(rj["file"], where + ": file");
    ir.file_bytes = json_int(rj["file_bytes"], where + ": file_bytes");
    if (!rj["slices"].is_array()) fail_at(where, "slices: expected an array");
    for (size_t i = 0; i < rj["slices"].size(); ++i) {
      const std::string at = where + ": slices[" + std::to_string(i) + "]";
      const json& sj = rj["slices"][i];
      expect_keys(sj, {"name", "shape", "begin", "end", "padding", "offset"}, at);
      IndexEntry e;
      e.name = json_string(sj["name"], at + ": name");
      e.shape = json_shape(sj["shape"], at);
      e.begin = json_int(sj["begin"], at + ": begin");
      e.end = json_int(sj["end"], at + ": end");
      e.padding = json_int(sj["padding"], at + ": padding");
      ir.slices.push_back(std::move(e));
      ir.offsets.push_back(json_int(sj["offset"], at + ": offset"));
    }
    ranks.push_back(std::move(ir));
  }
  uint32_t stored_crc = 0;
  if (!parse_crc32c_hex(stored_crc_text, &stored_crc))
    fail_at(index_path, "crc32c '" + stored_crc_text + "' is not 8 hex digits");
  const uint32_t actual_crc = index_checksum(index, index_path);
  if (kVerifyChecksums && actual_crc != stored_crc)
    fail_at(index_path, "checksum mismatch (stored " + stored_crc_text + ", computed " +
                            crc32c_hex(actual_crc) + "): index corrupted or edited");

  if (format != kIndexFormat)
    fail_at(index_path, "format '" + format + "' is not '" + kIndexFormat + "'");
  if (version != kIndexVersion)
    fail_at(index_path, "index version " + std::to_string(version) +
                            " is not supported (this build reads version " +
                            std::to_string(kIndexVersion) + ")");
  if (world < 1 || world > kMaxWorld)
    fail_at(index_path,
            "world " + std::to_string(world) + " is not in [1, " + std::to_string(kMaxWorld) + "]");
  if (ranks.size() != static_cast<size_t>(world))
    fail_at(index_path, "lists " + std::to_string(ranks.size()) + " ranks but world is " +
                            std::to_string(world));

  Reader reader;
  reader.path_ = index_path;
  std::vector<std::vector<IndexEntry>> per_rank;
  std::vector<std::vector<uint64_t>> offsets;  // absolute, from the shared layout
  std::vector<int> file_of_rank;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const IndexRank& ir = ranks[r];
    const int w = static_cast<int>(world);
    const std::string where = index_path + ": rank " + std::to_string(r);
    if (ir.rank != static_cast<int64_t>(r))
      fail_at(where, "entry says rank " + std::to_string(ir.rank));
    if (ir.file != shard_file_name(static_cast<int>(r), w))
      fail_at(where,
              "file '" + ir.file + "' is not '" + shard_file_name(static_cast<int>(r), w) + "'");
    validate_entries(ir.slices, where);
    const ShardLayout layout = layout_shard(ir.slices, metadata, where);
    for (size_t i = 0; i < ir.slices.size(); ++i)
      if (static_cast<uint64_t>(ir.offsets[i]) != layout.offsets[i])
        fail_at(where, "slice '" + ir.slices[i].name + "' offset " + std::to_string(ir.offsets[i]) +
                           " disagrees with the layout's " + std::to_string(layout.offsets[i]));
    if (static_cast<uint64_t>(ir.file_bytes) != layout.file_bytes)
      fail_at(where, "file_bytes " + std::to_string(ir.file_bytes) +
                         " disagrees with the layout's " + std::to_string(layout.file_bytes));

    // The shard file: size, footer and checksum first, then its header and sections.
    const std::string path = dir + "/" + ir.file;
    std::unique_ptr<ReadOnlyFile> file;
    try {
      file = std::make_unique<ReadOnlyFile>(path);
    } catch (const CheckpointError& e) {
      fail_at(where, std::string("shard file missing or unreadable: ") + e.what());
    }
    if (file->size() != layout.file_bytes)
      fail_at(path, "file is " + std::to_string(file->size()) + " bytes, index.json says " +
                        std::to_string(layout.file_bytes) +
                        (file->size() < layout.file_bytes ? " (truncated)" : " (trailing bytes)"));
    unsigned char footer[kShardFooterBytes];
    file->read_exact(file->size() - kShardFooterBytes, footer, kShardFooterBytes);
    if (std::memcmp(footer + 4, kShardEndMagic, 4) != 0)
      fail_at(path, "end marker missing (truncated or overwritten)");
    const uint32_t stored = static_cast<uint32_t>(get_le(footer, 4));
    const uint32_t actual = file->crc32c_range(0, file->size() - kShardFooterBytes);
    if (kVerifyChecksums && actual != stored)
      fail_at(path, "checksum mismatch (stored " + crc32c_hex(stored) + ", computed " +
                        crc32c_hex(actual) + "): file corrupted");
    unsigned char header_bytes[kShardHeaderBytes];
    file->read_exact(0, header_bytes, kShardHeaderBytes);
    const ShardHeader h = decode_shard_header(header_bytes, path);
    if (h.rank != r || h.world != static_cast<uint32_t>(world))
      fail_at(path, "header says rank " + std::to_string(h.rank) + " of world " +
                        std::to_string(h.world) + ", index.json says rank " + std::to_string(r) +
                        " of world " + std::to_string(world));
    if (h.slice_count != ir.slices.size() || h.table_bytes != layout.table.size() ||
        h.data_bytes != layout.data_bytes || h.metadata_bytes != layout.metadata.size()) {
      fail_at(path, "header (" + std::to_string(h.slice_count) + " slices, table " +
                        std::to_string(h.table_bytes) + " B, data " + std::to_string(h.data_bytes) +
                        " B, metadata " + std::to_string(h.metadata_bytes) +
                        " B) disagrees with index.json (" + std::to_string(ir.slices.size()) +
                        " slices, table " + std::to_string(layout.table.size()) + " B, data " +
                        std::to_string(layout.data_bytes) + " B, metadata " +
                        std::to_string(layout.metadata.size()) + " B)");
    }
    // Sizes now agree with the layout, so these reads are within the file.
    if (file->read_string(kShardHeaderBytes, layout.table.size()) != layout.table)
      fail_at(path, "differs from index.json: " +
                        table_difference(file->read_string(kShardHeaderBytes, layout.table.size()),
                                         ir.slices));
    if (file->read_string(layout.data_offset + layout.data_bytes, layout.metadata.size()) !=
        layout.metadata)
      fail_at(path, "metadata differs from index.json's (files of different saves mixed?)");

    file_of_rank.push_back(
        reader.add_file(path, file->device(), file->inode(), file->size(), file->mtime_ns()));
    per_rank.push_back(ir.slices);
    offsets.push_back(layout.offsets);
  }

  for (auto& [name, covered] : check_coverage(per_rank, index_path)) {
    TensorInfo info;
    info.shape = covered.shape;
    for (const CoveredSlice& s : covered.slices)
      info.pieces.push_back(Piece{file_of_rank[static_cast<size_t>(s.rank)], s.begin, s.end,
                                  offsets[static_cast<size_t>(s.rank)][s.slice]});
    reader.tensors_.emplace(name, std::move(info));
  }
  reader.metadata_ = std::move(metadata);
  return reader;
}

}  // namespace shardscope::engine::checkpoint
