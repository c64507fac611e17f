// Reader: open() dispatch and range reads gathered from the pieces.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/file_io.h"

namespace shardscope::engine::checkpoint {

namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

Reader Reader::open(const std::string& path) {
  if (is_dir(path)) {
    const std::string index = path + "/index.json";
    const std::string consolidated = path + "/model.safetensors";
    if (exists(index)) return open_sharded(index);
    if (exists(consolidated)) return open_safetensors(consolidated);
    throw CheckpointError(path + ": directory holds neither index.json nor model.safetensors");
  }
  if (!exists(path)) {
    const int err = errno;
    throw CheckpointError(path + ": cannot open: " + std::strerror(err));
  }
  if (base_name(path) == "index.json") return open_sharded(path);
  return open_safetensors(path);
}

int Reader::add_file(const std::string& path, uint64_t device, uint64_t inode, uint64_t size,
                     int64_t mtime_ns) {
  files_.push_back(path);
  file_ids_.push_back(FileId{device, inode, size, mtime_ns});
  return static_cast<int>(files_.size()) - 1;
}

bool Reader::has(const std::string& name) const {
  return tensors_.count(name) != 0;
}

const Reader::TensorInfo& Reader::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw CheckpointError(path_ + ": no tensor '" + name + "'");
  return it->second;
}

const std::vector<int64_t>& Reader::shape(const std::string& name) const {
  return info(name).shape;
}

std::vector<std::string> Reader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& item : tensors_) out.push_back(item.first);
  return out;
}

void Reader::read(const std::string& name, int64_t begin, int64_t end, float* out) const {
  const TensorInfo& t = info(name);
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;  // validated at open: no overflow
  if (begin < 0 || end < begin || end > numel)
    throw CheckpointError(path_ + ": tensor '" + name + "': range [" + std::to_string(begin) +
                          ", " + std::to_string(end) + ") is not within [0, " +
                          std::to_string(numel) + ")");
  if (begin == end) return;
  // First piece ending after `begin`; pieces tile [0, numel) in order.
  auto it = std::upper_bound(t.pieces.begin(), t.pieces.end(), begin,
                             [](int64_t b, const Piece& p) { return b < p.end; });
  for (; it != t.pieces.end() && it->begin < end; ++it) {
    const int64_t from = std::max(begin, it->begin), to = std::min(end, it->end);
    const size_t file_index = static_cast<size_t>(it->file);
    ReadOnlyFile file(files_[file_index]);
    const FileId& id = file_ids_[file_index];
    if (file.device() != id.device || file.inode() != id.inode || file.size() != id.size ||
        file.mtime_ns() != id.mtime_ns)
      throw CheckpointError(files_[file_index] +
                            ": file was replaced or modified since the checkpoint was opened");
    file.read_exact(it->offset + static_cast<uint64_t>(from - it->begin) * sizeof(float),
                    out + (from - begin), static_cast<size_t>(to - from) * sizeof(float));
  }
}

std::vector<float> Reader::read_all(const std::string& name) const {
  const TensorInfo& t = info(name);
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  std::vector<float> out(static_cast<size_t>(numel));
  read(name, 0, numel, out.data());
  return out;
}

}  // namespace shardscope::engine::checkpoint
