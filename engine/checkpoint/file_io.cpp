#include "engine/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/crc32c.h"

namespace shardscope::engine::checkpoint {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO (or a tty) for reading would wait for a
  // writer, for ever; with it open() returns at once and fstat refuses
  // whatever is not a regular file. Symbolic links are followed (Hugging
  // Face caches link snapshots/<rev>/model.safetensors to blobs/).
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENXIO)  // a socket, or a device without a driver
      throw CheckpointError(path + ": not a regular file (open: " + std::strerror(err) + ")");
    throw CheckpointError(path + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw CheckpointError(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw CheckpointError(path + ": not a regular file (it is " + file_kind(st.st_mode) +
                          "); a checkpoint reads regular files only");
  }
  // Regular files ignore O_NONBLOCK; cleared all the same, so reads are plain blocking reads.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd_);
    throw CheckpointError(path + ": cannot clear O_NONBLOCK: " + std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  device_ = static_cast<uint64_t>(st.st_dev);
  inode_ = static_cast<uint64_t>(st.st_ino);
  mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read_exact(uint64_t offset, void* out, size_t size) const {
  if (offset > size_ || size > size_ - offset)
    throw CheckpointError(path_ + ": read of " + std::to_string(size) + " bytes at offset " +
                          std::to_string(offset) + " is past the end of the file (" +
                          std::to_string(size_) + " bytes)");
  char* p = static_cast<char*>(out);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw CheckpointError(path_ + ": read failed at offset " + std::to_string(offset + done) +
                            ": " + std::strerror(err));
    }
    if (n == 0)
      throw CheckpointError(path_ + ": file ended at offset " + std::to_string(offset + done) +
                            " (shortened while reading?)");
    done += static_cast<size_t>(n);
  }
}

std::string ReadOnlyFile::read_string(uint64_t offset, size_t size) const {
  std::string s(size, '\0');
  if (size > 0) read_exact(offset, s.data(), size);
  return s;
}

uint32_t ReadOnlyFile::crc32c_range(uint64_t offset, uint64_t size) const {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::vector<unsigned char> buffer(static_cast<size_t>(std::min(size, kChunk)));
  uint32_t crc = 0;
  while (size > 0) {
    const size_t n = static_cast<size_t>(std::min(size, kChunk));
    read_exact(offset, buffer.data(), n);
    crc = crc32c(buffer.data(), n, crc);
    offset += n;
    size -= n;
  }
  return crc;
}

std::string read_small_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
  const ReadOnlyFile file(path);
  if (file.size() > max_bytes)
    throw CheckpointError(path + ": " + std::to_string(file.size()) + " bytes, over the " +
                          std::to_string(max_bytes) + "-byte limit of " + what);
  return file.read_string(0, static_cast<size_t>(file.size()));
}

void put_le(unsigned char* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i, value >>= 8) out[i] = static_cast<unsigned char>(value & 0xFFu);
}

uint64_t get_le(const unsigned char* in, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

}  // namespace shardscope::engine::checkpoint
