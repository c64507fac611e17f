// io::OutputFile: what each kind of output path gets (io/output_target.h).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "io/output_error.h"
#include "io/output_file.h"
#include "io/output_stream.h"
#include "io/standard_output.h"
#include "io/temp_registry.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using namespace shardscope;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Names in `dir` other than `keep`: leftovers such as temporaries.
std::vector<std::string> others(const fs::path& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) out.push_back(name);
  }
  return out;
}

mode_t kind_of(const std::string& path) {
  struct stat st;
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & S_IFMT;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Runs `body` in a forked child; returns its wait status.
template <typename F>
int in_child(F&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    try {
      code = body();
    } catch (...) {
      code = 99;
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("output file: a new path is written through a temporary and renamed", "[io]") {
  test::TempDir dir;
  const std::string path = (dir.path / "out.json").string();
  {
    io::OutputFile f(path);
    REQUIRE(!f.in_place());
    CHECK(f.temporary().rfind(path + ".tmp.", 0) == 0);
    CHECK(fs::exists(f.temporary()));
    CHECK(!fs::exists(path));  // nothing at the target until commit
    f.write("hello ");
    f.write(std::string(3 << 20, 'x'));  // larger than the 1 MiB buffer
    f.commit();
    CHECK(f.temporary().empty());
  }
  CHECK(slurp(path) == "hello " + std::string(3 << 20, 'x'));
  CHECK(others(dir.path, {"out.json"}).empty());
  CHECK(io::registered_temporaries() == 0);
}

TEST_CASE("output file: a regular file is replaced whole, keeping its permission bits", "[io]") {
  test::TempDir dir;
  const std::string path = (dir.path / "hw.json").string();
  std::ofstream(path) << "old";
  REQUIRE(::chmod(path.c_str(), 0640) == 0);
  {
    io::OutputFile f(path);
    f.write("new");
    CHECK(slurp(path) == "old");  // readers see the old file until commit
    f.commit();
  }
  CHECK(slurp(path) == "new");
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);

  // Not committed: the old file stays, the temporary goes.
  {
    io::OutputFile f(path);
    f.write("abandoned");
  }
  CHECK(slurp(path) == "new");
  CHECK(others(dir.path, {"hw.json"}).empty());
}

TEST_CASE("output file: a symbolic link to a file stays a link, the file it names is replaced",
          "[io]") {
  test::TempDir dir;
  const fs::path real = dir.path / "real.json";
  const fs::path link = dir.path / "link.json";
  std::ofstream(real) << "old";
  fs::create_symlink(real, link);
  io::write_output_file(link.string(), "new");
  CHECK(kind_of(link.string()) == S_IFLNK);
  CHECK(slurp(real) == "new");
  CHECK(others(dir.path, {"real.json", "link.json"}).empty());

  const fs::path dangling = dir.path / "dangling.json";
  fs::create_symlink(dir.path / "missing.json", dangling);
  CHECK_THAT(error_of([&] { io::write_output_file(dangling.string(), "x"); }),
             Catch::Contains("dangling.json") && Catch::Contains("does not exist"));
}

TEST_CASE("output file: directories, sockets and missing folders are refused before writing",
          "[io]") {
  test::TempDir dir;
  CHECK_THROWS_AS(io::OutputFile(dir.path.string()), io::OutputTargetError);
  CHECK_THAT(error_of([&] { io::OutputFile f(dir.path.string()); }),
             Catch::Contains("is a directory"));
  CHECK_THAT(error_of([&] { io::OutputFile f((dir.path / "no" / "x.json").string()); }),
             Catch::Contains("folder") && Catch::Contains("does not exist"));
  CHECK_THAT(error_of([&] { io::OutputFile f(""); }), Catch::Contains("empty output path"));

  const std::string sock_path = (dir.path / "s.sock").string();
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock_path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK_THAT(error_of([&] { io::OutputFile f(sock_path); }), Catch::Contains("is a socket"));
  ::close(s);
  CHECK(kind_of(sock_path) == S_IFSOCK);
  CHECK(others(dir.path, {"s.sock"}).empty());
}

TEST_CASE("output file: character devices are written in place, never replaced", "[io]") {
  {
    io::OutputFile f("/dev/null");
    CHECK(f.in_place());
    CHECK(f.temporary().empty());
    f.write(std::string(5 << 20, 'z'));
    f.commit();
  }
  CHECK(kind_of("/dev/null") == S_IFCHR);

  // /dev/full: every write fails with ENOSPC, reported with the path.
  std::string err = error_of([] {
    io::OutputFile f("/dev/full");
    f.write("abc");
    f.commit();
  });
  CHECK_THAT(err, Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));
  CHECK_THROWS_AS(io::write_output_file("/dev/full", "abc"), io::OutputWriteError);
  CHECK(kind_of("/dev/full") == S_IFCHR);
}

TEST_CASE("output file: a FIFO is written in place to its reader, and waits a bounded time",
          "[io]") {
  test::TempDir dir;
  const std::string fifo = (dir.path / "pipe").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = slurp(fifo); });
  const std::string text(200000, 'q');  // more than a pipe's 64 KiB buffer
  io::write_output_file(fifo, text);
  reader.join();
  CHECK(received == text);
  CHECK(kind_of(fifo) == S_IFIFO);

  // Nobody reading: refused after the wait, the FIFO left as it is.
  io::OutputOptions quick;
  quick.fifo_reader_wait_ms = 50;
  CHECK_THAT(error_of([&] { io::OutputFile f(fifo, quick); }),
             Catch::Contains("pipe") && Catch::Contains("no reader"));
  CHECK(kind_of(fifo) == S_IFIFO);
  CHECK(others(dir.path, {"pipe"}).empty());
}

