// shardscope profile [--out OUT] [--buffer-size SIZE] [--torch-shapes] -- COMMAND [ARGS...]
//
// Runs COMMAND with the CUPTI injection library (profiler/cupti/inject.cpp)
// named in CUDA_INJECTION64_PATH: every process of COMMAND that initialises
// CUDA records its GPU activity and leaves <pid>.trace in a temporary
// directory at exit; those are merged into OUT (docs/profiler.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "profiler/cupti/process_trace.h"
#include "profiler/torch_shapes.h"
#include "traces/trace_io.h"

extern char** environ;

namespace shardscope::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: shardscope profile [--out OUT] [--buffer-size SIZE] [--torch-shapes] -- COMMAND "
    "[ARGS...]\n\n"
    "Runs COMMAND with shardscope's CUPTI recorder injected into every process that\n"
    "initialises CUDA (CUDA_INJECTION64_PATH), then merges their traces into OUT: kernels\n"
    "(NCCL collectives as communication), copies, memsets, device memory allocations,\n"
    "synchronisation and NVTX ranges, one rank per process (RANK, SLURM_PROCID,\n"
    "OMPI_COMM_WORLD_RANK or LOCAL_RANK). Exits with COMMAND's status.\n\n"
    "  --out OUT           the merged trace (default profile.trace; .json writes the JSON form)\n"
    "  --buffer-size SIZE  CUPTI activity buffer size (default 4MiB); raise it when records\n"
    "                      are dropped\n"
    "  --torch-shapes      for a Python program using PyTorch (python, torchrun, a python\n"
    "                      script): enter torch.autograd.profiler.emit_nvtx(record_shapes=True)\n"
    "                      in its processes (a generated sitecustomize.py first on PYTHONPATH)\n"
    "                      and record each CUDA API call, so that kernels get the op type and\n"
    "                      FLOPs of the aten op that launched them (for calibrate); costs host\n"
    "                      time on every op (one NVTX range with its input sizes each)\n\n"
    "example: shardscope profile --out run.trace -- torchrun --nproc-per-node 8 train.py\n"
    "         shardscope report run.trace\n";

constexpr const char* kInjectLibrary = "libshardscope_inject.so";

// Child pid for signal forwarding (0 = none yet).
volatile sig_atomic_t g_child = 0;

