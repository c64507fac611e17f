// What `shardscope run` prints (engine/run returns it as a RunResult): rank
// 0's progress line on stderr, and the metrics JSON or the summary on stdout.
#pragma once

#include <string>

#include "engine/run/run.h"

namespace shardscope::cli {

// One line per step on stderr; on a terminal, one line redrawn with a bar.
void print_progress(const engine::run::StepProgress& p);

// --json: the metrics JSON; otherwise the backend's notes and a summary.
std::string format_result(const engine::run::RunResult& r, bool json);

// Prints the result of engine::run::run and returns the exit code: a failed
// rank's (its message on stderr) or 0 (the report on stdout when this
// process has it).
int print_result(const engine::run::RunResult& r, bool json);

}  // namespace shardscope::cli
