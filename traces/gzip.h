// gzip (RFC 1952) for trace files: PyTorch profiler traces usually arrive as
// .json.gz, and Chrome exports may be written compressed. Thin wrappers over
// zlib with errors as TraceError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace shardscope::traces {

// True when `data` starts with the gzip magic bytes (1f 8b).
bool is_gzip(std::string_view data);

// Streaming gzip decompression: compressed bytes come from `source` in
// chunks, decompressed bytes go out in chunks, so neither side is held whole.
// Several members one after the other read as one stream. Errors as gunzip
// below, at the first bad compressed byte; the bounds are checked as output
// is produced, so a gzip bomb stops after max_bytes (or the ratio bound) of
// output, not at the end.
class GunzipStream {
 public:
  // Fills `buf` with up to `cap` compressed bytes; 0 at the end of input.
  using Source = std::function<size_t(char* buf, size_t cap)>;
  struct Bounds {
    uint64_t max_bytes = uint64_t{16} << 30;  // decompressed bytes in all
    // Past `ratio_from` decompressed bytes, refuse more than `max_ratio`
    // decompressed bytes per compressed byte read (0 = no ratio bound).
    uint64_t max_ratio = 0;
    uint64_t ratio_from = 0;
  };
  GunzipStream(Source source, std::string name, Bounds bounds);
  ~GunzipStream();
  GunzipStream(const GunzipStream&) = delete;
  GunzipStream& operator=(const GunzipStream&) = delete;

  // Up to `cap` (> 0) decompressed bytes into `out`; 0 at the end of the
  // last member.
  size_t read(char* out, size_t cap);
  uint64_t compressed_bytes() const { return consumed_; }
  uint64_t decompressed_bytes() const { return produced_; }

 private:
  struct State;
  bool refill();  // false at the end of input
  void check_bounds();
  std::unique_ptr<State> state_;
  Source source_;
  std::string name_;
  Bounds bounds_;
  uint64_t consumed_ = 0;  // compressed bytes taken by inflate
  uint64_t produced_ = 0;
};

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
