// The `shardscope` command: dispatches to one subcommand (cli/commands.h).
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "cli/args.h"
#include "cli/commands.h"
#include "engine/run/run.h"
#include "io/output_error.h"
#include "io/standard_output.h"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {"plan", shardscope::cli::cmd_plan, "FSDP units and step schedule of a model under a policy"},
    {"simulate", shardscope::cli::cmd_simulate, "predict step time, peak memory and overlap"},
    {"sweep", shardscope::cli::cmd_sweep, "what-if sweep over a policy grid, Pareto front"},
    {"run", shardscope::cli::cmd_run, "train for real on CPU ranks or CUDA/NCCL and measure"},
    {"profile", shardscope::cli::cmd_profile, "profile any CUDA program with the CUPTI recorder"},
    {"report", shardscope::cli::cmd_report, "metrics of a trace"},
    {"diff", shardscope::cli::cmd_diff, "metric deltas between two traces"},
    {"export", shardscope::cli::cmd_export, "export a trace to Chrome/Perfetto JSON"},
    {"import", shardscope::cli::cmd_import, "import PyTorch profiler (Kineto) traces"},
    {"calibrate", shardscope::cli::cmd_calibrate, "fit a hardware model to measured traces"},
    {"view", shardscope::cli::cmd_view, "timeline GUI for measured and predicted runs"},
    {"demo", shardscope::cli::cmd_demo, "the guided tour on an embedded default"},
};

void print_usage(FILE* out) {
  std::fprintf(out,
               "shardscope: memory and communication simulator/profiler for FSDP training\n\n"
               "usage: shardscope <command> [options]   (shardscope <command> --help)\n\n"
               "commands:\n");
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
}

// Exit codes (ARCHITECTURE.md, CLI contract): 2 for input errors (usage, a
// malformed or impossible input, an output path that cannot be written), 1 for
// runtime failures (a write that failed, out of memory, a training run that
// failed: engine::run::is_runtime_failure).
int run_subcommand(const Subcommand& s, int argc, char** argv) {
  const char* name = s.name;
  try {
    return s.run(argc - 1, argv + 1);
  } catch (const shardscope::cli::UsageError& e) {
    std::fprintf(stderr, "shardscope %s: %s (see shardscope %s --help)\n", name, e.what(), name);
    return 2;
  } catch (const shardscope::io::OutputTargetError& e) {
    std::fprintf(stderr, "shardscope %s: error: %s\n", name, e.what());
    return 2;
  } catch (const shardscope::io::OutputWriteError& e) {
    std::fprintf(stderr, "shardscope %s: error: %s\n", name, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // The last line of defence: inputs are counted and refused before they
    // need this much (docs/policy.md and docs/sweep.md, "Limits"), so this
    // is a gap in those limits or a machine short of memory.
    std::fprintf(stderr,
                 "shardscope %s: error: out of memory (std::bad_alloc): the inputs need more "
                 "memory than this process could get; make them smaller (fewer "
                 "grad_accum_steps, configurations, ranks or steps)\n",
                 name);
    return 1;
  } catch (const std::exception& e) {
    // Training outside `run` (demo, calibrate --measure) fails the same way:
    // a timeout, a dead rank or a non-finite loss is a runtime failure.
    std::fprintf(stderr, "shardscope %s: error: %s\n", name, e.what());
    return shardscope::engine::run::is_runtime_failure(e) ? 1 : 2;
  }
}

// Standard output is an output too: a command whose writes to it failed
// (/dev/full, a full disk) has not succeeded (exit 1 unless it already failed).
int finish(const char* name, int status) {
  try {
    shardscope::io::finish_standard_output();
  } catch (const shardscope::io::OutputWriteError& e) {
    std::fprintf(stderr, "shardscope %s: error: %s\n", name, e.what());
    return status != 0 ? status : 1;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const char* name = argv[1];
  if (!std::strcmp(name, "--help") || !std::strcmp(name, "-h") || !std::strcmp(name, "help")) {
    print_usage(stdout);
    return finish(name, 0);
  }
  if (!std::strcmp(name, "--version")) {
    std::printf("shardscope 0.1.0\n");
    return finish(name, 0);
  }
  for (const Subcommand& s : kSubcommands)
    if (std::strcmp(s.name, name) == 0) return finish(name, run_subcommand(s, argc, argv));
  std::fprintf(stderr, "shardscope: unknown command '%s'\n\n", name);
  print_usage(stderr);
  return 2;
}
