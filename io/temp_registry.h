// Temporaries of output files in progress, removed when the process is ended
// by SIGINT, SIGTERM or SIGHUP, so an interrupted output leaves nothing
// behind (the destructor and the error paths remove them otherwise).
//
// The handler is installed when a temporary is registered, for the signals
// whose disposition is then the default: it removes this
// process's registered temporaries (forked children never remove their
// parent's), restores the default action and raises the signal again, so the
// process still ends by that signal (exit status 128 + signal in a shell).
// Everything it does is async-signal-safe: a fixed table of paths, unlink().
#pragma once

#include <string>

namespace shardscope::io {

// At most this many temporaries are registered at once; a path longer than
// kMaxTempPath bytes is not registered (it is still removed on errors).
constexpr int kMaxTemporaries = 64;
constexpr size_t kMaxTempPath = 4096;

// Returns the slot, or -1 when the table is full or the path too long.
int register_temporary(const std::string& path);
// Forgets the slot (after a rename or removal); -1 is ignored.
void unregister_temporary(int slot);
// Number of registered temporaries of this process (tests).
int registered_temporaries();

}  // namespace shardscope::io
