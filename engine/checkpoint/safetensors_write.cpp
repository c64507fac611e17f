// write_safetensors: consolidated F32 checkpoint in the safetensors layout
// (safetensors_format.h), written atomically.
#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/json_fields.h"
#include "engine/checkpoint/safetensors_format.h"

namespace shardscope::engine::checkpoint {

using nlohmann::json;

void write_safetensors(const std::string& path, const std::vector<FullTensor>& tensors,
                       const Metadata& metadata) {
  // Validate everything before touching the file system.
  std::vector<const FullTensor*> sorted;
  std::vector<int64_t> numels;
  sorted.reserve(tensors.size());
  for (const FullTensor& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const FullTensor* a, const FullTensor* b) { return a->name < b->name; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const FullTensor& t = *sorted[i];
    const std::string where = path + ": tensor '" + t.name + "'";
    if (t.name.empty()) fail_at(path, "a tensor has an empty name");
    if (t.name == kSafetensorsMetadataKey) fail_at(where, "name is reserved by safetensors");
    if (i > 0 && sorted[i - 1]->name == t.name) fail_at(where, "name appears twice");
    numels.push_back(checked_numel(t.shape, where));
    if (numels.back() > 0 && t.data == nullptr) fail_at(where, "data is null");
  }
  for (const char* reserved : {kDataCrcKey, kHeaderCrcKey})
    if (metadata.count(reserved))
      fail_at(path, std::string("metadata key '") + reserved + "' is reserved");

  // Data section: tensors in sorted-name order, contiguous.
  json header = json::object();
  uint64_t offset = 0;
  uint32_t data_crc = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(numels[i]) * sizeof(float);
    header[sorted[i]->name] = {
        {"dtype", "F32"}, {"shape", sorted[i]->shape}, {"data_offsets", {offset, offset + bytes}}};
    if (bytes > 0) data_crc = crc32c(sorted[i]->data, bytes, data_crc);
    offset += bytes;
  }
  json meta(metadata);
  meta[kDataCrcKey] = crc32c_hex(data_crc);
  meta[kHeaderCrcKey] = kCrcPlaceholder;
  header[kSafetensorsMetadataKey] = meta;

  std::string text = dump_json(header, path + ": header");
  text.resize((text.size() + 7) / 8 * 8, ' ');
  unsigned char length[8];
  put_le(length, text.size(), 8);
  const size_t at = text.find(kHeaderCrcPattern);
  if (at == std::string::npos || text.find(kHeaderCrcPattern, at + 1) != std::string::npos)
    fail_at(path, "internal error: header checksum key not found exactly once");
  const size_t value_at = at + std::strlen(kHeaderCrcPattern);
  const uint32_t header_crc = crc32c(text.data(), text.size(), crc32c(length, sizeof length));
  text.replace(value_at, 8, crc32c_hex(header_crc));

  CheckpointFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (numels[i] > 0) file.write(sorted[i]->data, static_cast<size_t>(numels[i]) * sizeof(float));
  file.commit();
}

}  // namespace shardscope::engine::checkpoint
