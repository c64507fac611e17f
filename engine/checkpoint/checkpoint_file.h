// Every file a checkpoint writes is an io::AtomicFile with Durability::fsync
// (io/atomic_file.h): the bytes go to a temporary beside `path`; commit()
// fsyncs it, renames it over `path` and fsyncs the directory. Readers
// therefore see the previous file or the complete new one, also after a crash
// (which may leave the temporary behind; nothing reads it). A resumed run
// trusts what it loads, so a checkpoint file is complete only once it is on
// disk. This adapter turns io's errors into CheckpointError (a failed save is
// a runtime failure: engine/exec/train.cpp), "'<path>': <what>: <strerror>",
// and applies the test faults below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "io/atomic_file.h"

namespace shardscope::engine::checkpoint {

class CheckpointFile {
 public:
  explicit CheckpointFile(const std::string& path);  // creates the temporary
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  void write(const void* data, size_t size);  // all of it, in chunks of <= 8 MiB
  void commit();                              // fsync, rename, fsync directory
  uint64_t bytes_written() const { return file_.bytes_written(); }

 private:
  io::AtomicFile file_;  // removes the temporary unless committed
};

// fsync of a directory, so that renames and creations in it are durable.
// CheckpointError "'<dir>': ..." on failure.
void fsync_dir(const std::string& dir);

// Fault injection for tests (process-wide; set from one thread while no write
// runs): applied to every checkpoint file.
namespace testing {
using WriteFaults = io::WriteFaults;
void set_write_faults(WriteFaults faults);
void clear_write_faults();
}  // namespace testing

}  // namespace shardscope::engine::checkpoint
