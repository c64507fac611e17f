#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "io/output_error.h"

namespace shardscope::io {

namespace {

constexpr size_t kChunk = size_t{1} << 20;

// Opens a FIFO for writing without blocking forever: open(O_NONBLOCK) fails
// with ENXIO until a reader has it open.
int open_fifo(const std::string& path, int wait_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        const int err = errno;
        ::close(fd);
        throw OutputWriteError(path, "cannot set the FIFO blocking: " + errno_text(err));
      }
      return fd;
    }
    if (errno != ENXIO) throw OutputTargetError(path, "cannot open: " + errno_text(errno));
    if (std::chrono::steady_clock::now() >= deadline)
      throw OutputWriteError(
          path, "is a FIFO and no reader opened it within " + std::to_string(wait_ms) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

OutputFile::OutputFile(const std::string& path, OutputOptions options)
    : path_(path), target_(inspect_output_target(path)) {
  if (target_.kind == TargetKind::in_place) {
    if (options.durability == Durability::fsync)
      throw OutputTargetError(path_,
                              "is a device or FIFO: only a regular file can be written durably "
                              "(fsync)");
    if (target_.descriptor >= 0) {
      // /dev/stdout and the like: the descriptor itself, so that the shell's
      // redirection (its offset, O_APPEND) applies.
      fd_ = ::fcntl(target_.descriptor, F_DUPFD_CLOEXEC, 0);
      if (fd_ < 0) throw OutputTargetError(path_, "descriptor not open: " + errno_text(errno));
    } else if (target_.fifo) {
      fd_ = open_fifo(target_.write_path, options.fifo_reader_wait_ms);
    } else {
      fd_ = ::open(target_.write_path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd_ < 0) throw OutputTargetError(path_, "cannot open: " + errno_text(errno));
    }
  } else {
    AtomicFileOptions atomic;
    atomic.error_path = path_;
    file_ = std::make_unique<AtomicFile>(target_.write_path, options.durability, atomic);
  }
  open_ = true;
  buf_.reserve(kChunk);
}

OutputFile::~OutputFile() {
  abandon();
}

const std::string& OutputFile::temporary() const {
  static const std::string kNone;
  return file_ ? file_->temporary() : kNone;
}

void OutputFile::abandon() noexcept {
  open_ = false;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (file_) file_->abandon();
  buf_.clear();
}

void OutputFile::fail(const std::string& what, int err) {
  abandon();
  throw OutputWriteError(path_, what + ": " + errno_text(err));
}

void OutputFile::put(const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    if (w == 0) fail("write failed", EIO);
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void OutputFile::emit(const char* data, size_t n) {
  if (!file_) {
    put(data, n);
    return;
  }
  try {
    file_->write(data, n);
  } catch (...) {
    abandon();  // the AtomicFile removed its temporary
    throw;
  }
}

void OutputFile::drain() {
  if (buf_.empty()) return;
  emit(buf_.data(), buf_.size());
  buf_.clear();
}

void OutputFile::write(const void* data, size_t n) {
  if (!open_) throw OutputWriteError(path_, "write after the file was closed");
  const char* p = static_cast<const char*>(data);
  if (buf_.size() + n <= kChunk) {
    buf_.append(p, n);
    return;
  }
  drain();
  if (n >= kChunk) {
    emit(p, n);
  } else {
    buf_.append(p, n);
  }
}

void OutputFile::commit() {
  if (!open_) throw OutputWriteError(path_, "commit after the file was closed");
  drain();
  open_ = false;
  if (file_) {
    if (target_.kind == TargetKind::replace) file_->set_mode(target_.mode);
    file_->commit();  // on failure it removed its temporary
    return;
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) fail("close failed", errno);
}

void write_output_file(const std::string& path, std::string_view text, OutputOptions options) {
  OutputFile f(path, options);
  f.write(text);
  f.commit();
}

}  // namespace shardscope::io