// SIGINT / SIGTERM sent to this process alone (kill: SI_USER, SI_QUEUE, SI_TKILL)
// go to the child. Terminal signals (Ctrl-C: SI_KERNEL) already reach the child,
// which shares our process group, and are not sent twice.
void forward_signal(int sig, siginfo_t* info, void*) {
  if (info && info->si_code == SI_KERNEL) return;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

class SignalForwarding {
 public:
  SignalForwarding() {
    struct sigaction action = {};
    action.sa_sigaction = forward_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~SignalForwarding() {
    for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
    g_child = 0;
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  struct sigaction previous_[2];
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents at scope exit.
struct ProfileDir {
  fs::path path;
  ProfileDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardscope-profile-XXXXXX";
    if (!mkdtemp(pattern.data()))
      throw std::runtime_error("cannot create a temporary directory " + pattern + ": " +
                               std::strerror(errno));
    path = pattern;
  }
  ~ProfileDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  ProfileDir(const ProfileDir&) = delete;
  ProfileDir& operator=(const ProfileDir&) = delete;
};

fs::path inject_library_path() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot locate the shardscope executable: " + ec.message());
  const fs::path lib = exe.parent_path() / kInjectLibrary;
  if (!fs::exists(lib))
    throw std::runtime_error(std::string(kInjectLibrary) + " not found next to " + exe.string() +
                             ": this shardscope was built without CUDA/CUPTI, or the library "
                             "was not installed beside the executable");
  return lib;
}

struct ChildResult {
  int status = 0;           // what `profile` exits with on the child's account
  std::string description;  // "exited with status 3", "was killed by signal 9 (Killed)"
  bool exec_failed = false;
};

ChildResult run_child(const std::vector<std::string>& command,
                      const std::vector<std::string>& extra_env) {
  // Our variables replace any inherited ones of the same name.
  std::vector<std::string> env_storage = extra_env;
  auto ours = [&](const char* entry) {
    for (const std::string& v : extra_env)
      if (std::strncmp(entry, v.c_str(), v.find('=') + 1) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!ours(*e)) env_storage.emplace_back(*e);
  std::vector<char*> envp, argv;
  for (std::string& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = command;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  SignalForwarding forwarding;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(error_pipe[0]);
    execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    ssize_t ignored = write(error_pipe[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  g_child = pid;
  close(error_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do n = read(error_pipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  close(error_pipe[0]);

  int raw = 0;
  while (waitpid(pid, &raw, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  }
  ChildResult r;
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    r.exec_failed = true;
    r.status = exec_errno == ENOENT ? 127 : 126;
    r.description = exec_errno == ENOENT
                        ? "command not found: " + command[0]
                        : "cannot run " + command[0] + ": " + std::strerror(exec_errno);
  } else if (WIFEXITED(raw)) {
    r.status = WEXITSTATUS(raw);
    r.description = "exited with status " + std::to_string(r.status);
  } else if (WIFSIGNALED(raw)) {
    r.status = 128 + WTERMSIG(raw);
    r.description = "was killed by signal " + std::to_string(WTERMSIG(raw)) + " (" +
                    strsignal(WTERMSIG(raw)) + ")";
  }
  return r;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

std::string join_command(const std::vector<std::string>& command) {
  std::string s;
  for (const std::string& a : command) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string rank_list(const traces::Trace& t) {
  std::string s;
  for (size_t i = 0; i < t.ranks.size(); ++i) {
    if (i == 16) return s + ", ...";
    s += (i ? "," : "") + std::to_string(t.ranks[i].rank);
  }
  return s;
}

}  // namespace

int cmd_profile(int argc, char** argv) {
  Args args(argc, argv, {{"out"}, {"buffer-size"}, {"torch-shapes", false, false}}, false);
  if (args.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::vector<std::string>& command = args.after_dashdash();
  if (command.empty())
    throw UsageError("missing COMMAND: shardscope profile [--out OUT] -- COMMAND");
  const std::string out = args.get("out", "profile.trace");
  check_output_path("out", out);  // the default too: before the program runs
  std::vector<std::string> extra_env;
  if (args.has("buffer-size")) {
    const int64_t bytes = parse_size(args.get("buffer-size"), "--buffer-size");
    if (bytes < (64 << 10) || bytes % 8 != 0)
      throw UsageError("--buffer-size: must be a multiple of 8 bytes and at least 64KiB");
    extra_env.push_back("SHARDSCOPE_CUPTI_BUFFER_BYTES=" + std::to_string(bytes));
  }
  if (const char* other = std::getenv("CUDA_INJECTION64_PATH"))
    throw std::runtime_error(std::string("CUDA_INJECTION64_PATH is already set (") + other +
                             "): the CUDA driver loads one injection library per process; unset "
                             "it to profile with shardscope");

  const bool torch_shapes = args.has("torch-shapes");
  if (torch_shapes) {
    const char* path = std::getenv("PATH");
    std::string resolved;
    if (!profiler::is_python_command(command[0], path ? path : "", &resolved) && !resolved.empty())
      throw UsageError(
          "--torch-shapes needs a Python program (python, torchrun or a script "
          "with a python #! line) to enter PyTorch's emit_nvtx in: " +
          command[0] + " (" + resolved + ") is not one; profile the Python command itself");
  }

  const fs::path lib = inject_library_path();
  ProfileDir dir;
  extra_env.push_back("CUDA_INJECTION64_PATH=" + lib.string());
  extra_env.push_back("SHARDSCOPE_PROFILE_DIR=" + dir.path.string());
  if (torch_shapes) {
    // The sitecustomize in a subdirectory: the profile directory itself
    // holds only the processes' .trace and .error files.
    const fs::path site = dir.path / "torch-shapes";
    fs::create_directory(site);
    profiler::write_torch_shapes_site(site.string());
    const char* python_path = std::getenv("PYTHONPATH");
    extra_env.push_back("PYTHONPATH=" + site.string() +
                        (python_path && *python_path ? ":" + std::string(python_path) : ""));
    extra_env.push_back("SHARDSCOPE_CUPTI_LAUNCHES=1");
  }
  // NVTX ranges: NVTX loads this library too and is forwarded to CUPTI's handler.
  if (const char* nvtx = std::getenv("NVTX_INJECTION64_PATH"))
    std::fprintf(stderr,
                 "shardscope profile: NVTX_INJECTION64_PATH is already set (%s): NVTX ranges go "
                 "there, and are recorded only if it is CUPTI's library\n",
                 nvtx);
  else
    extra_env.push_back("NVTX_INJECTION64_PATH=" + lib.string());

  const ChildResult child = run_child(command, extra_env);
  const std::string name = command[0];
  if (child.exec_failed) {
    std::fprintf(stderr, "shardscope profile: %s\n", child.description.c_str());
    return child.status;
  }
  if (child.status != 0)
    std::fprintf(stderr, "shardscope profile: %s %s\n", name.c_str(), child.description.c_str());

  std::vector<profiler::ProcessTraceFile> processes;
  std::vector<std::string> errors;
  std::vector<fs::path> entries;
  for (const fs::directory_entry& e : fs::directory_iterator(dir.path))
    if (e.is_regular_file()) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    if (p.extension() == ".trace")
      processes.push_back(profiler::ProcessTraceFile{p.filename().string(), traces::load_trace(p)});
    else if (p.extension() == ".error")
      errors.push_back("pid " + p.stem().string() + " did not record: " + read_text(p));
  }
  for (const std::string& e : errors) std::fprintf(stderr, "shardscope profile: %s\n", e.c_str());

  if (processes.empty()) {
    if (errors.empty())
      std::fprintf(stderr,
                   "shardscope profile: no CUDA process initialised the profiler: %s did not use "
                   "CUDA, or no CUDA driver is available (CUDA_INJECTION64_PATH is read by the "
                   "driver at cuInit); %s not written\n",
                   name.c_str(), out.c_str());
    else
      std::fprintf(stderr, "shardscope profile: no process recorded a trace; %s not written\n",
                   out.c_str());
    return child.status != 0 ? child.status : 1;
  }

  profiler::MergedProfile merged = profiler::merge_process_traces(std::move(processes));
  merged.trace.meta.tool_versions["profiled_command"] = join_command(command);
  for (const std::string& note : merged.notes)
    std::fprintf(stderr, "shardscope profile: %s\n", note.c_str());
  traces::save_trace(merged.trace, out);
  std::printf("profile: %d process%s (ranks %s), %zu events, %llu dropped records -> %s\n",
              merged.processes, merged.processes == 1 ? "" : "es", rank_list(merged.trace).c_str(),
              merged.trace.event_count(), static_cast<unsigned long long>(merged.dropped_records),
              out.c_str());
  if (merged.dropped_records > 0)
    std::fprintf(stderr,
                 "shardscope profile: CUPTI dropped %llu records: the trace is incomplete; raise "
                 "--buffer-size\n",
                 static_cast<unsigned long long>(merged.dropped_records));
  if (child.status != 0)
    std::fprintf(stderr, "shardscope profile: %s %s; wrote what was recorded to %s\n", name.c_str(),
                 child.description.c_str(), out.c_str());
  return child.status;
}

}  // namespace shardscope::cli
