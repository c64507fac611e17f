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
  int master_port = 0;
  std::string run_id;  // SHARDSCOPE_RUN_ID, or derived from the launcher's job id
  std::string source;  // "shardscope", "torchrun", "slurm", "mpirun"
};
// Reads (in this order of precedence) shardscope's launcher variables, torchrun's
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm's (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR/MASTER_PORT from the user or the first
// host of SLURM_JOB_NODELIST, port derived from SLURM_JOB_ID) and Open MPI's
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK). std::nullopt when none is set.
// Throws LaunchError naming the variable for malformed or inconsistent values.
// `getenv` is injectable for tests.
using GetEnv = const char* (*)(const char*);
std::optional<RankEnv> detect_rank_env(GetEnv getenv_fn = nullptr);

// ---- TCP store ------------------------------------------------------------------------
// Rank 0 serves; every rank (rank 0 included) is a client. Requests carry the run
// id and world size; a client with another run id or world size is refused with a
// clear error on both sides; junk connections (bad magic, short reads, oversize
// lengths) are dropped without disturbing other clients.
class TcpStoreServer {
 public:
  // port 0: pick a free port (port() tells which). Listens on addr (loopback default).
  TcpStoreServer(const std::string& addr, int port, const std::string& run_id, int world_size);
  ~TcpStoreServer();
  int port() const;
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class TcpStore {
 public:
  // Connects (retrying until `timeout`) and registers as `rank`.
  TcpStore(const std::string& addr, int port, const std::string& run_id, int world_size, int rank,
           std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // Blocks until the key exists (LaunchError after the timeout, naming the key).
  std::string get(const std::string& key);
  std::optional<std::string> try_get(const std::string& key);
  int64_t add(const std::string& key, int64_t delta);
  // All world_size ranks reach barrier `name` (LaunchError naming the missing ranks on timeout).
  void barrier(const std::string& name);
  // The server's clock (CLOCK_MONOTONIC ns) minus ours, midpoint of a round trip:
  // rank traces are aligned to the store's reference with it.
  int64_t clock_offset_ns();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- launcher -----------------------------------------------------------------------------
struct LaunchOptions {
  int nproc = 2;
  std::vector<std::string> argv;  // the rank command (argv[0] an executable path)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port
  std::chrono::milliseconds kill_grace{2000};  // SIGTERM -> SIGKILL
};
struct LaunchResult {
  int exit_code = 0;        // 0 when every rank exited 0
  int failed_rank = -1;     // the first rank that failed
  std::string message;      // "rank 1 (pid 1234) was killed by signal 9" / its error text
};
// Starts nproc processes with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT, SHARDSCOPE_RUN_ID set, waits for them; when one fails, terminates
// the others (SIGTERM, then SIGKILL after kill_grace) so that every process is gone
// within 10 s, and reports which rank failed first and why (its last stderr line
// or the error it left in the store under "error/<rank>").
LaunchResult launch(const LaunchOptions& options);

}  // namespace shardscope::engine::launch
