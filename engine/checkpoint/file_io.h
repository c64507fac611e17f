// Reading side of the checkpoint formats: a read-only file with exact-size reads
// that throw CheckpointError naming the file, and the limits that keep a hostile
// header from allocating gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardscope::engine::checkpoint {

// Largest JSON header (safetensors), shard table, shard metadata or index.json read.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

// A regular file opened for reading. Opening never waits: a FIFO, socket or
// device is refused naming the path and what it is (O_NONBLOCK, then fstat),
// so a read can only wait on the disk, never on a writer. Symbolic links are
// followed.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);  // must be a regular file
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  uint64_t device() const { return device_; }
  uint64_t inode() const { return inode_; }
  int64_t mtime_ns() const { return mtime_ns_; }

  // Exactly `size` bytes at `offset`; "<path>: ..." when past the end or on I/O error.
  void read_exact(uint64_t offset, void* out, size_t size) const;
  std::string read_string(uint64_t offset, size_t size) const;
  // CRC-32C of bytes [offset, offset + size), read in chunks.
  uint32_t crc32c_range(uint64_t offset, uint64_t size) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0, device_ = 0, inode_ = 0;
  int64_t mtime_ns_ = 0;
};

// The whole of a small regular file (ReadOnlyFile); CheckpointError naming the
// file, its size and the limit when it holds more than max_bytes (`what`
// says whose limit: "a `latest` file (one step directory name)").
std::string read_small_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// Little-endian fixed-width integers (files are little-endian on every host).
void put_le(unsigned char* out, uint64_t value, int bytes);
uint64_t get_le(const unsigned char* in, int bytes);

// Checksum verification is skipped only in fuzzing builds (libFuzzer convention), so
// the fuzzer can reach the checks behind it; the checksum is still computed.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kVerifyChecksums = false;
#else
constexpr bool kVerifyChecksums = true;
#endif

}  // namespace shardscope::engine::checkpoint
