// An output file that never destroys what it replaces (io/output_target.h
// says what each kind of path gets):
//   - a new path or a regular file is written through io::AtomicFile
//     (io/atomic_file.h): to "<file>.tmp.<pid>.<n>" in the same folder,
//     renamed over it by commit(), so readers see the old file or the whole
//     new one, with OutputOptions::durability; the new file keeps the old
//     one's permission bits;
//   - a character device or a FIFO is written in place (a FIFO waits, at most
//     OutputOptions::fifo_reader_wait_ms, for a reader to open it), unless
//     the durability asked for is fsync (OutputTargetError: only a regular
//     file can be made durable);
//   - anything else is refused by the constructor (OutputTargetError).
// Every write, the flush, the close and the rename are checked: a failure
// throws OutputWriteError naming the path and removes the temporary. An
// object destroyed without commit() removes its temporary; SIGINT, SIGTERM
// and SIGHUP remove it too (io/temp_registry.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "io/atomic_file.h"
#include "io/output_target.h"

namespace shardscope::io {

struct OutputOptions {
  int fifo_reader_wait_ms = 60000;  // in-place FIFO: how long to wait for a reader
  // Outputs that rerunning the command reproduces need no fsync (the
  // trade-off is in io/atomic_file.h); a writer that needs the file to
  // survive a crash says Durability::fsync.
  Durability durability = Durability::rename_only;
};

class OutputFile {
 public:
  explicit OutputFile(const std::string& path, OutputOptions options = {});
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Writes out the buffer, closes, and renames the temporary into place.
  void commit();
  // Removes the temporary (in place: closes); never throws.
  void abandon() noexcept;

  const std::string& path() const { return path_; }
  bool in_place() const { return target_.kind == TargetKind::in_place; }
  // The temporary being written; empty in place or after commit/abandon.
  const std::string& temporary() const;

 private:
  void drain();
  void emit(const char* data, size_t n);  // to the AtomicFile or in place
  void put(const char* data, size_t n);   // in place
  [[noreturn]] void fail(const std::string& what, int err);

  std::string path_;
  OutputTarget target_;
  std::unique_ptr<AtomicFile> file_;  // create and replace
  int fd_ = -1;                       // in place
  bool open_ = false;
  std::string buf_;
};

// The whole text in one go.
void write_output_file(const std::string& path, std::string_view text, OutputOptions options = {});

}  // namespace shardscope::io
