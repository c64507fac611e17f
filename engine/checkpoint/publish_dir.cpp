#include "engine/checkpoint/publish_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_file.h"

namespace shardscope::engine::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStagingPrefix = ".staging-";

[[noreturn]] void fail_errno(const std::string& what, int err) {
  throw CheckpointError(what + ": " + std::strerror(err));
}

}  // namespace

SaveLock::SaveLock(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw CheckpointError(root + ": cannot create directory: " + ec.message());
  const std::string path = root + "/.save-lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_errno(path + ": cannot open the save lock", errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw CheckpointError(root +
                            ": another process is saving a checkpoint into this directory "
                            "(it holds " +
                            path + "); save into another directory or wait for it");
    fail_errno(path + ": cannot lock", err);
  }
}

SaveLock::~SaveLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

void check_save_root(const std::string& root, const std::string& name) {
  if (root.empty()) throw CheckpointError("the checkpoint directory is an empty path");
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) fail_errno(root + ": cannot stat", errno);
    // Missing: the save creates it, in a parent that must exist (one level only).
    fs::path target = fs::path(root).lexically_normal();
    if (!target.has_filename()) target = target.parent_path();  // "a/b/" names a/b
    fs::path parent = target.parent_path();
    if (parent.empty()) parent = ".";
    const std::string p = parent.string();
    if (::stat(p.c_str(), &st) != 0) {
      const int err = errno;
      throw CheckpointError(root + ": its parent directory " + p +
                            " cannot be used: " + std::strerror(err) + " (the save creates " +
                            root + " itself, not its parents)");
    }
    if (!S_ISDIR(st.st_mode))
      throw CheckpointError(root + ": its parent " + p + " is not a directory");
    if (::access(p.c_str(), W_OK | X_OK) != 0)
      fail_errno(root + ": cannot be created in " + p, errno);
    return;
  }
  if (!S_ISDIR(st.st_mode))
    throw CheckpointError(root +
                          ": exists and is not a directory (a checkpoint is saved into a "
                          "directory)");
  if (::access(root.c_str(), W_OK | X_OK) != 0) fail_errno(root + ": not writable", errno);
  const std::string lock_path = root + "/.save-lock";
  const int fd = ::open(lock_path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    // Shared: ranks probing at the same time do not see each other; a save's
    // exclusive lock is seen.
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);  // releases the probe's lock
    if (held)
      throw CheckpointError(root +
                            ": another process is saving a checkpoint into this directory "
                            "(it holds " +
                            lock_path + "); save into another directory or wait for it");
  }
  if (!name.empty()) {
    const std::string step = root + "/" + name;
    if (::lstat(step.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
      throw CheckpointError(step +
                            ": exists and is not a directory; the save would not replace it");
  }
}

std::string staging_path(const std::string& root, const std::string& name) {
  return root + "/" + kStagingPrefix + name;
}

int remove_stale_staging(const std::string& root) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind(kStagingPrefix, 0) == 0) stale.push_back(it->path());
  if (ec) throw CheckpointError(root + ": cannot list: " + ec.message());
  for (const fs::path& p : stale) remove_tree(p.string());
  return static_cast<int>(stale.size());
}

void make_fresh_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) fail_errno(path + ": cannot create directory", errno);
  fsync_dir(fs::path(path).parent_path().string());
}

std::string publish_dir(const std::string& staging, const std::string& root,
                        const std::string& name) {
  const std::string final_path = root + "/" + name;
  struct stat st {};
  const bool exists = ::lstat(final_path.c_str(), &st) == 0;
  if (exists && !S_ISDIR(st.st_mode))
    throw CheckpointError(final_path + ": exists and is not a directory; not replacing it");
  if (!exists) {
    if (std::rename(staging.c_str(), final_path.c_str()) != 0)
      fail_errno("cannot rename " + staging + " to " + final_path, errno);
    fsync_dir(root);
    return "";
  }
  // Swap: final_path becomes the new directory, staging the old one.
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) != 0) {
    const int err = errno;
    if (err == EINVAL || err == ENOSYS)
      throw CheckpointError(final_path +
                            ": already exists and this filesystem cannot exchange directories "
                            "atomically (renameat2 RENAME_EXCHANGE: " +
                            std::strerror(err) +
                            "); the previous checkpoint is kept and the new "
                            "one is left complete in " +
                            staging + " until the next save: save into another directory");
    fail_errno("cannot exchange " + staging + " with " + final_path, err);
  }
  fsync_dir(root);
  return staging;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw CheckpointError(path + ": cannot remove: " + ec.message());
}

void write_text_file_atomically(const std::string& path, const std::string& text) {
  CheckpointFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace shardscope::engine::checkpoint
