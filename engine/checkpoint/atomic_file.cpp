#include "engine/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "engine/checkpoint/checkpoint.h"

namespace shardscope::engine::checkpoint {

namespace {

constexpr size_t kChunkBytes = size_t{8} << 20;

testing::WriteFaults& faults() {
  static testing::WriteFaults f;
  return f;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

namespace testing {
void set_write_faults(WriteFaults f) {
  faults() = std::move(f);
}
void clear_write_faults() {
  faults() = WriteFaults{};
}
}  // namespace testing

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty() || path_.back() == '/')
    throw CheckpointError("'" + path_ + "': not a file path");
  temp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw CheckpointError(path_ + ": cannot create temporary " + temp_ + ": " + std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  discard();
  committed_ = true;  // nothing left to clean up
  throw CheckpointError(path_ + ": " + what + ": " + std::strerror(err));
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw CheckpointError(path_ + ": write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t chunk = std::min(size, kChunkBytes);
    const int64_t limit = faults().fail_after_bytes;
    if (limit >= 0 && written_ + chunk > static_cast<uint64_t>(limit))
      fail("write to " + temp_ + " failed (injected)", ENOSPC);
    size_t done = 0;
    while (done < chunk) {
      const ssize_t n = ::write(fd_, p + done, chunk - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("write to " + temp_ + " failed", errno);
      }
      done += static_cast<size_t>(n);
    }
    written_ += chunk;
    p += chunk;
    size -= chunk;
    if (faults().on_write) faults().on_write(temp_, written_);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw CheckpointError(path_ + ": commit after commit or failure");
  if (faults().fail_fsync) fail("fsync of " + temp_ + " failed (injected)", EIO);
  if (::fsync(fd_) != 0) fail("fsync of " + temp_ + " failed", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close of " + temp_ + " failed", errno);
  }
  fd_ = -1;
  if (faults().fail_rename) fail("rename of " + temp_ + " failed (injected)", EXDEV);
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename of " + temp_ + " failed", errno);
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  try {
    fsync_dir(parent_dir(path_));
  } catch (const CheckpointError& e) {
    throw CheckpointError(path_ + ": " + e.what());
  }
}

void fsync_dir(const std::string& path) {
  const std::string dir = path.empty() ? "." : path;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw CheckpointError(dir + ": cannot open directory to fsync: " + std::strerror(err));
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw CheckpointError(dir + ": fsync of directory failed: " + std::strerror(err));
  }
  ::close(fd);
}

}  // namespace shardscope::engine::checkpoint
