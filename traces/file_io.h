// File helpers shared by the writers and readers: whole-file reads, and
// output files (io/output_file.h: a new or regular file is written to a
// temporary and renamed on commit, a device or FIFO is written in place,
// anything else is refused), so an error never leaves a partial output behind
// and never replaces a device node. Trace outputs are written with
// io::Durability::rename_only: a rerun reproduces them, so they are not
// fsynced (io/atomic_file.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "io/output_file.h"

namespace shardscope::traces {

class GzipDeflater;

// The whole file, decompressed when it is gzip (magic bytes 1f 8b, whatever
// its name; InputLimits' gzip bounds); throws TraceError(io) naming the
// path, or gunzip's errors. No JSON check: traces/input.h's read_json_text
// is the bounded read for JSON traces.
std::string read_file(const std::string& path);

// Bytes in the file; throws TraceError(io).
uint64_t file_size_of(const std::string& path);

// A trace output: io::OutputFile, gzip-compressed when the path ends in
// ".gz". Throws io::OutputTargetError for a path that cannot be an output and
// io::OutputWriteError when writing fails (the temporary is then removed).
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Finishes the gzip stream, writes everything out and puts the file in place.
  void commit();
  // Removes the temporary (also done by the destructor when not committed).
  void abandon() noexcept;
  const std::string& path() const { return file_.path(); }

 private:
  io::OutputFile file_;
  std::unique_ptr<GzipDeflater> gzip_;  // set for ".gz" paths
  std::string compressed_;
};

// Buffers small writes (the JSON writers emit many) and hands them to an
// OutputFile or appends them to a string in large chunks.
class OutBuffer {
 public:
  explicit OutBuffer(OutputFile* file) : file_(file) { buf_.reserve(kChunk + 4096); }
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
  OutputFile* file_ = nullptr;
  std::string* target_ = nullptr;
};

}  // namespace shardscope::traces
