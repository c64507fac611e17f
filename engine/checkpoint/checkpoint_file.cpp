#include "engine/checkpoint/checkpoint_file.h"

#include <utility>

#include "engine/checkpoint/checkpoint.h"
#include "io/output_error.h"

namespace shardscope::engine::checkpoint {

namespace {

testing::WriteFaults& faults() {
  static testing::WriteFaults f;
  return f;
}

io::AtomicFile open_durable(const std::string& path) {
  if (path.empty() || path.back() == '/') throw CheckpointError("'" + path + "': not a file path");
  io::AtomicFileOptions options;
  options.create_mode = 0644;
  options.faults = &faults();
  try {
    return io::AtomicFile(path, io::Durability::fsync, std::move(options));
  } catch (const io::OutputError& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace

namespace testing {
void set_write_faults(WriteFaults f) {
  faults() = std::move(f);
}
void clear_write_faults() {
  faults() = WriteFaults{};
}
}  // namespace testing

CheckpointFile::CheckpointFile(const std::string& path) : file_(open_durable(path)) {}

void CheckpointFile::write(const void* data, size_t size) {
  try {
    file_.write(data, size);
  } catch (const io::OutputError& e) {
    throw CheckpointError(e.what());
  }
}

void CheckpointFile::commit() {
  try {
    file_.commit();
  } catch (const io::OutputError& e) {
    throw CheckpointError(e.what());
  }
}

void fsync_dir(const std::string& dir) {
  try {
    io::fsync_folder(dir);
  } catch (const io::OutputError& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace shardscope::engine::checkpoint
