// write_shard_file and write_shard_index: the sharded checkpoint (shard_format.h),
// each file written atomically.
#include <cstring>
#include <filesystem>
#include <system_error>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/json_fields.h"
#include "engine/checkpoint/shard_format.h"

namespace shardscope::engine::checkpoint {

namespace {

void check_world(int rank, int world, const std::string& where) {
  if (world < 1 || world > kMaxWorld)
    fail_at(where,
            "world " + std::to_string(world) + " is not in [1, " + std::to_string(kMaxWorld) + "]");
  if (rank < 0 || rank >= world)
    fail_at(where,
            "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world) + ")");
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_at(dir, "cannot create directory: " + ec.message());
}

// CheckpointFile that also accumulates the CRC-32C of what it wrote.
struct ChecksummedFile {
  CheckpointFile file;
  uint32_t crc = 0;
  explicit ChecksummedFile(const std::string& path) : file(path) {}
  void write(const void* data, size_t size) {
    crc = crc32c(data, size, crc);
    file.write(data, size);
  }
};

}  // namespace

void write_shard_file(const std::string& dir, int rank, int world, const std::vector<Slice>& slices,
                      const Metadata& metadata) {
  const std::string path = dir + "/" + shard_file_name(rank, world);
  check_world(rank, world, path);
  std::vector<IndexEntry> entries;
  entries.reserve(slices.size());
  for (const Slice& s : slices) entries.push_back({s.name, s.shape, s.begin, s.end, s.padding});
  validate_entries(entries, path);
  for (const Slice& s : slices)
    if (s.end > s.begin && s.data == nullptr) fail_at(path, "slice '" + s.name + "': data is null");
  const ShardLayout layout = layout_shard(entries, metadata, path);

  ShardHeader h;
  h.rank = static_cast<uint32_t>(rank);
  h.world = static_cast<uint32_t>(world);
  h.slice_count = slices.size();
  h.table_bytes = layout.table.size();
  h.data_bytes = layout.data_bytes;
  h.metadata_bytes = layout.metadata.size();
  unsigned char header[kShardHeaderBytes];
  encode_shard_header(h, header);

  make_dir(dir);
  ChecksummedFile out(path);
  out.write(header, sizeof header);
  out.write(layout.table.data(), layout.table.size());
  for (const Slice& s : slices)
    if (s.end > s.begin) out.write(s.data, static_cast<size_t>(s.end - s.begin) * sizeof(float));
  out.write(layout.metadata.data(), layout.metadata.size());
  unsigned char footer[kShardFooterBytes];
  put_le(footer, out.crc, 4);
  std::memcpy(footer + 4, kShardEndMagic, 4);
  out.file.write(footer, sizeof footer);
  if (out.file.bytes_written() != layout.file_bytes)
    fail_at(path, "internal error: wrote " + std::to_string(out.file.bytes_written()) +
                      " bytes, layout says " + std::to_string(layout.file_bytes));
  out.file.commit();
}

void write_shard_index(const std::string& dir, int world,
                       const std::vector<std::vector<IndexEntry>>& per_rank,
                       const Metadata& metadata) {
  const std::string path = dir + "/index.json";
  check_world(0, world, path);
  if (per_rank.size() != static_cast<size_t>(world))
    fail_at(path, "per_rank lists " + std::to_string(per_rank.size()) + " ranks, world is " +
                      std::to_string(world));
  for (size_t r = 0; r < per_rank.size(); ++r)
    validate_entries(per_rank[r], path + ": rank " + std::to_string(r));
  check_coverage(per_rank, path);  // refuse to write an index the reader would refuse
  const std::string text = build_index_json(world, per_rank, metadata, path).dump(1) + "\n";
  make_dir(dir);
  CheckpointFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace shardscope::engine::checkpoint
