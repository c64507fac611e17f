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

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
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
    throw CheckpointError(path + ": not a regular file");
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

void put_le(unsigned char* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i, value >>= 8) out[i] = static_cast<unsigned char>(value & 0xFFu);
}

uint64_t get_le(const unsigned char* in, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

}  // namespace shardscope::engine::checkpoint
