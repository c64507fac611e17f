// Atomic replacement of a file: the bytes go to "<path>.tmp.<pid>" in the same
// directory; commit() fsyncs it, renames it over `path` and fsyncs the directory.
// Readers therefore see the previous file or the complete new one, never a mix,
// also after a crash (a crash may leave the temporary behind; nothing reads it).
// Any failure, and destruction before commit(), removes the temporary. Errors are
// CheckpointError "<path>: <what>: <strerror(errno)>". Two writers of the same path
// in one process at once are not supported (they would share the temporary's name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace shardscope::engine::checkpoint {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates the temporary
  ~AtomicFile();                          // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);  // all of it, in chunks of <= 8 MiB
  void commit();                              // fsync, rename, fsync directory
  uint64_t bytes_written() const { return written_; }
  const std::string& temp_path() const { return temp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  void discard() noexcept;

  std::string path_, temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// fsync of a directory, so that renames and creations in it are durable.
// CheckpointError "<dir>: ..." on failure.
void fsync_dir(const std::string& dir);

// Fault injection for tests (process-wide; set from one thread while no write runs).
namespace testing {
struct WriteFaults {
  int64_t fail_after_bytes = -1;  // >= 0: a write reaching past this many bytes fails (ENOSPC)
  bool fail_fsync = false;        // the file's fsync fails (EIO)
  bool fail_rename = false;       // the rename fails (EXDEV)
  // Called after every chunk written to a temporary, with its path and byte count so far.
  std::function<void(const std::string& temp_path, uint64_t bytes_written)> on_write;
};
void set_write_faults(WriteFaults faults);
void clear_write_faults();
}  // namespace testing

}  // namespace shardscope::engine::checkpoint
