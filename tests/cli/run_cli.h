// Runs the built `shardscope` binary (SHARDSCOPE_CLI) and captures its exit
// status and output (stdout and stderr together).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace shardscope::test {

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
