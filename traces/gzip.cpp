#include "traces/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <stdexcept>

#include "traces/error.h"

namespace shardscope::traces {

bool is_gzip(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
         static_cast<unsigned char>(data[1]) == 0x8b;
}

std::string gunzip(std::string_view data, const std::string& name, uint64_t max_bytes) {
  std::string out;
  out.reserve(data.size() * 4);
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw TraceError(ErrorKind::io, name, "", "cannot start gzip decompression");
  size_t in_pos = 0;
  char buf[1 << 16];
  try {
    while (in_pos < data.size()) {
      // One gzip member; concatenated members (gzip -c a b) follow each other.
      if (!is_gzip(data.substr(in_pos)))
        throw TraceError(ErrorKind::malformed, name, "byte " + std::to_string(in_pos),
                         "trailing bytes after the gzip stream");
      int rc = Z_OK;
      while (rc != Z_STREAM_END) {
        const size_t avail = std::min<size_t>(data.size() - in_pos, 1u << 30);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + in_pos));
        z.avail_in = static_cast<uInt>(avail);
        z.next_out = reinterpret_cast<Bytef*>(buf);
        z.avail_out = sizeof buf;
        rc = inflate(&z, Z_NO_FLUSH);
        in_pos += avail - z.avail_in;
        const size_t produced = sizeof buf - z.avail_out;
        out.append(buf, produced);
        if (out.size() > max_bytes)
          throw TraceError(ErrorKind::io, name, "",
                           "decompresses to more than " + std::to_string(max_bytes >> 20) +
                               " MiB; decompress it yourself if that is intended");
        if (rc == Z_STREAM_END) break;
        if (rc == Z_OK) continue;
        if (rc == Z_BUF_ERROR) {
          // No progress possible: only when the input is used up mid-stream.
          if (in_pos >= data.size() && produced == 0)
            throw TraceError(ErrorKind::truncated, name, "byte " + std::to_string(in_pos),
                             "the gzip stream ends early");
          continue;
        }
        throw TraceError(ErrorKind::malformed, name, "byte " + std::to_string(in_pos),
                         std::string("corrupt gzip data: ") + (z.msg ? z.msg : "error"));
      }
      inflateReset(&z);
    }
  } catch (...) {
    inflateEnd(&z);
    throw;
  }
  inflateEnd(&z);
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
