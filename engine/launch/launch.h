// Launcher and rendezvous (engine/launch): which rank this process is (from
// shardscope's own launcher, torchrun, Slurm's srun or Open MPI's mpirun), a
// small TCP key-value store for rendezvous, and the launcher that starts N
// rank processes and makes sure none outlives a failure.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope::engine::launch {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- environment ----------------------------------------------------------------------
struct RankEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 1..65535 once detected
  std::string run_id;   // SHARDSCOPE_RUN_ID, or derived from the launcher's job id
  std::string source;   // "shardscope", "torchrun", "slurm", "mpirun"
  // True when the process that started the ranks already serves the store at
  // master_addr:master_port (shardscope's launcher does); otherwise rank 0 serves.
  bool launcher_hosts_store = false;
};
// Reads, in this order of precedence:
//  - shardscope's launcher (SHARDSCOPE_RUN_ID set): RANK, WORLD_SIZE, LOCAL_RANK,
//    MASTER_ADDR, MASTER_PORT, all required; launcher_hosts_store = true.
//  - torchrun (RANK set): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, all
//    required; run id TORCHELASTIC_RUN_ID, else "torchrun-<MASTER_PORT>".
//  - Slurm srun (SLURM_PROCID set): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
//    SLURM_JOB_ID required. MASTER_ADDR / MASTER_PORT from the user when set; else the
//    first host of SLURM_JOB_NODELIST (or SLURM_NODELIST), compressed form expanded
//    ("node[01-04,07],gpu5" -> "node01"), and port 29500 + SLURM_JOB_ID % 1000 (so two
//    jobs sharing a node rarely collide). Run id "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>"
//    ("slurm-<SLURM_JOB_ID>" when SLURM_STEP_ID is unset).
//  - Open MPI (OMPI_COMM_WORLD_RANK set): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK
//    required; MASTER_ADDR / MASTER_PORT from the user, else 127.0.0.1 (one node) and
//    port 29500. Run id "mpirun-<PMIX_NAMESPACE>", else "mpirun-<job part of
//    OMPI_MCA_orte_hnp_uri>" (before ';'), else "mpirun-<port>".
// std::nullopt when none is set. Throws LaunchError naming the variable and its value
// for malformed values (not a decimal integer, negative, rank >= world size, local
// rank >= world size, world size < 1, port outside 1..65535) and for missing ones.
// `getenv` is injectable for tests (nullptr: ::getenv).
using GetEnv = const char* (*)(const char*);
std::optional<RankEnv> detect_rank_env(GetEnv getenv_fn = nullptr);

// First host of a Slurm node list in compressed form: "node[01-04,07],gpu5" -> "node01",
// "a[2-3]-ib[7,9]" -> "a2-ib7", "gpu5" -> "gpu5". LaunchError (naming `variable`) when
// malformed (empty, unbalanced brackets, empty range).
std::string first_slurm_host(const std::string& nodelist, const std::string& variable);

