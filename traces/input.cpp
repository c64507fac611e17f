#include "traces/input.h"

#include <sys/stat.h>
#include <cerrno>
#include <cstring>

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

std::function<size_t(std::string& out, size_t n)> json_text_source(InputFile& in,
                                                                   const InputLimits& limits,
                                                                   const std::string& head) {
  auto guard = std::make_shared<JsonGuard>(in.path(), limits);
  guard->feed(head.data(), head.size());
  return [&in, guard](std::string& out, size_t n) {
    const size_t old = out.size();
    const size_t got = in.read(out, n);
    if (got == 0) {
      guard->finish();
    } else {
      guard->feed(out.data() + old, got);
    }
    return got;
  };
}

std::string read_json_text(const std::string& path, const InputLimits& limits, InputStats* stats) {
  InputFile in(path, limits, stats);
  return read_json_text(in, limits);
}

}  // namespace shardscope::traces
