#include "traces/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "traces/error.h"

namespace shardscope::traces {

bool is_gzip(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
         static_cast<unsigned char>(data[1]) == 0x8b;
}

struct GunzipStream::State {
  z_stream z{};
  std::unique_ptr<char[]> in{new char[kChunk]};
  size_t in_len = 0;  // bytes in `in`; z.next_in/avail_in point into it
  bool source_done = false;
  bool in_member = false;
  bool done = false;
  static constexpr size_t kChunk = 1 << 16;
};

GunzipStream::GunzipStream(Source source, std::string name, Bounds bounds)
    : state_(new State), source_(std::move(source)), name_(std::move(name)), bounds_(bounds) {
  if (inflateInit2(&state_->z, 16 + MAX_WBITS) != Z_OK)
    throw TraceError(ErrorKind::io, name_, "", "cannot start gzip decompression");
}

GunzipStream::~GunzipStream() {
  inflateEnd(&state_->z);
}

bool GunzipStream::refill() {
  State& st = *state_;
  if (st.source_done) return false;
  // Keep what inflate has not taken yet (at most one byte of a member's
  // magic), then append.
  const size_t keep = st.z.avail_in;
  if (keep) std::memmove(st.in.get(), st.z.next_in, keep);
  const size_t n = source_(st.in.get() + keep, State::kChunk - keep);
  if (n == 0) st.source_done = true;
  st.z.next_in = reinterpret_cast<Bytef*>(st.in.get());
  st.z.avail_in = static_cast<uInt>(keep + n);
  return n > 0;
}

void GunzipStream::check_bounds() {
  if (produced_ > bounds_.max_bytes)
    throw TraceError(ErrorKind::io, name_, "",
                     "decompresses to more than " + std::to_string(bounds_.max_bytes >> 20) +
                         " MiB; decompress it yourself if that is intended");
  if (bounds_.max_ratio && produced_ > bounds_.ratio_from &&
      produced_ / bounds_.max_ratio > consumed_)
    throw TraceError(ErrorKind::io, name_, "byte " + std::to_string(consumed_),
                     "decompresses to more than " + std::to_string(bounds_.max_ratio) +
                         " times its compressed size (" + std::to_string(produced_) +
                         " bytes from " + std::to_string(consumed_) +
                         "; a gzip bomb?); decompress it yourself if that is intended");
}

size_t GunzipStream::read(char* out, size_t cap) {
  State& st = *state_;
  z_stream& z = st.z;
  size_t got = 0;
  while (got == 0 && !st.done) {
    if (!st.in_member) {
      // Between members: the end of input, or the next member's magic.
      if (z.avail_in < 2) refill();
      if (z.avail_in == 0) {
        st.done = true;
        break;
      }
      if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b)
        throw TraceError(ErrorKind::malformed, name_, "byte " + std::to_string(consumed_),
                         "trailing bytes after the gzip stream");
      inflateReset(&z);
      st.in_member = true;
    }
    if (z.avail_in == 0) refill();
    const uInt before_in = z.avail_in;
    z.next_out = reinterpret_cast<Bytef*>(out + got);
    z.avail_out = static_cast<uInt>(std::min<size_t>(cap - got, 1u << 30));
    const uInt before_out = z.avail_out;
    const int rc = inflate(&z, Z_NO_FLUSH);
    consumed_ += before_in - z.avail_in;
    const size_t produced = before_out - z.avail_out;
    produced_ += produced;
    got += produced;
    check_bounds();
    if (rc == Z_STREAM_END) {
      st.in_member = false;
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR) {
      // No progress possible: only when the input is used up mid-member.
      if (z.avail_in == 0 && st.source_done && produced == 0)
        throw TraceError(ErrorKind::truncated, name_, "byte " + std::to_string(consumed_),
                         "the gzip stream ends early");
      continue;
    }
    throw TraceError(ErrorKind::malformed, name_, "byte " + std::to_string(consumed_),
                     std::string("corrupt gzip data: ") + (z.msg ? z.msg : "error"));
  }
  return got;
}

std::string gunzip(std::string_view data, const std::string& name, uint64_t max_bytes) {
  size_t pos = 0;
  GunzipStream::Bounds bounds;
  bounds.max_bytes = max_bytes;
  GunzipStream in(
      [&](char* buf, size_t cap) {
        const size_t n = std::min(cap, data.size() - pos);
        std::memcpy(buf, data.data() + pos, n);
        pos += n;
        return n;
      },
      name, bounds);
  std::string out;
  char buf[1 << 16];
  while (const size_t n = in.read(buf, sizeof buf)) out.append(buf, n);
  return out;
}

struct GzipDeflater::State {
  z_stream z{};
};

GzipDeflater::GzipDeflater() : state_(new State) {
  if (deflateInit2(&state_->z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    delete state_;
    throw std::runtime_error("cannot start gzip compression");
  }
}

GzipDeflater::~GzipDeflater() {
  deflateEnd(&state_->z);
  delete state_;
}

namespace {

void pump(z_stream& z, int flush, std::string& out) {
  char buf[1 << 16];
  int rc = Z_OK;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = deflate(&z, flush);
    if (rc == Z_STREAM_ERROR) throw std::runtime_error("gzip compression failed");
    out.append(buf, sizeof buf - z.avail_out);
  } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
}

}  // namespace

void GzipDeflater::write(const void* data, size_t n, std::string& out) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, 1u << 30);
    state_->z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
    state_->z.avail_in = static_cast<uInt>(chunk);
    pump(state_->z, Z_NO_FLUSH, out);
    p += chunk;
    n -= chunk;
  }
}

void GzipDeflater::finish(std::string& out) {
  state_->z.next_in = nullptr;
  state_->z.avail_in = 0;
  pump(state_->z, Z_FINISH, out);
}

}  // namespace shardscope::traces
