// Reader::open_safetensors: validates a safetensors file (safetensors_format.h) up
// front: header length within the file and the limit, JSON well-formed, F32 only,
// offsets matching the shapes and tiling the data section exactly, checksums.
#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/json_fields.h"
#include "engine/checkpoint/safetensors_format.h"

namespace shardscope::engine::checkpoint {

using nlohmann::json;

namespace {

uint32_t checksum_value(const Metadata& meta, const char* key, const std::string& path) {
  const auto it = meta.find(key);
  if (it == meta.end())
    fail_at(path, std::string("metadata has ") +
                      (std::strcmp(key, kDataCrcKey) == 0 ? kHeaderCrcKey : kDataCrcKey) +
                      " but not " + key + " (header corrupted)");
  uint32_t v = 0;
  if (!parse_crc32c_hex(it->second, &v))
    fail_at(path, std::string("metadata ") + key + " is '" + it->second +
                      "', not 8 hex digits (header corrupted)");
  return v;
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t begin = 0, end = 0;  // byte offsets in the data section
};

}  // namespace

Reader Reader::open_safetensors(const std::string& path) {
  ReadOnlyFile file(path);
  if (file.size() < 8)
    fail_at(path,
            "file is " + std::to_string(file.size()) +
                " bytes, shorter than the 8-byte header length (truncated or not safetensors)");
  unsigned char length_bytes[8];
  file.read_exact(0, length_bytes, 8);
  const uint64_t header_bytes = get_le(length_bytes, 8);
  if (header_bytes > kMaxHeaderBytes)
    fail_at(path, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes (corrupted or not safetensors)");
  if (header_bytes > file.size() - 8)
    fail_at(path, "header length " + std::to_string(header_bytes) + " runs past the end of the " +
                      std::to_string(file.size()) + "-byte file (truncated)");
  const std::string text = file.read_string(8, static_cast<size_t>(header_bytes));
  if (text.empty() || text[0] != '{') fail_at(path, "header does not start with '{'");
  const json header = parse_json(text, path + ": header");
  if (!header.is_object()) fail_at(path, "header is not a JSON object");

  Reader reader;
  reader.path_ = path;
  Metadata meta;
  if (header.contains(kSafetensorsMetadataKey))
    meta = json_metadata(header[kSafetensorsMetadataKey], path + ": " + kSafetensorsMetadataKey);
  const bool has_checksums = meta.count(kDataCrcKey) || meta.count(kHeaderCrcKey);
  uint32_t data_crc = 0;
  if (has_checksums) {
    data_crc = checksum_value(meta, kDataCrcKey, path);
    const uint32_t header_crc = checksum_value(meta, kHeaderCrcKey, path);
    const std::string value = crc32c_hex(header_crc);
    const std::string pattern = std::string(kHeaderCrcPattern) + meta[kHeaderCrcKey] + "\"";
    const size_t at = text.find(pattern);
    if (at == std::string::npos || text.find(pattern, at + 1) != std::string::npos)
      fail_at(path, std::string(kHeaderCrcKey) + " is not written as shardscope writes it");
    std::string zeroed = text;
    zeroed.replace(at + std::strlen(kHeaderCrcPattern), 8, kCrcPlaceholder);
    const uint32_t actual = crc32c(zeroed.data(), zeroed.size(), crc32c(length_bytes, 8));
    if (kVerifyChecksums && actual != header_crc)
      fail_at(path, "header checksum mismatch (stored " + value + ", computed " +
                        crc32c_hex(actual) + "): header corrupted");
    meta.erase(kDataCrcKey);
    meta.erase(kHeaderCrcKey);
  }

  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == kSafetensorsMetadataKey) continue;
    Entry e;
    e.name = item.key();
    const std::string where = path + ": tensor '" + e.name + "'";
    const json& t = item.value();
    expect_keys(t, {"dtype", "shape", "data_offsets"}, where);
    const std::string dtype = json_string(t["dtype"], where + ": dtype");
    if (dtype != "F32")
      fail_at(where, "dtype " + dtype + " is not supported (only F32 checkpoints are read)");
    e.shape = json_shape(t["shape"], where);
    e.numel = checked_numel(e.shape, where);
    const json& offsets = t["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
      fail_at(where, "data_offsets must be an array [begin, end]");
    const int64_t b = json_int(offsets[0], where + ": data_offsets");
    const int64_t en = json_int(offsets[1], where + ": data_offsets");
    if (b < 0 || en < b)
      fail_at(where, "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                         "] is not a range");
    e.begin = static_cast<uint64_t>(b);
    e.end = static_cast<uint64_t>(en);
    if (e.end - e.begin != static_cast<uint64_t>(e.numel) * sizeof(float))
      fail_at(where, "data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] hold " +
                         std::to_string(e.end - e.begin) + " bytes; F32 shape " +
                         shape_text(e.shape) + " needs " + std::to_string(e.numel * 4));
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data section: sorted by offset, no gap, no overlap.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin != cursor)
      fail_at(path, "tensor '" + e.name + "' starts at data byte " + std::to_string(e.begin) +
                        ", expected " + std::to_string(cursor) +
                        (e.begin < cursor ? " (overlaps '" + entries[i - 1].name + "')"
                                          : std::string(" (gap)")));
    cursor = e.end;
  }
  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = file.size() - data_start;
  if (cursor != data_bytes)
    fail_at(path, "data section is " + std::to_string(data_bytes) + " bytes but the header's " +
                      "tensors need " + std::to_string(cursor) +
                      (cursor > data_bytes ? " (truncated)" : " (trailing bytes)"));
  if (has_checksums) {
    const uint32_t actual = file.crc32c_range(data_start, data_bytes);
    if (kVerifyChecksums && actual != data_crc)
      fail_at(path, "data checksum mismatch (stored " + crc32c_hex(data_crc) + ", computed " +
                        crc32c_hex(actual) + "): data corrupted");
  }

  const int file_index =
      reader.add_file(path, file.device(), file.inode(), file.size(), file.mtime_ns());
  for (const Entry& e : entries) {
    TensorInfo info;
    info.shape = e.shape;
    if (e.numel > 0) info.pieces.push_back(Piece{file_index, 0, e.numel, data_start + e.begin});
    reader.tensors_.emplace(e.name, std::move(info));
  }
  reader.metadata_ = std::move(meta);
  return reader;
}

}  // namespace shardscope::engine::checkpoint
