// Every output flag against targets that must not be destroyed: /dev/full
// (written in place, exit 1), a FIFO (written in place to its reader), a
// directory (refused before any work, exit 2 naming the flag), a read-only
// file (refused, kept); and standard output on /dev/full (exit 1).
// Commands run as an ordinary user (nobody, through setpriv) when the suite
// runs as root, so that a regression cannot replace /dev/full on the machine.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using namespace shardscope;

namespace {

using Shell = test::CliResult;
using test::run_shell;

// The CLI, as nobody when this process is root.
std::string cli() {
  return test::cli_as_user();
}

mode_t kind_of(const std::string& path) {
  struct stat st;
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & S_IFMT;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Inputs every command needs, made once, readable by nobody; `dir` is
// writable by nobody.
struct Fixture {
  test::TempDir dir{"shardscope_outputs"};
  std::string grid, sim_trace, run_trace, kineto;
  Fixture() {
    ::chmod(dir.path.c_str(), 0777);
    grid = (dir.path / "grid.json").string();
    std::ofstream(grid) << R"({"seed": [0, 1]})";
    sim_trace = (dir.path / "sim.sstrace").string();
    run_trace = (dir.path / "run.sstrace").string();
    const std::string bin = SHARDSCOPE_CLI;
    REQUIRE(run_shell(bin + " simulate --model gpt2-tiny --world 2 --trace " + sim_trace +
                      " >/dev/null 2>&1")
                .status == 0);
    REQUIRE(run_shell(bin + " run --model gpt2-tiny --nproc 1 --steps 2 --trace " + run_trace +
                      " >/dev/null 2>&1")
                .status == 0);
    // A copy nobody can read wherever the checkout is.
    kineto = (dir.path / "kineto_rank0.json").string();
    fs::copy_file(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/traces/fixtures/kineto_rank0.json",
                  kineto);
  }
  std::string path(const std::string& name) const { return (dir.path / name).string(); }
};

struct OutputFlag {
  std::string flag;  // as the error names it
  std::string args;  // the command line with {} where the output path goes
};

std::vector<OutputFlag> output_flags(const Fixture& f) {
  return {
      {"--out", "sweep --model gpt2-tiny --world 2 --quiet --grid " + f.grid + " --out {}"},
      {"--trace", "simulate --model gpt2-tiny --world 2 --trace {}"},
      {"--chrome", "export " + f.sim_trace + " --chrome {}"},
      {"--out", "import --kineto " + f.kineto + " --out {}"},
      {"--graph-out", "plan --model gpt2-tiny --world 2 --graph-out {}"},
      {"--schedule-out", "plan --model gpt2-tiny --world 2 --schedule-out {}"},
      {"--trace", "run --model gpt2-tiny --nproc 1 --steps 1 --trace {}"},
      {"--out", "calibrate " + f.run_trace + " --out {}"},
  };
}

std::string with_path(std::string args, const std::string& path) {
  return args.replace(args.find("{}"), 2, path);
}

}  // namespace

TEST_CASE("outputs: /dev/full is written in place and fails with exit 1, never replaced",
          "[cli][outputs]") {
  Fixture f;
  for (const OutputFlag& o : output_flags(f)) {
    INFO(o.args);
    const Shell r = run_shell(cli() + " " + with_path(o.args, "/dev/full") + " 2>&1 >/dev/null");
    CHECK(r.status == 1);
    CHECK_THAT(r.output,
               Catch::Contains("'/dev/full'") && Catch::Contains("No space left on device"));
    CHECK(kind_of("/dev/full") == S_IFCHR);
  }
}

TEST_CASE("outputs: a FIFO is written in place to the process reading it", "[cli][outputs]") {
  Fixture f;
  int i = 0;
  for (const OutputFlag& o : output_flags(f)) {
    INFO(o.args);
    const std::string fifo = f.path("fifo" + std::to_string(i++));
    REQUIRE(::mkfifo(fifo.c_str(), 0666) == 0);
    REQUIRE(::chmod(fifo.c_str(), 0666) == 0);  // past the umask: nobody writes it
    std::string received;
    std::thread reader([&] { received = slurp(fifo); });
    const Shell r = run_shell(cli() + " " + with_path(o.args, fifo) + " 2>&1 >/dev/null");
    // A command that failed before opening the FIFO leaves the reader blocked
    // in open(): a writer that opens and closes it ends the read (EOF).
    const int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (unblock >= 0) ::close(unblock);
    reader.join();
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(received.size() > 100);
    CHECK(kind_of(fifo) == S_IFIFO);
  }
}

TEST_CASE("outputs: a directory is refused before any work, exit 2 naming the flag",
          "[cli][outputs]") {
  Fixture f;
  const std::string d = f.path("adir");
  fs::create_directory(d);
  std::vector<OutputFlag> flags = output_flags(f);
  flags.push_back({"--out", "profile --out {} -- /bin/true"});
  for (const OutputFlag& o : flags) {
    INFO(o.args);
    const Shell r = run_shell(cli() + " " + with_path(o.args, d) + " 2>&1");
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains(o.flag + ": '" + d + "': is a directory"));
    // Refused first: no training step, no sweep, no program ran.
    CHECK_THAT(r.output, !Catch::Contains("step 1/") && !Catch::Contains("configurations"));
    CHECK(fs::is_empty(d));
  }
}

TEST_CASE("outputs: a read-only file is refused for an ordinary user and kept", "[cli][outputs]") {
  Fixture f;
  const std::string ro = f.path("readonly.out");
  std::ofstream(ro) << "keep";
  REQUIRE(::chmod(ro.c_str(), 0444) == 0);
  const std::string as_user = ::geteuid() == 0 ? cli() : std::string(SHARDSCOPE_CLI);
  for (const OutputFlag& o : output_flags(f)) {
    INFO(o.args);
    const Shell r = run_shell(as_user + " " + with_path(o.args, ro) + " 2>&1");
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains(o.flag + ": '" + ro + "': is not writable"));
    CHECK(slurp(ro) == "keep");
  }
  // Nothing but the inputs and the read-only file: no temporaries left.
  for (const auto& e : fs::directory_iterator(f.dir.path))
    CHECK_THAT(e.path().filename().string(), !Catch::Contains(".tmp"));
}

TEST_CASE("outputs: a regular file is replaced whole and keeps its mode", "[cli][outputs]") {
  Fixture f;
  const std::string out = f.path("graph.json");
  std::ofstream(out) << "old";
  REQUIRE(::chmod(out.c_str(), 0604) == 0);
  const Shell r =
      run_shell(std::string(SHARDSCOPE_CLI) + " plan --model gpt2-tiny --world 2 --graph-out " +
                out + " >/dev/null 2>&1");
  CHECK(r.status == 0);
  CHECK(nlohmann::json::parse(slurp(out)).contains("tensors"));
  struct stat st;
  REQUIRE(::stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0604);
}

TEST_CASE("outputs: failed writes to standard output exit 1", "[cli][outputs]") {
  Fixture f;
  const std::vector<std::string> commands = {
      "plan --model gpt2-tiny --world 2",
      "simulate --model gpt2-tiny --world 2 --json",
      "report " + f.sim_trace,
      "sweep --model gpt2-tiny --world 2 --quiet --grid " + f.grid + " --json",
  };
  for (const std::string& c : commands) {
    INFO(c);
    const Shell r = run_shell(cli() + " " + c + " 2>&1 >/dev/full");
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Catch::Contains("standard output") && Catch::Contains("writing failed"));
  }
}