// ---- TCP store ------------------------------------------------------------------------
// Rank 0 (or the launcher) serves; every rank (rank 0 included) is a client. A
// connection starts with a handshake carrying the run id, world size and rank; a
// client with another run id or world size, or a rank outside 0..world-1, is refused
// with a message both sides see (the client's LaunchError, the server's stderr and
// refusals()):
//   "store at 127.0.0.1:29500 belongs to run X with world size 4, this rank expects
//    run Y with world size 2"
// Junk connections (bad magic or version, a payload over 4 MiB, a partial message or
// a missing handshake older than stall_timeout) are dropped without disturbing other
// clients. Memory is bounded: at most 1024 connections, 4 MiB per message, one request
// handled at a time per connection (its next is read once the reply is sent, so a peer
// that does not read its replies stalls and is dropped), 256 MiB of stored keys and
// values, 65536 barrier names. The wire format is in store_protocol.h.
class TcpStoreServer {
 public:
  // port 0: pick a free port (port() tells which). Listens on addr (loopback default;
  // "0.0.0.0" for every interface). Serves from one background thread until destroyed.
  // LaunchError naming addr:port when it cannot listen.
  TcpStoreServer(const std::string& addr, int port, const std::string& run_id, int world_size,
                 std::chrono::milliseconds stall_timeout = std::chrono::seconds(10));
  ~TcpStoreServer();
  int port() const;
  // The value of `key` now, without waiting (the launcher reads "error/<rank>" with it).
  std::optional<std::string> peek(const std::string& key) const;
  // The refusal messages sent so far (handshake mismatches), oldest first, at most 64.
  std::vector<std::string> refusals() const;
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStore {
 public:
  // Connects (retrying until `timeout`: the server may start later) and registers as
  // `rank`. LaunchError naming addr:port when nothing answers within the timeout, or
  // the server's refusal message. `timeout` also bounds every blocking call below.
  TcpStore(const std::string& addr, int port, const std::string& run_id, int world_size, int rank,
           std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Blocks until the key exists (LaunchError after the timeout, naming the key).
  std::string get(const std::string& key);
  std::optional<std::string> try_get(const std::string& key);
  bool check(const std::string& key);
  // The key holds a decimal int64 (absent = 0); returns the value after adding delta.
  // LaunchError when the key holds something else.
  int64_t add(const std::string& key, int64_t delta);
  // All world_size ranks reach barrier `name` (LaunchError naming the missing ranks on
  // timeout). A name may be reused: a rank's k-th arrival at `name` waits for every
  // rank's k-th arrival.
  void barrier(const std::string& name);
  // The server's clock (CLOCK_MONOTONIC ns) minus ours, estimated from the round trip
  // with the smallest RTT of a few (error at most half that RTT): rank traces are
  // aligned to the store's reference with it.
  int64_t clock_offset_ns();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One rank's rendezvous: rank 0 starts the server (unless env.launcher_hosts_store)
// on master_port, bound to 127.0.0.1 when master_addr is a loopback address and to
// every interface otherwise; then every rank connects as a client.
struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;  // rank 0's, else null
  std::unique_ptr<TcpStore> store;
};
Rendezvous rendezvous(const RankEnv& env, std::chrono::milliseconds timeout);

// ---- launcher -----------------------------------------------------------------------------
struct LaunchOptions {
  int nproc = 2;
  std::vector<std::string> argv;  // the rank command (argv[0] an executable path or a PATH name)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                         // 0: a free port
  std::chrono::milliseconds kill_grace{2000};  // SIGTERM -> SIGKILL
  bool prefix_output = true;                   // "[rank r] " before each line of a rank's output
};
struct LaunchResult {
  int exit_code = 0;      // 0 when every rank exited 0; the failed rank's code, 128 + signal
  int failed_rank = -1;   // the first rank that failed (-1: none, or the launcher was signalled)
  std::string message;    // "rank 1 (pid 1234) was killed by signal 9 (Killed)" / its error text
  std::vector<int> pids;  // pid of each rank (all reaped when launch() returns)
  std::string run_id;     // the SHARDSCOPE_RUN_ID the ranks were given
};
// Serves the store itself on master_addr:master_port, then starts nproc processes with
// RANK, WORLD_SIZE, LOCAL_RANK (= RANK: one node), MASTER_ADDR, MASTER_PORT and a
// SHARDSCOPE_RUN_ID unique to this launch set, stdin from /dev/null, each in its own
// process group and with SIGTERM as parent-death signal (so a launcher killed by
// SIGKILL leaves no ranks behind). Their stdout/stderr pass through the launcher.
// Waits for all; when one fails (non-zero exit or a signal), sends SIGTERM to the
// others' process groups, SIGKILL after kill_grace, and reaps them all, so that every
// rank is gone within kill_grace + a few ms; reports which rank failed first and why
// (the error it left in the store under "error/<rank>", else its last stderr line).
// SIGINT / SIGTERM received by the launcher while it waits are forwarded to the ranks
// (then the same escalation; a second one sends SIGKILL at once). Throws LaunchError before
// starting any rank when argv is empty, its program cannot be found, nproc < 1, or the store cannot
// listen. One launch() at a time per process (calls are serialised).
LaunchResult launch(const LaunchOptions& options);

}  // namespace shardscope::engine::launch
