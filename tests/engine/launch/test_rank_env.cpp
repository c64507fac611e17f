// detect_rank_env and first_slurm_host with an injected environment.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "engine/launch/launch.h"

using namespace shardscope::engine::launch;

namespace {

std::map<std::string, std::string> g_env;  // the fake environment read by fake_getenv

const char* fake_getenv(const char* name) {
  const auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

RankEnv detect(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  const auto got = detect_rank_env(&fake_getenv);
  REQUIRE(got.has_value());
  return *got;
}

// The LaunchError message detect_rank_env throws for `env`.
std::string error_for(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  try {
    detect_rank_env(&fake_getenv);
  } catch (const LaunchError& e) {
    return e.what();
  }
  FAIL("no LaunchError");
  return {};
}

const std::map<std::string, std::string> kTorchrun = {{"RANK", "3"},
                                                      {"WORLD_SIZE", "8"},
                                                      {"LOCAL_RANK", "1"},
                                                      {"MASTER_ADDR", "10.0.0.7"},
                                                      {"MASTER_PORT", "29501"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> base,
                                        const std::map<std::string, std::string>& changes) {
  for (const auto& [k, v] : changes) base[k] = v;
  return base;
}

std::map<std::string, std::string> without(std::map<std::string, std::string> base,
                                           const std::string& key) {
  base.erase(key);
  return base;
}

const std::map<std::string, std::string> kSlurm = {
    {"SLURM_PROCID", "5"},  {"SLURM_NTASKS", "16"},
    {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "123456"},
    {"SLURM_STEP_ID", "2"}, {"SLURM_JOB_NODELIST", "node[01-04,07],gpu5"}};

const std::map<std::string, std::string> kOmpi = {{"OMPI_COMM_WORLD_RANK", "2"},
                                                  {"OMPI_COMM_WORLD_SIZE", "4"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}};

}  // namespace

TEST_CASE("no launcher variables: nullopt") {
  g_env = {{"HOME", "/root"}, {"SLURM_PROCID", ""}};  // empty counts as unset
  CHECK_FALSE(detect_rank_env(&fake_getenv).has_value());
}

TEST_CASE("shardscope launcher variables, launcher hosts the store") {
  const RankEnv e = detect(with(kTorchrun, {{"SHARDSCOPE_RUN_ID", "ss-abc"}}));
  CHECK(e.source == "shardscope");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "10.0.0.7");
  CHECK(e.master_port == 29501);
  CHECK(e.run_id == "ss-abc");
  CHECK(e.launcher_hosts_store);
}

TEST_CASE("torchrun: run id from TORCHELASTIC_RUN_ID, else torchrun-<port>") {
  const RankEnv a = detect(with(kTorchrun, {{"TORCHELASTIC_RUN_ID", "job42"}}));
  CHECK(a.source == "torchrun");
  CHECK(a.run_id == "job42");
  CHECK(a.rank == 3);
  CHECK(a.world_size == 8);
  CHECK(a.local_rank == 1);
  CHECK(a.master_addr == "10.0.0.7");
  CHECK(a.master_port == 29501);
  CHECK_FALSE(a.launcher_hosts_store);
  CHECK(detect(kTorchrun).run_id == "torchrun-29501");
}

TEST_CASE("torchrun wins over Slurm when both are set (torchrun under srun)") {
  std::map<std::string, std::string> env = kSlurm;
  for (const auto& [k, v] : kTorchrun) env[k] = v;
  const RankEnv e = detect(env);
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 3);
}

TEST_CASE("slurm: first host of the node list, port 29500 + job id % 1000, run id job.step") {
  const RankEnv e = detect(kSlurm);
  CHECK(e.source == "slurm");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 16);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "node01");
  CHECK(e.master_port == 29500 + 456);
  CHECK(e.run_id == "slurm-123456.2");
}

TEST_CASE("slurm: MASTER_ADDR and MASTER_PORT from the user win") {
  const RankEnv e = detect(with(kSlurm, {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "40000"}}));
  CHECK(e.master_addr == "head");
  CHECK(e.master_port == 40000);
}

TEST_CASE("slurm: SLURM_NODELIST when SLURM_JOB_NODELIST is unset, no step id") {
  auto env = without(without(kSlurm, "SLURM_JOB_NODELIST"), "SLURM_STEP_ID");
  env["SLURM_NODELIST"] = "gpu[7-9]";
  const RankEnv e = detect(env);
  CHECK(e.master_addr == "gpu7");
  CHECK(e.run_id == "slurm-123456");
}

TEST_CASE("slurm node list expansion") {
  CHECK(first_slurm_host("node[01-04,07],gpu5", "V") == "node01");
  CHECK(first_slurm_host("gpu5", "V") == "gpu5");
  CHECK(first_slurm_host("gpu5,gpu6", "V") == "gpu5");
  CHECK(first_slurm_host("a[2-3]-ib[7,9]", "V") == "a2-ib7");
  CHECK(first_slurm_host("n[009-011]", "V") == "n009");
  CHECK(first_slurm_host("[3-4]x", "V") == "3x");
  for (const std::string bad : {"", "node[01-04", "node]", ",gpu5", "node[]", "node[a-b]"}) {
    INFO(bad);
    try {
      first_slurm_host(bad, "SLURM_JOB_NODELIST");
      FAIL("accepted");
    } catch (const LaunchError& e) {
      CHECK_THAT(e.what(), Catch::Contains("SLURM_JOB_NODELIST='" + bad + "'"));
    }
  }
}

