// Files a checkpoint reader must refuse without waiting: a FIFO (opening one
// for reading waits for a writer for ever), a socket, a device; and the cap
// on small files read whole; a save root checked before any training.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>

#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/publish_dir.h"
#include "engine/checkpoint/shard_format.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/engine/checkpoint/sharded_test_model.h"
#include "tests/temp_dir.h"

using namespace shardscope::engine::checkpoint;
using shardscope::test::TempDir;
namespace t = shardscope::test;

namespace {

// Reader::open(dir)'s error, or "" when it accepted the checkpoint. A reader
// that blocks is released after 30 s by opening the FIFO for writing, so the
// test fails (with that said) instead of hanging.
std::string open_error(const std::string& dir, const std::string& fifo) {
  auto pending = std::async(std::launch::async, [dir]() -> std::string {
    try {
      Reader::open(dir);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  });
  if (pending.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // releases the blocked open()
    if (fd >= 0) ::close(fd);
    pending.wait();
    return "BLOCKED: Reader::open waited on " + fifo;
  }
  return pending.get();
}

const Metadata kMeta{{"step", "1"}};

}  // namespace

TEST_CASE("checkpoint: a FIFO in place of a shard file is refused at once, naming it") {
  TempDir dir("ckpt-fifo");
  const std::string d = dir.path.string();
  const auto model = t::small_model();
  t::write_sharded(d, model, t::split_dim0(model, 2), kMeta);
  const std::string shard = d + "/" + shard_file_name(1, 2);
  std::filesystem::remove(shard);
  REQUIRE(::mkfifo(shard.c_str(), 0644) == 0);
  const std::string msg = open_error(d, shard);
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains(shard) && Catch::Contains("not a regular file") &&
                      Catch::Contains("a FIFO (named pipe)"));
}

TEST_CASE("checkpoint: a FIFO as index.json or model.safetensors is refused at once") {
  TempDir dir("ckpt-fifo");
  const std::string d = dir.path.string();
  const std::string index = d + "/index.json";
  REQUIRE(::mkfifo(index.c_str(), 0644) == 0);
  std::string msg = open_error(d, index);
  CHECK_THAT(msg, Catch::Contains(index) && Catch::Contains("a FIFO (named pipe)"));
  std::filesystem::remove(index);
  const std::string consolidated = d + "/model.safetensors";
  REQUIRE(::mkfifo(consolidated.c_str(), 0644) == 0);
  msg = open_error(consolidated, consolidated);
  CHECK_THAT(msg, Catch::Contains(consolidated) && Catch::Contains("a FIFO (named pipe)"));
}

TEST_CASE("checkpoint: a socket or a character device is not read as a checkpoint file") {
  TempDir dir("ckpt-sock");
  const std::string sock_path = (dir.path / "model.safetensors").string();
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(sock >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock_path.size() < sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, sock_path.c_str());
  REQUIRE(::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
  CHECK_THROWS_WITH(ReadOnlyFile(sock_path),
                    Catch::Contains(sock_path) && Catch::Contains("not a regular file"));
  ::close(sock);
  CHECK_THROWS_WITH(ReadOnlyFile("/dev/zero"),
                    Catch::Contains("/dev/zero: not a regular file (it is a character device)"));
}

TEST_CASE("checkpoint: read_small_file names the file, its size and the cap") {
  TempDir dir("ckpt-small");
  const std::string path = (dir.path / "latest").string();
  t::write_bytes(path, std::string(4097, 'x'));
  CHECK_THROWS_WITH(read_small_file(path, 4096, "a `latest` file"),
                    path + ": 4097 bytes, over the 4096-byte limit of a `latest` file");
  t::write_bytes(path, "step-00000002\n");
  CHECK(read_small_file(path, 4096, "a `latest` file") == "step-00000002\n");
}

TEST_CASE("checkpoint: a save root is checked without creating anything") {
  TempDir dir("ckpt-root");
  const std::string d = dir.path.string();
  // Missing roots whose parent exists are fine, with or without a trailing slash.
  CHECK_NOTHROW(check_save_root(d + "/fresh", "step-00000002"));
  CHECK_NOTHROW(check_save_root(d + "/fresh/", ""));
  CHECK_FALSE(std::filesystem::exists(d + "/fresh"));
  CHECK_THROWS_WITH(check_save_root(d + "/a/b", ""),
                    Catch::StartsWith(d + "/a/b: its parent directory " + d + "/a cannot be used"));
  t::write_bytes(d + "/file", "x");
  CHECK_THROWS_WITH(check_save_root(d + "/file", ""),
                    Catch::StartsWith(d + "/file: exists and is not a directory"));
  CHECK_THROWS_WITH(check_save_root(d + "/file/ckpt", ""),
                    d + "/file/ckpt: its parent " + d + "/file is not a directory");
  // An existing root whose step directory is a file: the save could not publish.
  t::write_bytes(d + "/step-00000002", "x");
  CHECK_THROWS_WITH(check_save_root(d, "step-00000002"),
                    Catch::StartsWith(d + "/step-00000002: exists and is not a directory"));
  CHECK_NOTHROW(check_save_root(d, "step-00000003"));
}
