// Atomic replacement of a regular file, the one implementation in the tree
// (io::OutputFile uses it for new and regular files, engine/checkpoint for
// every checkpoint file): the bytes go to "<path>.tmp.<pid>.<n>" in the same
// folder, registered with io/temp_registry.h so that SIGINT, SIGTERM and
// SIGHUP remove it, and commit() renames it over `path`. Readers therefore
// see the previous file or the complete new one, never a mix. Any failure,
// and destruction before commit(), removes the temporary; a crash or SIGKILL
// may leave it behind (nothing reads it).
//
// How durable a committed file is, is an explicit choice (Durability):
//   rename_only: the rename alone. Every process sees the old file or the
//     new one, but after a power loss or a kernel crash the new name may
//     hold an empty or partial file. Enough for outputs that rerunning the
//     command reproduces (traces, exports, reports, sweeps), without
//     waiting for the disk on every output.
//   fsync: fsync of the file before the rename and of its folder after it,
//     so that once commit() returned the new file survives a crash.
//     Checkpoints need it: a resumed run trusts what it loads, and the
//     previous checkpoint is removed once the new one is published.
//
// The caller decides what `path` may be (io::OutputFile inspects it first;
// checkpoint paths lie in folders the checkpoint writer made): the temporary
// is created with O_EXCL | O_NOFOLLOW and the rename replaces whatever
// regular file is at `path`. Errors name the path: OutputTargetError when the
// temporary cannot be created, OutputWriteError for every later failure.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace shardscope::io {

enum class Durability {
  rename_only,  // atomic for readers, not across a crash (re-runnable outputs)
  fsync,        // atomic and durable once commit() returns (checkpoints)
};

// Fault injection for tests (engine/checkpoint's crash and disk-full tests).
// A file applies the faults its options point at, read at every write and at
// commit.
struct WriteFaults {
  int64_t fail_after_bytes = -1;  // >= 0: a chunk reaching past this many bytes fails (ENOSPC)
  bool fail_fsync = false;        // the file's fsync fails (EIO); Durability::fsync only
  bool fail_rename = false;       // the rename fails (EXDEV)
  // Called after every chunk (<= 8 MiB) written to a temporary, with its path
  // and the bytes written so far.
  std::function<void(const std::string& temp_path, uint64_t bytes_written)> on_write;
};

struct AtomicFileOptions {
  mode_t create_mode = 0666;  // permission bits of the new file, before the umask
  // The path errors name (default: the file written): io::OutputFile names
  // the path the user gave, not the file a symbolic link resolved to.
  std::string error_path;
  const WriteFaults* faults = nullptr;  // tests only
};

class AtomicFile {
 public:
  // Creates the temporary; throws OutputTargetError when it cannot.
  AtomicFile(const std::string& path, Durability durability, AtomicFileOptions options = {});
  ~AtomicFile();  // abandon()
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // All of it, unbuffered, in chunks of at most 8 MiB.
  void write(const void* data, size_t n);
  // Permission bits the file gets at commit (a replaced file keeps its own).
  void set_mode(mode_t mode);
  // [fsync,] close, rename into place[, fsync of the folder].
  void commit();
  // Closes and removes the temporary; never throws.
  void abandon() noexcept;

  const std::string& path() const { return path_; }
  Durability durability() const { return durability_; }
  // The temporary being written; empty after commit() or abandon().
  const std::string& temporary() const { return temp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);

  std::string path_;
  Durability durability_;
  AtomicFileOptions options_;
  std::string temp_;
  int temp_slot_ = -1;
  int fd_ = -1;
  bool set_mode_ = false;
  mode_t mode_ = 0;
  uint64_t written_ = 0;
};

// fsync of a folder, so that renames and creations in it are durable.
// Throws OutputWriteError naming the folder.
void fsync_folder(const std::string& folder);

}  // namespace shardscope::io