TEST_CASE("open mpi: loopback and port 29500 by default, run id from PMIx or the HNP uri") {
  const RankEnv e = detect(kOmpi);
  CHECK(e.source == "mpirun");
  CHECK(e.rank == 2);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 2);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 29500);
  CHECK(e.run_id == "mpirun-29500");
  CHECK(detect(with(kOmpi, {{"PMIX_NAMESPACE", "prterun-h-77@1"}})).run_id ==
        "mpirun-prterun-h-77@1");
  CHECK(detect(with(kOmpi, {{"OMPI_MCA_orte_hnp_uri", "3141.0;tcp://10.1.1.1:5000"}})).run_id ==
        "mpirun-3141.0");
  const RankEnv u = detect(with(kOmpi, {{"MASTER_ADDR", "head"}, {"MASTER_PORT", "31000"}}));
  CHECK(u.master_addr == "head");
  CHECK(u.master_port == 31000);
}

TEST_CASE("malformed values name the variable and the value") {
  CHECK_THAT(error_for(with(kTorchrun, {{"RANK", "abc"}})), Catch::Contains("RANK='abc'"));
  CHECK_THAT(error_for(with(kTorchrun, {{"RANK", "3 "}})), Catch::Contains("RANK='3 '"));
  CHECK_THAT(error_for(with(kTorchrun, {{"RANK", "-1"}})), Catch::Contains("RANK=-1 is outside"));
  CHECK_THAT(error_for(with(kTorchrun, {{"RANK", "8"}})),
             Catch::Contains("RANK=8 is not below WORLD_SIZE=8"));
  CHECK_THAT(error_for(with(kTorchrun, {{"RANK", "99999999999999999999"}})),
             Catch::Contains("RANK='99999999999999999999' is not a decimal integer"));
  CHECK_THAT(error_for(with(kTorchrun, {{"WORLD_SIZE", "0"}})),
             Catch::Contains("WORLD_SIZE=0 is outside 1.."));
  CHECK_THAT(error_for(with(kTorchrun, {{"LOCAL_RANK", "9"}})),
             Catch::Contains("LOCAL_RANK=9 is not below WORLD_SIZE=8"));
  CHECK_THAT(error_for(with(kTorchrun, {{"MASTER_PORT", "70000"}})),
             Catch::Contains("MASTER_PORT=70000 is outside 1..65535"));
  CHECK_THAT(error_for(with(kTorchrun, {{"MASTER_PORT", "0"}})),
             Catch::Contains("MASTER_PORT=0 is outside 1..65535"));
  CHECK_THAT(error_for(with(kSlurm, {{"SLURM_NTASKS", "4x"}})),
             Catch::Contains("SLURM_NTASKS='4x'"));
  CHECK_THAT(error_for(with(kSlurm, {{"SLURM_PROCID", "16"}})),
             Catch::Contains("SLURM_PROCID=16 is not below SLURM_NTASKS=16"));
  CHECK_THAT(error_for(with(kSlurm, {{"SLURM_JOB_ID", "j1"}})),
             Catch::Contains("SLURM_JOB_ID='j1'"));
  CHECK_THAT(error_for(with(kSlurm, {{"MASTER_PORT", "-5"}})),
             Catch::Contains("MASTER_PORT=-5 is outside 1..65535"));
  CHECK_THAT(error_for(with(kOmpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}})),
             Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK='x'"));
}

TEST_CASE("missing variables of a detected launcher are named") {
  CHECK_THAT(error_for(without(kTorchrun, "WORLD_SIZE")),
             Catch::Contains("torchrun environment detected but WORLD_SIZE is not set"));
  CHECK_THAT(error_for(without(kTorchrun, "MASTER_ADDR")),
             Catch::Contains("MASTER_ADDR is not set"));
  CHECK_THAT(
      error_for(with(without(kTorchrun, "MASTER_PORT"), {{"SHARDSCOPE_RUN_ID", "x"}})),
      Catch::Contains("shardscope launcher environment detected but MASTER_PORT is not set"));
  CHECK_THAT(error_for(without(kSlurm, "SLURM_JOB_ID")),
             Catch::Contains("SLURM_JOB_ID is not set"));
  CHECK_THAT(error_for(without(kSlurm, "SLURM_JOB_NODELIST")),
             Catch::Contains("none of MASTER_ADDR, SLURM_JOB_NODELIST, SLURM_NODELIST"));
  CHECK_THAT(error_for(without(kOmpi, "OMPI_COMM_WORLD_SIZE")),
             Catch::Contains("OMPI_COMM_WORLD_SIZE is not set"));
}
