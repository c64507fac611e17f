// File helpers shared by the writers and readers: whole-file reads and
// atomic writes (temp file in the same folder, renamed on commit), so an
// error never leaves a partial output file behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace shardscope::traces {

class GzipDeflater;

// The whole file, decompressed when it is gzip (magic bytes 1f 8b, whatever
// its name; InputLimits' gzip bounds); throws TraceError(io) naming the
// path, or gunzip's errors. No JSON check: traces/input.h's read_json_text
// is the bounded read for JSON traces.
std::string read_file(const std::string& path);

// Bytes in the file; throws TraceError(io).
uint64_t file_size_of(const std::string& path);

class AtomicFile {
 public:
  // Opens "<path>.tmp.<pid>.<n>"; throws TraceError(io). A path ending in
  // ".gz" is written gzip-compressed.
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, closes and renames the temp file onto the path.
  void commit();
  // Removes the temp file (also done by the destructor when not committed).
  void abandon();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void put_raw(const void* data, size_t n);
  std::string tmp_;
  FILE* file_ = nullptr;
  std::unique_ptr<GzipDeflater> gzip_;  // set for ".gz" paths
  std::string compressed_;
};

// Buffers small writes (the JSON writers emit many) and hands them to an
// AtomicFile or appends them to a string in large chunks.
class OutBuffer {
 public:
  explicit OutBuffer(AtomicFile* file) : file_(file) { buf_.reserve(kChunk + 4096); }
  explicit OutBuffer(std::string* target) : target_(target) {}
  ~OutBuffer() = default;
  OutBuffer(const OutBuffer&) = delete;
  OutBuffer& operator=(const OutBuffer&) = delete;

  void put(char c) {
    buf_.push_back(c);
    if (buf_.size() >= kChunk) drain();
  }
  void put(std::string_view s) {
    buf_.append(s.data(), s.size());
    if (buf_.size() >= kChunk) drain();
  }
  void put_int(int64_t v);
  void put_uint(uint64_t v);
  // ns as microseconds with exactly three decimals ("12.345"), the Chrome
  // trace convention for nanosecond precision.
  void put_micros(int64_t ns);
  void put_micros_unsigned(uint64_t ns);
  // A JSON string literal. Escapes quotes, backslashes and control characters
  // (\n, \t, \u001f...); invalid UTF-8 bytes become U+FFFD so the output is
  // always valid JSON. With `blank_controls`, control characters become
  // spaces instead (Chrome exports: no control characters in any string).
  void put_string(std::string_view s, bool blank_controls = false);
  // Writes out everything buffered.
  void flush() { drain(); }

 private:
  static constexpr size_t kChunk = 1 << 20;
  void drain();
  std::string buf_;
  AtomicFile* file_ = nullptr;
  std::string* target_ = nullptr;
};

}  // namespace shardscope::traces
