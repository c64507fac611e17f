// Atomic writes: a failed write (injected ENOSPC/EIO/EXDEV, a real EISDIR/ENOENT)
// leaves the previous file intact and no temporary; a writer SIGKILLed mid-write
// leaves the previous checkpoint loadable and equal.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_file.h"
#include "engine/checkpoint/shard_format.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "tests/engine/checkpoint/sharded_test_model.h"
#include "tests/temp_dir.h"

using namespace shardscope::engine::checkpoint;
using shardscope::test::TempDir;
namespace t = shardscope::test;

namespace {

struct FaultGuard {
  explicit FaultGuard(testing::WriteFaults f) { testing::set_write_faults(std::move(f)); }
  ~FaultGuard() { testing::clear_write_faults(); }
};

void write_one(const std::string& path, const std::vector<float>& w, const std::string& step) {
  write_safetensors(path, {{"w", {static_cast<int64_t>(w.size())}, w.data()}}, {{"step", step}});
}

// Runs `write` in a child that stops once it has written `stop_after` bytes of a
// temporary, reports through a pipe, and is then SIGKILLed. Returns the temporary's
// size at the kill.
template <typename Write>
uint64_t kill_mid_write(Write write, uint64_t stop_after) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    testing::WriteFaults f;
    f.on_write = [&](const std::string& temp, uint64_t written) {
      if (written < stop_after) return;
      struct stat st {};
      const uint64_t size = ::stat(temp.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
      if (::write(fds[1], &size, sizeof size) != sizeof size) ::_exit(3);
      for (;;) ::pause();  // mid-write until killed
    };
    testing::set_write_faults(std::move(f));
    try {
      write();
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(1);  // finished without reaching stop_after: the test is wrong
  }
  ::close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  REQUIRE(::poll(&p, 1, 120000) == 1);
  uint64_t temp_size = 0;
  const ssize_t n = ::read(fds[0], &temp_size, sizeof temp_size);
  ::close(fds[0]);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(n == static_cast<ssize_t>(sizeof temp_size));
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  return temp_size;
}

}  // namespace

TEST_CASE("atomic: injected write, fsync and rename failures keep the previous file, no temp") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const std::string path = d + "/model.safetensors";
  const std::vector<float> old_values = t::test_values(1, 1000),
                           new_values = t::test_values(2, 1000);
  write_one(path, old_values, "1");
  const std::string before = t::read_bytes(path);
  struct Case {
    testing::WriteFaults faults;
    std::string message;
  };
  std::vector<Case> cases(4);
  cases[0].faults.fail_after_bytes = 0;
  cases[0].message = "No space left on device";
  cases[1].faults.fail_after_bytes = 500;
  cases[1].message = "No space left on device";
  cases[2].faults.fail_fsync = true;
  cases[2].message = "Input/output error";
  cases[3].faults.fail_rename = true;
  cases[3].message = "Invalid cross-device link";
  for (const Case& c : cases) {
    INFO(c.message);
    {
      FaultGuard guard(c.faults);
      CHECK_THROWS_WITH(write_one(path, new_values, "2"),
                        Catch::Contains(path) && Catch::Contains(c.message));
    }
    CHECK(t::read_bytes(path) == before);
    CHECK(t::temp_files_in(d) == 0);
  }
  CHECK(Reader::open(path).read_all("w") == old_values);
  write_one(path, new_values, "2");  // no fault: replaced
  CHECK(Reader::open(path).read_all("w") == new_values);
}

