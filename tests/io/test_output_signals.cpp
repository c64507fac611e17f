// Interrupted outputs leave no temporaries (io/temp_registry.h).
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "io/output_file.h"
#include "io/temp_registry.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using namespace shardscope;

namespace {

// A child writes half an output, tells the parent through a pipe, and waits
// to be killed by `sig`. Returns the child's wait status.
int interrupted_child(const std::string& path, int sig) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    // Default dispositions, as in the shardscope process (Catch2 installs its own).
    for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, SIG_DFL);
    io::OutputFile f(path);
    f.write(std::string(2 << 20, 'h'));  // past the buffer: on disk in the temporary
    const char one = '1';
    if (::write(ready[1], &one, 1) != 1) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char got = 0;
  REQUIRE(::read(ready[0], &got, 1) == 1);
  ::close(ready[0]);
  REQUIRE(::kill(pid, sig) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("interrupted output: SIGINT, SIGTERM and SIGHUP remove the temporary", "[io]") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    test::TempDir dir;
    const fs::path out = dir.path / "sweep.csv";
    std::ofstream(out) << "previous";
    const int status = interrupted_child(out.string(), sig);
    // The process still ends by the signal (exit status 128 + sig in a shell).
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK(names_in(dir.path) == std::vector<std::string>{"sweep.csv"});
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    CHECK(ss.str() == "previous");
  }
}

TEST_CASE("temporaries: registered while written, forgotten after commit", "[io]") {
  test::TempDir dir;
  const int before = io::registered_temporaries();
  {
    io::OutputFile a((dir.path / "a").string());
    io::OutputFile b((dir.path / "b").string());
    CHECK(io::registered_temporaries() == before + 2);
    a.commit();
    CHECK(io::registered_temporaries() == before + 1);
  }
  CHECK(io::registered_temporaries() == before);
  CHECK(names_in(dir.path) == std::vector<std::string>{"a"});
}
