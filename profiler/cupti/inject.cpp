// libshardscope_inject.so: CUPTI recording of any CUDA program, loaded by the
// CUDA driver through CUDA_INJECTION64_PATH (`shardscope profile -- COMMAND`
// sets it; docs/profiler.md).
//
//  - InitializeInjection(): the driver calls it once per process, at cuInit.
//    Starts a CuptiRecorder and arranges for this process's trace to be
//    written to $SHARDSCOPE_PROFILE_DIR/<pid>.trace at exit (atexit; also on
//    SIGTERM / SIGINT / SIGHUP when the program leaves them at their default,
//    fatal action). A process that cannot record writes <pid>.error there
//    instead, with the reason. Always returns 1: profiling never stops the
//    program.
//  - InitializeInjectionNvtx / InitializeInjectionNvtx2: NVTX's injection
//    entry points (NVTX_INJECTION64_PATH names this library too), forwarded to
//    CUPTI's own so that NVTX ranges become MARKER records.
//
// The library links no CUDA runtime (the program brings its own) and exports
// nothing else (inject.map); its C++ runtime is linked statically.
#include <cupti.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "profiler/cupti/cupti_recorder.h"
#include "profiler/cupti/process_trace.h"
#include "traces/trace_io.h"

namespace {

using shardscope::profiler::CuptiConfig;
using shardscope::profiler::CuptiRecorder;
using shardscope::profiler::ProcessIdentity;

struct InjectState {
  std::unique_ptr<CuptiRecorder> recorder;
  ProcessIdentity identity;
  std::string dir;
  pid_t pid = 0;
  std::atomic<bool> written{false};
};
// Leaked: used from atexit and signal handlers, after static destructors may have run.
std::atomic<InjectState*> g_state{nullptr};

void report(const std::string& message) {
  std::fprintf(stderr, "shardscope profiler (libshardscope_inject.so, pid %ld): %s\n",
               static_cast<long>(getpid()), message.c_str());
}

// <dir>/<pid>.error: why this process did not record (read by `shardscope profile`).
void write_error_file(const std::string& dir, const std::string& message) {
  const std::string path = dir + "/" + std::to_string(getpid()) + ".error";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%s\n", message.c_str());
    std::fclose(f);
  }
}

void write_trace() {
  InjectState* s = g_state.load();
  // Forked children inherit the state but not CUPTI: only the recording process writes.
  if (!s || getpid() != s->pid || s->written.exchange(true)) return;
  try {
    const shardscope::profiler::Recording recording = s->recorder->take();
    const shardscope::traces::Trace trace =
        shardscope::profiler::process_trace(recording, s->identity);
    // Atomic (temporary file + rename): the merger never sees half a trace.
    shardscope::traces::save_trace(
        trace, s->dir + "/" + shardscope::profiler::process_trace_file_name(s->pid));
    if (recording.dropped_records > 0)
      report("CUPTI dropped " + std::to_string(recording.dropped_records) +
             " records: the trace is incomplete (raise --buffer-size)");
  } catch (const std::exception& e) {
    report(std::string("could not write this process's trace: ") + e.what());
    write_error_file(s->dir, std::string("could not write the trace: ") + e.what());
  }
}

void write_trace_at_exit() {
  write_trace();
}

// Best effort for a process ended by a signal: writing is not async-signal-safe,
// so an alarm bounds a writer stuck on a lock the signal interrupted; then the
// signal's default action (restored by SA_RESETHAND) ends the process.
void write_trace_on_signal(int sig) {
  alarm(10);
  write_trace();
  raise(sig);
}

void install_signal_handlers() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction current;
    if (sigaction(sig, nullptr, &current) != 0) continue;
    const bool is_default = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
    if (!is_default) continue;  // the program handles it (Python: SIGINT -> KeyboardInterrupt)
    struct sigaction action = {};
    action.sa_handler = write_trace_on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(sig, &action, nullptr);
  }
}

// SHARDSCOPE_CUPTI_BUFFER_BYTES (set by `shardscope profile --buffer-size`);
// SHARDSCOPE_CUPTI_LAUNCHES=1 (set by `profile --torch-shapes`): launch
// records, which attribute kernels to PyTorch's NVTX op ranges.
CuptiConfig config_from_env() {
  CuptiConfig config;
  const char* launches = std::getenv("SHARDSCOPE_CUPTI_LAUNCHES");
  config.launches = launches && std::string(launches) == "1";
  const char* text = std::getenv("SHARDSCOPE_CUPTI_BUFFER_BYTES");
  if (!text || !*text) return config;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(text, &end, 10);
  if (*end != '\0' || text[0] == '-')
    throw shardscope::profiler::ProfilerError(std::string("SHARDSCOPE_CUPTI_BUFFER_BYTES=\"") +
                                              text + "\" is not a byte count");
  config.buffer_bytes = static_cast<size_t>(bytes);
  return config;
}

using NvtxInitialize = int (*)(void*);

// CUPTI's own NVTX entry point `symbol`, looked up from libcupti's handle (this
// library exports the same names).
NvtxInitialize cupti_nvtx_entry(const char* symbol) {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&cuptiGetVersion), &info) || !info.dli_fname) return nullptr;
  void* cupti = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);  // loaded: our dependency
  if (!cupti) return nullptr;
  return reinterpret_cast<NvtxInitialize>(dlsym(cupti, symbol));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> initialised{false};
  if (initialised.exchange(true)) return 1;
  const char* dir = std::getenv("SHARDSCOPE_PROFILE_DIR");
  if (!dir || !*dir) {
    report(
        "SHARDSCOPE_PROFILE_DIR is not set: not recording. Run the program under `shardscope "
        "profile [--out OUT] -- COMMAND [ARGS...]`, which sets it and CUDA_INJECTION64_PATH.");
    return 1;
  }
  auto state = std::make_unique<InjectState>();
  state->dir = dir;
  state->pid = getpid();
  try {
    state->identity = shardscope::profiler::process_identity_from_env(state->pid);
    state->recorder = CuptiRecorder::start(config_from_env());
  } catch (const std::exception& e) {
    report(std::string("not recording: ") + e.what());
    write_error_file(state->dir, e.what());
    return 1;
  }
  g_state.store(state.release());
  std::atexit(write_trace_at_exit);
  install_signal_handlers();
  return 1;
}

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    void* get_export_table) {
  const NvtxInitialize cupti = cupti_nvtx_entry("InitializeInjectionNvtx2");
  return cupti ? cupti(get_export_table) : 0;
}

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx(
    void* get_export_table) {
  const NvtxInitialize cupti = cupti_nvtx_entry("InitializeInjectionNvtx");
  return cupti ? cupti(get_export_table) : 0;
}

// NVTX extension modules (payload schemas, counters) look this name up in the
// NVTX_INJECTION64_PATH library; libcupti exports it too.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtxExtension(
    void* module_info) {
  const NvtxInitialize cupti = cupti_nvtx_entry("InitializeInjectionNvtxExtension");
  return cupti ? cupti(module_info) : 0;
}