TEST_CASE("atomic: a failing sharded save keeps the previous shard file and index") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const auto model = t::small_model();
  const auto per_rank = t::split_dim0(model, 2);
  t::write_sharded(d, model, per_rank, {{"step", "1"}});
  const std::string shard = t::read_bytes(d + "/" + shard_file_name(1, 2));
  const std::string index = t::read_bytes(d + "/index.json");
  {
    testing::WriteFaults f;
    f.fail_after_bytes = 100;
    FaultGuard guard(f);
    CHECK_THROWS_WITH(t::write_sharded(d, model, per_rank, {{"step", "2"}}),
                      Catch::Contains("shard-0-of-2.bin") && Catch::Contains("No space left"));
    CHECK_THROWS_WITH(write_shard_index(d, 2, per_rank, {{"step", "2"}}),
                      Catch::Contains("index.json") && Catch::Contains("No space left"));
  }
  CHECK(t::read_bytes(d + "/" + shard_file_name(1, 2)) == shard);
  CHECK(t::read_bytes(d + "/index.json") == index);
  CHECK(t::temp_files_in(d) == 0);
  CHECK(Reader::open(d).metadata().at("step") == "1");
}

TEST_CASE("atomic: real rename and create failures name the path and the errno text") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const std::vector<float> v = t::test_values(1, 10);
  // The destination is a non-empty directory: rename(2) fails with EISDIR.
  std::filesystem::create_directories(d + "/taken.safetensors/inside");
  CHECK_THROWS_WITH(write_one(d + "/taken.safetensors", v, "1"),
                    Catch::Contains(d + "/taken.safetensors") && Catch::Contains("Is a directory"));
  CHECK(t::temp_files_in(d) == 0);
  CHECK(std::filesystem::exists(d + "/taken.safetensors/inside"));
  // The directory does not exist: the temporary cannot be created.
  CHECK_THROWS_WITH(
      write_one(d + "/no/such/model.safetensors", v, "1"),
      Catch::Contains("cannot create temporary") && Catch::Contains("No such file or directory"));
}

TEST_CASE("atomic: a reader refuses to read a file replaced after it was opened") {
  TempDir dir("ckpt");
  const std::string path = dir.path.string() + "/model.safetensors";
  write_one(path, t::test_values(1, 16), "1");
  const Reader r = Reader::open(path);
  write_one(path, t::test_values(2, 16), "2");
  std::vector<float> out(16);
  CHECK_THROWS_WITH(r.read("w", 0, 16, out.data()), Catch::Contains("replaced or modified"));
}

TEST_CASE("atomic: a safetensors writer SIGKILLed mid-write leaves the previous file loadable") {
  TempDir dir("ckpt");
  const std::string path = dir.path.string() + "/model.safetensors";
  const int64_t n = int64_t{8} << 20;  // 32 MiB of fp32
  const std::vector<float> old_values = t::test_values(1, n);
  write_one(path, old_values, "1");
  const uint64_t temp_size = kill_mid_write(
      [&] {
        const std::vector<float> new_values = t::test_values(2, n);
        write_one(path, new_values, "2");
      },
      uint64_t{16} << 20);
  CHECK(temp_size >= (uint64_t{16} << 20));         // the kill landed mid-write
  CHECK(t::temp_files_in(dir.path.string()) == 1);  // a crash leaves the temporary
  const Reader r = Reader::open(path);
  CHECK(r.metadata().at("step") == "1");
  CHECK(r.read_all("w") == old_values);
}

TEST_CASE("atomic: a shard writer SIGKILLed mid-write leaves the previous checkpoint loadable") {
  TempDir dir("ckpt");
  const std::string d = dir.path.string();
  const int64_t n = int64_t{4} << 20;
  std::vector<t::ModelTensor> model = {{"big", {n}, t::test_values(1, n)}};
  const auto per_rank = t::split_dim0(model, 2);
  t::write_sharded(d, model, per_rank, {{"step", "1"}});
  kill_mid_write(
      [&] {
        std::vector<t::ModelTensor> next = {{"big", {n}, t::test_values(2, n)}};
        t::write_sharded(d, next, per_rank, {{"step", "2"}});
      },
      uint64_t{4} << 20);
  const Reader r = Reader::open(d);
  CHECK(r.metadata().at("step") == "1");
  CHECK(r.read_all("big") == model[0].values);
}
