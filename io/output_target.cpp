#include "io/output_target.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

#include "io/output_error.h"

namespace shardscope::io {

namespace {

std::string parent_folder(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The folder that will hold the temporary must exist and take new files.
void check_folder_writable(const std::string& shown, const std::string& file) {
  const std::string folder = parent_folder(file);
  struct stat st;
  if (::stat(folder.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) throw OutputTargetError(shown, "folder '" + folder + "' does not exist");
    throw OutputTargetError(shown, "cannot use folder '" + folder + "': " + errno_text(err));
  }
  if (!S_ISDIR(st.st_mode)) throw OutputTargetError(shown, "'" + folder + "' is not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw OutputTargetError(shown,
                            "cannot create files in folder '" + folder + "': " + errno_text(errno));
}

// N when `at` is /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N or
// /proc/<this pid>/fd/N; -1 otherwise.
int descriptor_of(const std::string& at) {
  std::string rest;
  for (const std::string& prefix :
       {std::string("/dev/fd/"), std::string("/proc/self/fd/"),
        std::string("/proc/thread-self/fd/"), "/proc/" + std::to_string(::getpid()) + "/fd/"})
    if (at.rfind(prefix, 0) == 0) rest = at.substr(prefix.size());
  if (rest.empty() || rest.size() > 9 || rest.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(rest);
}

// True when following `path`'s symbolic links passes through a process's file
// descriptor table (/dev/stdout -> /proc/self/fd/1): such a path names an
// open descriptor, written in place whatever it is. `descriptor`: this
// process's descriptor number when the link names one of them.
bool links_through_fd_table(const std::string& path, int& descriptor) {
  std::string at = path;
  for (int hop = 0; hop < 16; ++hop) {
    descriptor = descriptor_of(at);
    if (descriptor >= 0 || at.rfind("/proc/", 0) == 0 || at.rfind("/dev/fd/", 0) == 0) return true;
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(at.c_str(), buf, sizeof buf - 1);
    if (n < 0) return false;
    std::string next(buf, static_cast<size_t>(n));
    if (next.empty()) return false;
    at = next[0] == '/' ? next : parent_folder(at) + "/" + next;
  }
  return false;
}

OutputTarget classify_existing(const std::string& shown, const std::string& file,
                               const struct stat& st) {
  OutputTarget t;
  t.write_path = file;
  if (S_ISREG(st.st_mode)) {
    if (::access(file.c_str(), W_OK) != 0)
      throw OutputTargetError(shown, "is not writable (" + errno_text(errno) + ")");
    check_folder_writable(shown, file);
    t.kind = TargetKind::replace;
    t.mode = st.st_mode & 07777;
    return t;
  }
  if (S_ISDIR(st.st_mode)) throw OutputTargetError(shown, "is a directory");
  if (S_ISBLK(st.st_mode))
    throw OutputTargetError(shown, "is a block device: refusing to write over it");
  if (S_ISSOCK(st.st_mode)) throw OutputTargetError(shown, "is a socket: cannot write to it");
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    if (::access(file.c_str(), W_OK) != 0)
      throw OutputTargetError(shown, "is not writable (" + errno_text(errno) + ")");
    t.kind = TargetKind::in_place;
    t.fifo = S_ISFIFO(st.st_mode);
    return t;
  }
  throw OutputTargetError(shown, "is not a regular file, device or FIFO");
}

}  // namespace

OutputTarget inspect_output_target(const std::string& path) {
  if (path.empty()) throw OutputTargetError(path, "empty output path");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT) throw OutputTargetError(path, errno_text(err));
    check_folder_writable(path, path);
    OutputTarget t;
    t.kind = TargetKind::create;
    t.write_path = path;
    return t;
  }
  if (!S_ISLNK(st.st_mode)) return classify_existing(path, path, st);

  int descriptor = -1;
  if (links_through_fd_table(path, descriptor)) {
    OutputTarget t;
    t.kind = TargetKind::in_place;
    t.write_path = path;
    t.descriptor = descriptor;
    if (::stat(path.c_str(), &st) == 0) t.fifo = S_ISFIFO(st.st_mode);
    return t;
  }
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      throw OutputTargetError(path, "is a symbolic link to a file that does not exist");
    throw OutputTargetError(path, errno_text(err));
  }
  std::unique_ptr<char, decltype(&std::free)> resolved(::realpath(path.c_str(), nullptr),
                                                       &std::free);
  if (!resolved) throw OutputTargetError(path, "cannot resolve link: " + errno_text(errno));
  return classify_existing(path, resolved.get(), st);
}

}  // namespace shardscope::io
