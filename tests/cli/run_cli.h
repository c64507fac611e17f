// Runs the built `shardscope` binary (SHARDSCOPE_CLI) and captures its exit
// status and output (stdout and stderr together).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/temp_dir.h"

namespace shardscope::test {

// The CLI as an ordinary user: when this process is root, a copy of the
// binary (the checkout may sit in a folder only root can enter, such as a
// mktemp -d) run as nobody through setpriv; otherwise the binary itself.
// Tests whose commands write to device files use it, so that a regression
// cannot replace a device node of the machine.
inline std::string cli_as_user(const std::string& cli = SHARDSCOPE_CLI) {
  if (::geteuid() != 0) return cli;
  static TempDir dir("shardscope_cli_copy");
  static const std::string copy = [&] {
    const std::filesystem::path to = dir.path / "shardscope";
    std::filesystem::copy_file(cli, to, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(
        dir.path, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                      std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                      std::filesystem::perms::others_exec);
    return to.string();
  }();
  return "setpriv --reuid=65534 --regid=65534 --clear-groups " + copy;
}

struct CliResult {
  int status = -1;
  std::string output;
};

// Runs a whole shell command line; captures what it writes to the pipe (its
// stdout, and stderr where the line redirects it there).
inline CliResult run_shell(const std::string& cmd) {
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// `env`: shell assignments put before the command ("NAME=value ..."); empty: none.
inline CliResult run_cli(const std::string& args, const std::string& env = "",
                         const std::string& cli = SHARDSCOPE_CLI) {
  return run_shell((env.empty() ? "" : env + " ") + cli + " " + args + " 2>&1");
}

}  // namespace shardscope::test
