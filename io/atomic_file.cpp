#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "io/output_error.h"
#include "io/temp_registry.h"

namespace shardscope::io {

namespace {

constexpr size_t kChunkBytes = size_t{8} << 20;

std::string parent_folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, Durability durability, AtomicFileOptions options)
    : path_(path), durability_(durability), options_(std::move(options)) {
  if (options_.error_path.empty()) options_.error_path = path_;
  // Unique per process and object: two writers of one path never share a temporary.
  static std::atomic<unsigned> counter{0};
  temp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  temp_slot_ = register_temporary(temp_);  // before it exists: a signal never misses it
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
               options_.create_mode);
  if (fd_ < 0) {
    const int err = errno;
    unregister_temporary(temp_slot_);
    temp_slot_ = -1;
    const std::string temp = temp_;
    temp_.clear();
    throw OutputTargetError(options_.error_path,
                            "cannot create temporary file '" + temp + "': " + errno_text(err));
  }
}

AtomicFile::~AtomicFile() {
  abandon();
}

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    temp_.clear();
  }
  unregister_temporary(temp_slot_);
  temp_slot_ = -1;
}

void AtomicFile::fail(const std::string& what, int err) {
  abandon();
  throw OutputWriteError(options_.error_path, what + ": " + errno_text(err));
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw OutputWriteError(options_.error_path, "write after the file was closed");
  const WriteFaults* faults = options_.faults;
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min(n, kChunkBytes);
    if (faults && faults->fail_after_bytes >= 0 &&
        written_ + chunk > static_cast<uint64_t>(faults->fail_after_bytes))
      fail("write failed (injected)", ENOSPC);
    size_t done = 0;
    while (done < chunk) {
      const ssize_t w = ::write(fd_, p + done, chunk - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("write failed", errno);
      }
      if (w == 0) fail("write failed", EIO);
      done += static_cast<size_t>(w);
    }
    written_ += chunk;
    p += chunk;
    n -= chunk;
    if (faults && faults->on_write) faults->on_write(temp_, written_);
  }
}

void AtomicFile::set_mode(mode_t mode) {
  set_mode_ = true;
  mode_ = mode;
}

void AtomicFile::commit() {
  if (fd_ < 0) throw OutputWriteError(options_.error_path, "commit after the file was closed");
  const WriteFaults* faults = options_.faults;
  if (set_mode_ && ::fchmod(fd_, mode_) != 0)
    fail("cannot keep the permission bits of the file it replaces", errno);
  if (durability_ == Durability::fsync) {
    if (faults && faults->fail_fsync) fail("fsync failed (injected)", EIO);
    if (::fsync(fd_) != 0) fail("fsync failed", errno);
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) fail("close failed", errno);
  if (faults && faults->fail_rename)
    fail("cannot rename the temporary file '" + temp_ + "' into place (injected)", EXDEV);
  if (std::rename(temp_.c_str(), path_.c_str()) != 0)
    fail("cannot rename the temporary file '" + temp_ + "' into place", errno);
  temp_.clear();
  unregister_temporary(temp_slot_);
  temp_slot_ = -1;
  // The rename is durable only once the folder's entry is on disk.
  if (durability_ == Durability::fsync) fsync_folder(parent_folder(path_));
}

void fsync_folder(const std::string& folder) {
  const std::string dir = folder.empty() ? "." : folder;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw OutputWriteError(dir, "cannot open the folder to fsync it: " + errno_text(errno));
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw OutputWriteError(dir, "fsync of the folder failed: " + errno_text(err));
  }
  ::close(fd);
}

}  // namespace shardscope::io
