// What an output path is, decided before anything is written (lstat, then
// stat through symbolic links):
//   - nothing there yet            -> create: temporary file, renamed into place;
//   - a regular file               -> replace: the same, keeping its permission bits;
//   - a character device or a FIFO -> in place: opened and written as it is
//     (/dev/null, /dev/full, a terminal, a pipe to another process), never
//     replaced by a regular file;
//   - a link through /proc/self/fd or /dev/fd (/dev/stdout, /dev/stderr)
//                                  -> in place, whatever the descriptor is;
//   - a directory, a block device, a socket, a read-only file, a missing or
//     unwritable folder, a dangling symbolic link -> OutputTargetError.
// A symbolic link to a regular file replaces the file it points to, so the
// link stays a link.
#pragma once

#include <sys/types.h>

#include <string>

namespace shardscope::io {

enum class TargetKind { create, replace, in_place };

struct OutputTarget {
  TargetKind kind = TargetKind::create;
  std::string
      write_path;       // the file created, replaced or opened (links resolved for create/replace)
  bool fifo = false;    // in place: a FIFO (opening waits for a reader, bounded)
  mode_t mode = 0;      // replace: the permission bits the new file keeps
  int descriptor = -1;  // in place through /dev/fd/N or /proc/self/fd/N: N (written
                        // through a dup of it, sharing its offset, never reopened)
};

// Throws OutputTargetError naming `path` and why it cannot be written.
OutputTarget inspect_output_target(const std::string& path);

// The same checks, for commands that validate their output flags before long
// work (a sweep, a training run): throws OutputTargetError.
inline void check_output_target(const std::string& path) {
  (void)inspect_output_target(path);
}

}  // namespace shardscope::io
