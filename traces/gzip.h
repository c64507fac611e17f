// gzip (RFC 1952) for trace files: PyTorch profiler traces usually arrive as
// .json.gz, and Chrome exports may be written compressed. Thin wrappers over
// zlib with errors as TraceError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardscope::traces {

// True when `data` starts with the gzip magic bytes (1f 8b).
bool is_gzip(std::string_view data);

// The decompressed bytes of every gzip member in `data`. Throws
// TraceError(truncated) when the stream ends early, TraceError(malformed)
// on corrupt data or trailing garbage (naming the compressed byte offset),
// and TraceError(io) past `max_bytes` of output.
std::string gunzip(std::string_view data, const std::string& name,
                   uint64_t max_bytes = uint64_t{16} << 30);

// Streaming gzip compression into a byte sink.
class GzipDeflater {
 public:
  GzipDeflater();
  ~GzipDeflater();
  GzipDeflater(const GzipDeflater&) = delete;
  GzipDeflater& operator=(const GzipDeflater&) = delete;
  // Compresses `n` bytes, appending output to `out`.
  void write(const void* data, size_t n, std::string& out);
  // Ends the stream (trailer), appending to `out`.
  void finish(std::string& out);

 private:
  struct State;
  State* state_;
};

}  // namespace shardscope::traces
