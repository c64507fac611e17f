// launch(): serve the store, fork+exec nproc ranks, pump their output, reap them, and
// take every rank down when one fails (rules in launch.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/launch/launch.h"
#include "engine/launch/output_pump.h"
#include "engine/launch/store_protocol.h"

extern char** environ;

namespace shardscope::engine::launch {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(5);
// After the last rank is reaped, how long the pump may still drain pipes that a
// rank's own children keep open.
constexpr int64_t kDrainMs = 1000;

volatile sig_atomic_t g_forward_signal = 0;  // the first SIGINT / SIGTERM received
volatile sig_atomic_t g_signal_count = 0;    // a second one escalates to SIGKILL at once
void on_forwarded_signal(int signo) {
  if (g_forward_signal == 0) g_forward_signal = signo;
  g_signal_count = g_signal_count + 1;
}

// SIGINT / SIGTERM set g_forward_signal while alive; previous handlers restored after.
class SignalForwarding {
 public:
  SignalForwarding() {
    g_forward_signal = 0;
    g_signal_count = 0;
    struct sigaction sa {};
    sa.sa_handler = on_forwarded_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalForwarding() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// argv[0] as an executable path: as given when it holds a '/', else searched in PATH.
std::string resolve_program(const std::string& name) {
  auto executable = [](const std::string& path) { return ::access(path.c_str(), X_OK) == 0; };
  if (name.find('/') != std::string::npos) {
    if (!executable(name)) {
      throw LaunchError("launch: rank program '" + name +
                        "' is not an executable file: " + std::strerror(errno));
    }
    return name;
  }
  const char* path_env = ::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > begin ? path.substr(begin, end - begin) : ".";
    const std::string candidate = dir + "/" + name;
    if (executable(candidate)) return candidate;
    begin = end + 1;
  }
  throw LaunchError("launch: rank program '" + name + "' was not found in PATH");
}

std::string unique_run_id() {
  static std::atomic<int> counter{0};
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  return std::string("ss-") + host + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1)) + "-" + std::to_string(protocol::monotonic_ns());
}

// The environment of one rank: ours minus the variables we set, plus those.
std::vector<std::string> rank_environment(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& kv : set) overridden = overridden || kv.first == name;
    if (!overridden) env.push_back(entry);
  }
  for (const auto& kv : set) env.push_back(kv.first + "=" + kv.second);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

struct Rank {
  int pid = -1;
  bool alive = false;
  int status = 0;  // waitpid status once reaped
  bool reaped = false;
};

std::string describe_status(int rank, int pid, int status) {
  std::string s = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    s += " was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  } else {
    s += " exited with code " + std::to_string(WEXITSTATUS(status));
  }
  return s;
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// Signals every live rank's process group (each rank leads its own).
void signal_all(const std::vector<Rank>& ranks, int signo) {
  for (const Rank& r : ranks) {
    if (r.alive) ::kill(-r.pid, signo);
  }
}

std::mutex g_launch_mutex;  // one launch() at a time: the signal handlers are process-wide

}  // namespace

