// Publishing a checkpoint directory atomically. A save never writes into the
// directory a reader may load: it writes into a staging directory beside it,
// and only once every file there is complete and fsynced is the staging
// directory put in place with one rename (or, when a directory of that name
// already exists, one renameat2(RENAME_EXCHANGE), which swaps the two; rename(2)
// cannot replace a non-empty directory). A process killed at any point leaves
// either the previous directory or the complete new one under the final name,
// plus possibly a staging directory nothing reads (removed by the next save).
//
// Layout under a checkpoint root DIR:
//   DIR/.save-lock             flock()ed by the saving process for the whole save
//                              (released by the kernel when that process dies)
//   DIR/.staging-<name>        a save in progress, or its leftover
//   DIR/<name>                 published directories
#pragma once

#include <string>

namespace shardscope::engine::checkpoint {

// Exclusive, non-blocking lock of a checkpoint root (created if missing) for
// one save. Throws CheckpointError when another live process holds it.
class SaveLock {
 public:
  explicit SaveLock(const std::string& root);
  ~SaveLock();
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

 private:
  int fd_ = -1;
};

// Refuses, before any work is done, a root a save would fail on: root exists
// and is not a directory; root is missing and its parent is missing or not a
// directory; root (or, when missing, its parent) is not writable; another
// live process holds root/.save-lock; root/<name> (name non-empty) exists and
// is not a directory. Creates nothing. Throws CheckpointError naming the path.
// A save can still fail later (disk full, another run takes the lock meanwhile).
void check_save_root(const std::string& root, const std::string& name);

// DIR/.staging-<name>.
std::string staging_path(const std::string& root, const std::string& name);

// Removes every DIR/.staging-* left by a save that died. Call with the root's
// SaveLock held (then no live save owns one). Returns how many were removed.
int remove_stale_staging(const std::string& root);

// Creates `path` (which must not exist) and fsyncs its parent.
void make_fresh_dir(const std::string& path);

// Puts staging (complete, its files fsynced) in place as root/name and fsyncs
// root. Returns the path now holding the directory it replaced (the staging
// path, after the exchange), or "" when root/name did not exist; the caller
// removes it once nothing refers to it. Throws CheckpointError, leaving
// root/name as it was, when the filesystem cannot exchange directories.
std::string publish_dir(const std::string& staging, const std::string& root,
                        const std::string& name);

// rm -rf `path` (no error when absent); throws CheckpointError on failure.
void remove_tree(const std::string& path);

// Whole-file atomic replacement of a small text file (CheckpointFile).
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace shardscope::engine::checkpoint
