// detect_rank_env: which rank this process is, from shardscope's launcher, torchrun,
// Slurm's srun or Open MPI's mpirun (precedence and rules in launch.h).
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "engine/launch/launch.h"

namespace shardscope::engine::launch {
namespace {

constexpr int kDefaultPort = 29500;  // torch.distributed's default MASTER_PORT

const char* system_getenv(const char* name) {
  return std::getenv(name);
}

class EnvReader {
 public:
  explicit EnvReader(GetEnv fn) : fn_(fn ? fn : &system_getenv) {}

  // nullptr when unset or empty.
  const char* raw(const char* name) const {
    const char* v = fn_(name);
    return (v && *v) ? v : nullptr;
  }
  bool has(const char* name) const { return raw(name) != nullptr; }

  std::string required_string(const char* name, const char* launcher) const {
    const char* v = raw(name);
    if (!v) {
      throw LaunchError(std::string(launcher) + " environment detected but " + name +
                        " is not set");
    }
    return v;
  }
  // A decimal integer in [lo, hi].
  int64_t required_int(const char* name, const char* launcher, int64_t lo, int64_t hi) const {
    return parse_int(name, required_string(name, launcher), lo, hi);
  }

  static int64_t parse_int(const char* name, const std::string& value, int64_t lo, int64_t hi) {
    const char* begin = value.c_str();
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(begin, &end, 10);
    const bool digits_only = value.find_first_not_of("-+0123456789") == std::string::npos;
    if (end == begin || *end != '\0' || errno == ERANGE || !digits_only) {
      throw LaunchError(std::string(name) + "=" + quoted(value) + " is not a decimal integer");
    }
    if (parsed < lo || parsed > hi) {
      throw LaunchError(std::string(name) + "=" + value + " is outside " + std::to_string(lo) +
                        ".." + std::to_string(hi));
    }
    return parsed;
  }
  static std::string quoted(const std::string& s) { return "'" + s + "'"; }

 private:
  GetEnv fn_;
};

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// rank / world / local rank with the cross checks; names are the variables read.
void read_ranks(const EnvReader& env, const char* launcher, const char* rank_var,
                const char* world_var, const char* local_var, RankEnv& out) {
  out.world_size = static_cast<int>(env.required_int(world_var, launcher, 1, kIntMax));
  const std::string rank_text = env.required_string(rank_var, launcher);
  out.rank = static_cast<int>(EnvReader::parse_int(rank_var, rank_text, 0, kIntMax));
  if (out.rank >= out.world_size) {
    throw LaunchError(std::string(rank_var) + "=" + rank_text + " is not below " + world_var + "=" +
                      std::to_string(out.world_size));
  }
  const std::string local_text = env.required_string(local_var, launcher);
  out.local_rank = static_cast<int>(EnvReader::parse_int(local_var, local_text, 0, kIntMax));
  if (out.local_rank >= out.world_size) {
    throw LaunchError(std::string(local_var) + "=" + local_text + " is not below " + world_var +
                      "=" + std::to_string(out.world_size));
  }
}

int read_port(const EnvReader& env, const char* launcher) {
  return static_cast<int>(env.required_int("MASTER_PORT", launcher, 1, 65535));
}

RankEnv from_shardscope(const EnvReader& env) {
  RankEnv out;
  out.source = "shardscope";
  out.run_id = env.required_string("SHARDSCOPE_RUN_ID", "shardscope launcher");
  read_ranks(env, "shardscope launcher", "RANK", "WORLD_SIZE", "LOCAL_RANK", out);
  out.master_addr = env.required_string("MASTER_ADDR", "shardscope launcher");
  out.master_port = read_port(env, "shardscope launcher");
  out.launcher_hosts_store = true;
  return out;
}

RankEnv from_torchrun(const EnvReader& env) {
  RankEnv out;
  out.source = "torchrun";
  read_ranks(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", out);
  out.master_addr = env.required_string("MASTER_ADDR", "torchrun");
  out.master_port = read_port(env, "torchrun");
  const char* run = env.raw("TORCHELASTIC_RUN_ID");
  out.run_id = run ? std::string(run) : "torchrun-" + std::to_string(out.master_port);
  return out;
}

RankEnv from_slurm(const EnvReader& env) {
  RankEnv out;
  out.source = "slurm";
  read_ranks(env, "Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", out);
  const std::string job_text = env.required_string("SLURM_JOB_ID", "Slurm");
  const int64_t job_id =
      EnvReader::parse_int("SLURM_JOB_ID", job_text, 0, std::numeric_limits<int64_t>::max());
  if (const char* addr = env.raw("MASTER_ADDR")) {
    out.master_addr = addr;
  } else if (const char* list = env.raw("SLURM_JOB_NODELIST")) {
    out.master_addr = first_slurm_host(list, "SLURM_JOB_NODELIST");
  } else if (const char* list2 = env.raw("SLURM_NODELIST")) {
    out.master_addr = first_slurm_host(list2, "SLURM_NODELIST");
  } else {
    throw LaunchError(
        "Slurm environment detected but none of MASTER_ADDR, SLURM_JOB_NODELIST, SLURM_NODELIST "
        "is set");
  }
  out.master_port = env.has("MASTER_PORT") ? read_port(env, "Slurm")
                                           : kDefaultPort + static_cast<int>(job_id % 1000);
  const char* step = env.raw("SLURM_STEP_ID");
  out.run_id = "slurm-" + std::to_string(job_id) + (step ? "." + std::string(step) : "");
  return out;
}

RankEnv from_openmpi(const EnvReader& env) {
  RankEnv out;
  out.source = "mpirun";
  read_ranks(env, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_LOCAL_RANK", out);
  if (const char* addr = env.raw("MASTER_ADDR")) out.master_addr = addr;
  out.master_port = env.has("MASTER_PORT") ? read_port(env, "Open MPI") : kDefaultPort;
  if (const char* ns = env.raw("PMIX_NAMESPACE")) {
    out.run_id = std::string("mpirun-") + ns;
  } else if (const char* uri = env.raw("OMPI_MCA_orte_hnp_uri")) {
    const std::string s(uri);
    out.run_id = "mpirun-" + s.substr(0, s.find(';'));
  } else {
    out.run_id = "mpirun-" + std::to_string(out.master_port);
  }
  return out;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist, const std::string& variable) {
  auto malformed = [&](const std::string& why) {
    return LaunchError(variable + "='" + nodelist + "' is not a Slurm node list: " + why);
  };
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    const char c = nodelist[i];
    if (c == ']') throw malformed("']' without '['");
    if (c != '[') {
      host += c;
      ++i;
      continue;
    }
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) throw malformed("'[' without ']'");
    const std::string inside = nodelist.substr(i + 1, close - i - 1);
    // The first element of the first range, zero padding kept: "01-04,07" -> "01".
    const std::string first = inside.substr(0, inside.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) {
      throw malformed("range '[" + inside + "]' does not start with a number");
    }
    host += first;
    i = close + 1;
  }
  if (host.empty()) throw malformed("no host before the first ','");
  return host;
}

std::optional<RankEnv> detect_rank_env(GetEnv getenv_fn) {
  const EnvReader env(getenv_fn);
  if (env.has("SHARDSCOPE_RUN_ID")) return from_shardscope(env);
  if (env.has("RANK")) return from_torchrun(env);
  if (env.has("SLURM_PROCID")) return from_slurm(env);
  if (env.has("OMPI_COMM_WORLD_RANK")) return from_openmpi(env);
  return std::nullopt;
}

}  // namespace shardscope::engine::launch