LaunchResult launch(const LaunchOptions& options) {
  if (options.nproc < 1) {
    throw LaunchError("launch: nproc = " + std::to_string(options.nproc) + ", must be >= 1");
  }
  if (options.argv.empty()) throw LaunchError("launch: the rank command (argv) is empty");
  const std::string program = resolve_program(options.argv[0]);
  std::lock_guard<std::mutex> serial(g_launch_mutex);

  const std::string run_id = unique_run_id();
  TcpStoreServer server(options.master_addr, options.master_port, run_id, options.nproc);
  const int port = server.port();

  // Everything the children need is built before the first fork: between fork and
  // exec a child of this multithreaded process may only make async-signal-safe calls.
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv_c = c_strings(argv_strings);
  std::vector<std::vector<std::string>> env_strings;
  std::vector<std::vector<char*>> env_c;
  for (int r = 0; r < options.nproc; ++r) {
    env_strings.push_back(rank_environment({{"RANK", std::to_string(r)},
                                            {"WORLD_SIZE", std::to_string(options.nproc)},
                                            {"LOCAL_RANK", std::to_string(r)},
                                            {"MASTER_ADDR", options.master_addr},
                                            {"MASTER_PORT", std::to_string(port)},
                                            {"SHARDSCOPE_RUN_ID", run_id}}));
  }
  for (auto& e : env_strings) env_c.push_back(c_strings(e));

  OutputPump pump(options.nproc, options.prefix_output);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    throw LaunchError(std::string("launch: open(/dev/null): ") + std::strerror(errno));
  const pid_t launcher_pid = ::getpid();
  static const char kExecFailed[] = "launch: exec of the rank program failed, errno ";

  SignalForwarding forwarding;
  std::vector<Rank> ranks(static_cast<size_t>(options.nproc));
  LaunchResult result;
  result.run_id = run_id;
  std::string start_error;
  for (int r = 0; r < options.nproc; ++r) {
    const int out_fd = pump.child_stdout(r), err_fd = pump.child_stderr(r);
    const pid_t pid = ::fork();
    if (pid < 0) {
      start_error =
          "launch: fork() of rank " + std::to_string(r) + " failed: " + std::strerror(errno);
      break;
    }
    if (pid == 0) {
      // Child: async-signal-safe calls only.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher_pid) _exit(128 + SIGTERM);  // the launcher died already
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(devnull, STDIN_FILENO);
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
      ::execve(program.c_str(), argv_c.data(), env_c[static_cast<size_t>(r)].data());
      // Report errno in decimal without snprintf.
      char digits[16];
      int n = 0, e = errno;
      do {
        digits[15 - n++] = static_cast<char>('0' + e % 10);
        e /= 10;
      } while (e > 0 && n < 15);
      [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1);
      w = ::write(STDERR_FILENO, digits + 16 - n, static_cast<size_t>(n));
      w = ::write(STDERR_FILENO, "\n", 1);
      _exit(127);
    }
    ::setpgid(pid, pid);  // also here: no race with an early kill(-pid)
    ranks[static_cast<size_t>(r)] = {pid, true, 0, false};
    result.pids.push_back(pid);
  }
  ::close(devnull);
  pump.close_child_ends();

  int first_failed = -1;
  int forwarded = 0;
  bool terminating = false, killed = false;
  auto kill_deadline = std::chrono::steady_clock::now();
  auto begin_termination = [&](int signo) {
    signal_all(ranks, signo);
    if (!terminating) kill_deadline = std::chrono::steady_clock::now() + options.kill_grace;
    terminating = true;
  };
  if (!start_error.empty()) begin_termination(SIGTERM);

  for (;;) {
    bool any_alive = false;
    for (int r = 0; r < options.nproc; ++r) {
      Rank& rk = ranks[static_cast<size_t>(r)];
      if (!rk.alive) continue;
      int status = 0;
      const pid_t got = ::waitpid(rk.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) {
        any_alive = true;
        continue;
      }
      rk.alive = false;
      rk.reaped = got == rk.pid;
      rk.status = rk.reaped ? status : 0;
      // A rank that fails after we began taking the run down is a consequence, not a cause.
      if (rk.reaped && failed(status) && first_failed < 0 && !terminating) first_failed = r;
    }
    if (!any_alive) break;
    if (g_forward_signal != 0 && forwarded == 0) {
      forwarded = g_forward_signal;
      begin_termination(forwarded);
    }
    if (first_failed >= 0 && !terminating) begin_termination(SIGTERM);
    if (terminating && !killed &&
        (std::chrono::steady_clock::now() >= kill_deadline || g_signal_count >= 2)) {
      signal_all(ranks, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  // The ranks' own children (same process groups) go too once the run failed.
  if (terminating) {
    for (const Rank& rk : ranks) {
      if (rk.pid > 0) ::kill(-rk.pid, SIGKILL);
    }
  }
  pump.finish(kDrainMs);

  if (!start_error.empty()) throw LaunchError(start_error);
  if (forwarded != 0) {
    result.exit_code = 128 + forwarded;
    const char* name = strsignal(forwarded);
    result.message = "the launcher received signal " + std::to_string(forwarded) + " (" +
                     (name ? name : "?") + ") and passed it to the ranks";
    if (first_failed >= 0) {
      result.failed_rank = first_failed;
      result.message +=
          "; " + describe_status(first_failed, ranks[static_cast<size_t>(first_failed)].pid,
                                 ranks[static_cast<size_t>(first_failed)].status);
    }
    return result;
  }
  if (first_failed < 0) {
    // Every rank exited 0 (a rank reaped elsewhere, ECHILD, counts as unknown).
    for (int r = 0; r < options.nproc; ++r) {
      if (!ranks[static_cast<size_t>(r)].reaped) {
        result.exit_code = 1;
        result.failed_rank = r;
        result.message = "rank " + std::to_string(r) + " (pid " +
                         std::to_string(ranks[static_cast<size_t>(r)].pid) +
                         ") was reaped by someone else; its exit status is unknown";
        return result;
      }
    }
    return result;
  }
  const Rank& bad = ranks[static_cast<size_t>(first_failed)];
  result.failed_rank = first_failed;
  result.exit_code = exit_code_of(bad.status);
  result.message = describe_status(first_failed, bad.pid, bad.status);
  if (const auto error = server.peek("error/" + std::to_string(first_failed))) {
    result.message += ": " + *error;
  } else if (const std::string line = pump.last_stderr_line(first_failed); !line.empty()) {
    result.message += "; its last stderr line: " + line;
  }
  return result;
}

}  // namespace shardscope::engine::launch
