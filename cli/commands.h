// One function per subcommand; each parses its own flags (cli/args.h) and
// returns the process exit status. Errors in user input: message on stderr,
// status 2. Each lives in cli/cmd_<name>.cpp.
#pragma once

namespace shardscope::cli {

int cmd_plan(int argc, char** argv);
int cmd_simulate(int argc, char** argv);
int cmd_sweep(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_diff(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_calibrate(int argc, char** argv);
int cmd_view(int argc, char** argv);
int cmd_demo(int argc, char** argv);

// For subcommands that a later issue delivers: prints "<name>: not implemented
// yet" with the usage line and returns 2.
int not_implemented(const char* name, const char* usage, int argc, char** argv);

}  // namespace shardscope::cli
