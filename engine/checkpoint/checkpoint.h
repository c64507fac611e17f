// Checkpoint formats (engine/checkpoint): a consolidated safetensors file and
// a sharded checkpoint (one file per rank plus an index), both readable slice
// by slice so that a checkpoint loads onto any world size or policy.
//
// A rank of either FSDP flavor holds, of each parameter (and each optimizer
// state tensor), one contiguous range [begin, end) of its row-major
// flattening (fsdp2 shards dim 0; fsdp1's flat parameter covers a range of
// the concatenation), possibly empty, plus padding that is never saved.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope::engine::checkpoint {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One tensor's slice held by a rank: elements [begin, end) of the row-major
// flattening of a tensor of `shape` (fp32).
struct Slice {
  std::string name;  // Hugging Face style parameter name, or "<param>.exp_avg" etc.
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
  int64_t padding = 0;          // padding elements the rank holds after this slice (not saved)
  const float* data = nullptr;  // end - begin floats
};

// Free-form metadata (step count, loss scale, model, policy JSON, world size ...).
using Metadata = std::map<std::string, std::string>;

// ---- consolidated: safetensors (https://huggingface.co/docs/safetensors) -------------
// Full tensors, F32, HF names; loadable by safetensors.torch.load_file. Written
// atomically: temporary file in the same directory, fsync, rename, fsync of the
// directory. The metadata also records a checksum of the data section, checked on read.
struct FullTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};
void write_safetensors(const std::string& path, const std::vector<FullTensor>& tensors,
                       const Metadata& metadata);

// ---- sharded: shard-<rank>-of-<world>.bin per rank, plus index.json ------------------
// Each rank writes its own file (no communication); the index, listing every
// rank's slices with their file, offset, shape, range and padding, is written by
// one rank from the layout every rank knows. Each shard file carries its own checksum.
// Every rank and the index must be given the same metadata (the reader checks it).
// `dir` is created if missing. Both validate their input (ranges within the shape,
// unique names per rank; the index: every tensor covered exactly once) and throw
// CheckpointError before writing anything.
void write_shard_file(const std::string& dir, int rank, int world, const std::vector<Slice>& slices,
                      const Metadata& metadata);
struct IndexEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0, padding = 0;
};
// per_rank[r]: rank r's slices in the order write_shard_file was given them.
void write_shard_index(const std::string& dir, int world,
                       const std::vector<std::vector<IndexEntry>>& per_rank,
                       const Metadata& metadata);

// ---- reading either format -------------------------------------------------------------
// Opens a checkpoint directory (sharded: index.json; else model.safetensors), an
// index.json, or a .safetensors file, validating headers, sizes, ranges and checksums
// up front (this reads every byte once): a truncated or corrupted file is a
// CheckpointError naming the file and what is wrong. A sharded checkpoint is also
// refused when a shard file's metadata differs from the index's (files of two
// different saves mixed in one directory). Safetensors files written by other tools
// (no shardscope checksum keys) are read without checksum verification.
// Formats: safetensors_format.h, shard_format.h; headers, tables and index.json <= 100 MiB.
class Reader {
 public:
  static Reader open(const std::string& path);

  // Metadata as written (the shardscope.* checksum keys of a safetensors file removed).
  const Metadata& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const std::vector<int64_t>& shape(const std::string& name) const;  // throws if absent
  std::vector<std::string> names() const;                            // sorted
  // out[0 .. end-begin) = elements [begin, end) of the tensor's flattening, gathered
  // from whichever files hold them. Throws CheckpointError (absent name, bad range,
  // a file replaced or shortened since open()).
  void read(const std::string& name, int64_t begin, int64_t end, float* out) const;
  // Whole tensor: numel floats.
  std::vector<float> read_all(const std::string& name) const;

  struct Piece {  // where a range of a tensor lives
    int file = -1;
    int64_t begin = 0, end = 0;  // element range of the tensor
    uint64_t offset = 0;         // byte offset of element `begin` in the file
  };
  struct TensorInfo {
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;  // sorted by begin, covering [0, numel) exactly
  };
  const TensorInfo& info(const std::string& name) const;  // throws if absent
  const std::vector<std::string>& files() const { return files_; }

 private:
  // Identity of a validated file: read() refuses a file replaced since open().
  struct FileId {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0;
  };
  static Reader open_safetensors(const std::string& path);
  static Reader open_sharded(const std::string& index_path);
  int add_file(const std::string& path, uint64_t device, uint64_t inode, uint64_t size,
               int64_t mtime_ns);

  std::string path_;  // what open() was given, for messages
  Metadata metadata_;
  std::vector<std::string> files_;
  std::vector<FileId> file_ids_;  // parallel to files_
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace shardscope::engine::checkpoint
