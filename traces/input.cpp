#include "traces/input.h"

#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "traces/error.h"
#include "traces/gzip.h"
#include "traces/json_guard.h"

namespace shardscope::traces {

InputFile::InputFile(const std::string& path, const InputLimits& limits, InputStats* stats)
    : path_(path), stats_(stats ? stats : &own_stats_) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_)
    throw TraceError(ErrorKind::io, path, "", std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fileno(file_), &st) == 0 && S_ISREG(st.st_mode))
    file_size_ = static_cast<uint64_t>(st.st_size);
  pending_len_ = std::fread(pending_, 1, sizeof pending_, file_);
  stats_->file_bytes += pending_len_;
  if (pending_len_ == 2 && static_cast<unsigned char>(pending_[0]) == 0x1f &&
      static_cast<unsigned char>(pending_[1]) == 0x8b) {
    GunzipStream::Bounds bounds;
    bounds.max_bytes = limits.max_gzip_bytes;
    bounds.max_ratio = limits.max_gzip_ratio;
    bounds.ratio_from = limits.gzip_ratio_from;
    gzip_ = std::make_unique<GunzipStream>(
        [this](char* buf, size_t cap) { return read_raw(buf, cap); }, path, bounds);
  }
}

InputFile::~InputFile() {
  gzip_.reset();
  std::fclose(file_);
}

size_t InputFile::read_raw(char* buf, size_t n) {
  size_t got = 0;
  while (got < n && pending_pos_ < pending_len_) buf[got++] = pending_[pending_pos_++];
  if (got < n) {
    const size_t k = std::fread(buf + got, 1, n - got, file_);
    if (k < n - got && std::ferror(file_))
      throw TraceError(ErrorKind::io, path_, "",
                       std::string("read failed: ") + std::strerror(errno));
    stats_->file_bytes += k;
    got += k;
  }
  return got;
}

size_t InputFile::read(std::string& out, size_t n) {
  const size_t old = out.size();
  out.resize(old + n);
  size_t got = 0;
  try {
    if (gzip_) {
      // GunzipStream returns what one inflate step gives; fill up to n.
      while (got < n) {
        const size_t k = gzip_->read(&out[old + got], n - got);
        if (k == 0) break;
        got += k;
      }
    } else {
      got = read_raw(&out[old], n);
    }
  } catch (...) {
    out.resize(old);
    throw;
  }
  out.resize(old + got);
  stats_->text_bytes += got;
  return got;
}

std::string read_json_text(InputFile& in, const InputLimits& limits, std::string text) {
  JsonGuard guard(in.path(), limits);
  guard.feed(text.data(), text.size());
  // Small chunks first (garbage stops after one), then larger ones.
  size_t chunk = kInputChunk;
  bool reserved = false;
  while (true) {
    // Plain files past the first MiBs (garbage and huge strings have failed
    // by then): one allocation of the final size, not a doubling string.
    if (!reserved && !in.gzip() && text.size() >= (size_t{4} << 20)) {
      if (in.file_size() > text.size()) text.reserve(in.file_size());
      reserved = true;
    }
    const size_t old = text.size();
    const size_t n = in.read(text, chunk);
    if (n == 0) break;
    guard.feed(text.data() + old, n);
    if (chunk < (size_t{1} << 20)) chunk *= 2;
  }
  guard.finish();
  return text;
}

namespace {

// The producer half of json_text_source: a thread reads (and inflates) the
// file and runs the guard a few chunks ahead of the parser, so one file's
// import uses two cores. What the parser sees is what the synchronous
// source gave: the same bytes in order, then the first error (guard, gzip
// bound, I/O) in place of the bytes from the chunk where it arose on, or
// the end. Read-ahead is bounded by kAheadBytes (plus one chunk being
// read), so an early parse error still stops the file after a few MiB.
class Prefetch {
 public:
  static constexpr size_t kChunkBytes = size_t{256} << 10;
  static constexpr size_t kAheadBytes = size_t{1} << 20;

  Prefetch(InputFile& in, std::shared_ptr<JsonGuard> guard)
      : in_(in), guard_(std::move(guard)), thread_([this] { produce(); }) {}
  ~Prefetch() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  Prefetch(const Prefetch&) = delete;
  Prefetch& operator=(const Prefetch&) = delete;

  // Appends up to n bytes (whole queued chunks, at least one byte unless at
  // the end); 0 at the end; rethrows the producer's error once the chunks
  // before it are taken.
  size_t take(std::string& out, size_t n) {
    if (n == 0) return 0;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !queue_.empty() || done_; });
    size_t got = 0;
    while (!queue_.empty()) {
      std::string& front = queue_.front();
      const size_t k = std::min(n - got, front.size() - front_pos_);
      out.append(front, front_pos_, k);
      got += k;
      front_pos_ += k;
      if (front_pos_ < front.size()) break;  // n reached inside this chunk
      queued_ -= front.size();
      queue_.pop_front();
      front_pos_ = 0;
      if (got == n) break;
    }
    if (got > 0) {
      lock.unlock();
      changed_.notify_all();
      return got;
    }
    if (error_) std::rethrow_exception(error_);
    return 0;  // done_, nothing queued
  }

 private:
  void produce() {
    try {
      while (true) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [this] { return stop_ || queued_ < kAheadBytes; });
          if (stop_) return;
        }
        std::string chunk;
        chunk.reserve(kChunkBytes);
        if (in_.read(chunk, kChunkBytes) == 0) {
          guard_->finish();
          break;
        }
        guard_->feed(chunk.data(), chunk.size());
        {
          std::lock_guard<std::mutex> lock(mutex_);
          queued_ += chunk.size();
          queue_.push_back(std::move(chunk));
        }
        changed_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    changed_.notify_all();
  }

  InputFile& in_;
  std::shared_ptr<JsonGuard> guard_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> queue_;  // checked text, in file order
  size_t front_pos_ = 0;           // bytes of queue_.front() already taken
  size_t queued_ = 0;              // bytes in queue_
  bool stop_ = false;              // the parser is gone
  bool done_ = false;              // no more chunks: the end, or error_
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

std::function<size_t(std::string& out, size_t n)> json_text_source(InputFile& in,
                                                                   const InputLimits& limits,
                                                                   const std::string& head) {
  auto guard = std::make_shared<JsonGuard>(in.path(), limits);
  guard->feed(head.data(), head.size());  // garbage fails here, before any thread
  auto prefetch = std::make_shared<Prefetch>(in, std::move(guard));
  return [prefetch](std::string& out, size_t n) { return prefetch->take(out, n); };
}

std::string read_json_text(const std::string& path, const InputLimits& limits, InputStats* stats) {
  InputFile in(path, limits, stats);
  return read_json_text(in, limits);
}

}  // namespace shardscope::traces
