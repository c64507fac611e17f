// Reading trace files as a stream, with bounds on what untrusted input may
// cost: the first bytes decide what the file is before the rest is read, gzip
// is inflated chunk by chunk, and JSON text passes a lexical guard
// (traces/json_guard.h) as it arrives, so garbage, a huge string or a gzip
// bomb is refused after a bounded number of bytes, not after reading (and
// holding) the whole file. docs/traces.md, "Limits on input".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

namespace shardscope::traces {

class GunzipStream;

struct InputLimits {
  // Bytes of one JSON string, key or value, as written (escapes count their
  // written bytes). Trace names and args are far shorter; kernel names of
  // templated libraries reach a few KiB.
  uint64_t max_string_bytes = uint64_t{1} << 20;
  // Nesting of JSON objects and arrays (the readers' limit too).
  size_t max_depth = 64;
  // gzip: decompressed bytes in all, and past `gzip_ratio_from` decompressed
  // bytes at most `max_gzip_ratio` of them per compressed byte (JSON traces
  // compress 5-30x; a deflate bomb reaches ~1000x).
  uint64_t max_gzip_bytes = uint64_t{16} << 30;
  uint64_t max_gzip_ratio = 256;
  uint64_t gzip_ratio_from = uint64_t{64} << 20;
};

// What a read took from the file, for tests and benchmarks (filled as the
// read goes, so also when it throws).
struct InputStats {
  uint64_t file_bytes = 0;  // bytes read from the file (compressed for gzip)
  uint64_t text_bytes = 0;  // bytes handed on (decompressed for gzip)
};

// A trace file as a byte stream, decompressed when it starts with the gzip
// magic (whatever its name). Throws TraceError(io) naming the path.
class InputFile {
 public:
  InputFile(const std::string& path, const InputLimits& limits, InputStats* stats = nullptr);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  bool gzip() const { return gzip_ != nullptr; }
  // Size of the file on disk (0 when not a regular file).
  uint64_t file_size() const { return file_size_; }
  // Appends up to `n` bytes to `out`; returns how many, 0 at the end.
  size_t read(std::string& out, size_t n);
  const std::string& path() const { return path_; }

 private:
  size_t read_raw(char* buf, size_t n);  // from the file, after `pending_`
  std::string path_;
  FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  InputStats own_stats_;
  InputStats* stats_;
  char pending_[2] = {};  // the first bytes, read to look for the gzip magic
  size_t pending_len_ = 0, pending_pos_ = 0;
  std::unique_ptr<GunzipStream> gzip_;
};

// Bytes read per call while streaming (the garbage check reads one chunk).
constexpr size_t kInputChunk = size_t{1} << 16;

// The whole text of a JSON trace file (decompressed), checked by JsonGuard
// chunk by chunk as it is read: throws TraceError at the first byte that is
// not JSON, a string over the limit or nesting over the limit, without
// reading further. `text` may hold bytes already read from `in` (they are
// checked first).
std::string read_json_text(InputFile& in, const InputLimits& limits, std::string text = {});
std::string read_json_text(const std::string& path, const InputLimits& limits = {},
                           InputStats* stats = nullptr);

// The text of `in` as a stream, for readers that parse as it arrives
// (JsonScanner::Source): each call appends up to `n` bytes to `out` and
// returns how many, 0 at the end. Every chunk passes a JsonGuard as it is
// read, and at the end its finish(), so the stream fails where
// read_json_text would, holding a few chunks instead of the text. Reading,
// inflating and the guard run on a second thread, at most ~1 MiB ahead of
// the reader (so parsing overlaps them); its errors reach the reader in
// stream order, after the bytes before them. `head`
// (bytes already read from `in`, which the reader is given too) is checked
// first, here. `in` must outlive the source.
std::function<size_t(std::string& out, size_t n)> json_text_source(InputFile& in,
                                                                   const InputLimits& limits,
                                                                   const std::string& head = {});

}  // namespace shardscope::traces