TEST_CASE("output file: a write that fails midway keeps the old file and leaves no temporary",
          "[io]") {
  test::TempDir dir;
  const std::string path = (dir.path / "big.csv").string();
  std::ofstream(path) << "previous";
  // A file-size limit of 64 KiB in a child: the second MiB fails with EFBIG.
  const int status = in_child([&] {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 << 10, 64 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 3;
    try {
      io::OutputFile f(path);
      f.write(std::string(4 << 20, 'w'));
      f.commit();
    } catch (const io::OutputWriteError& e) {
      return std::string(e.what()).find("big.csv") != std::string::npos ? 0 : 4;
    }
    return 5;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(slurp(path) == "previous");
  CHECK(others(dir.path, {"big.csv"}).empty());
}

TEST_CASE("output file: a read-only file is refused for an ordinary user and kept", "[io]") {
  test::TempDir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
  const std::string path = (dir.path / "ro.json").string();
  std::ofstream(path) << "keep";
  REQUIRE(::chmod(path.c_str(), 0444) == 0);
  // As root, access() allows everything: the check runs as nobody (65534).
  const int status = in_child([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 3;
    try {
      io::write_output_file(path, "replaced");
    } catch (const io::OutputTargetError& e) {
      return std::string(e.what()).find("not writable") != std::string::npos ? 0 : 4;
    }
    return 5;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(slurp(path) == "keep");
  CHECK(others(dir.path, {"ro.json"}).empty());
}

TEST_CASE("output stream: a stream write error surfaces at commit with the path", "[io]") {
  CHECK_THAT(error_of([] {
               io::OutputStream s("/dev/full");
               s << std::string(3 << 20, 'a') << 42 << '\n';
               s.commit();
             }),
             Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));
  test::TempDir dir;
  const std::string path = (dir.path / "s.csv").string();
  {
    io::OutputStream s(path);
    s << "a,b\n" << 1 << ',' << 2.5 << '\n';
    s.commit();
  }
  CHECK(slurp(path) == "a,b\n1,2.5\n");
}

TEST_CASE("standard output: a failed write is reported, not success", "[io]") {
  const int status = in_child([] {
    if (!std::freopen("/dev/full", "w", stdout)) return 3;
    std::printf("%s\n", std::string(10000, 'p').c_str());
    try {
      io::finish_standard_output();
    } catch (const io::OutputWriteError& e) {
      return std::string(e.what()).find("standard output") != std::string::npos ? 0 : 4;
    }
    return 5;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const int fine = in_child([] {
    if (!std::freopen("/dev/null", "w", stdout)) return 3;
    std::printf("ok\n");
    io::finish_standard_output();
    return 0;
  });
  REQUIRE(WIFEXITED(fine));
  CHECK(WEXITSTATUS(fine) == 0);
}

TEST_CASE("output file: /dev/fd/N and /proc/self/fd/N write to the open descriptor itself",
          "[io]") {
  test::TempDir dir;
  const std::string path = (dir.path / "redirected.txt").string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "abc", 3) == 3);
  // The descriptor's offset is shared (a shell's `> file` keeps what was
  // printed before), and the file is neither reopened nor replaced.
  io::write_output_file("/proc/self/fd/" + std::to_string(fd), "def");
  io::write_output_file("/dev/fd/" + std::to_string(fd), "ghi");
  REQUIRE(::write(fd, "jkl", 3) == 3);
  ::close(fd);
  CHECK(slurp(path) == "abcdefghijkl");
  CHECK(others(dir.path, {"redirected.txt"}).empty());

  int p[2];
  REQUIRE(::pipe(p) == 0);
  {
    io::OutputFile f("/dev/fd/" + std::to_string(p[1]));
    CHECK(f.in_place());
    f.write("through the pipe");
    f.commit();
  }
  ::close(p[1]);
  char buf[64] = {};
  CHECK(::read(p[0], buf, sizeof buf) == 16);
  CHECK(std::string(buf) == "through the pipe");
  ::close(p[0]);
}
