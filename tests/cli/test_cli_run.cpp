// `shardscope run` with real rank processes: equivalence with single-rank
// training on the same global batch, failures that must end every process
// quickly with the failed rank named, and bad launcher environments.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/run_cli.h"

using shardscope::test::run_cli;

namespace {

nlohmann::json json_of(const std::string& output) {
  const size_t at = output.rfind("\n{\n");
  const size_t start = output.rfind("{\n", 0) == 0 ? 0 : (at == std::string::npos ? 0 : at + 1);
  return nlohmann::json::parse(output.substr(start));
}

std::vector<double> losses(const std::string& args) {
  const auto r = run_cli("run " + args + " --steps 3 --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  return json_of(r.output).at("losses").get<std::vector<double>>();
}

}  // namespace

TEST_CASE("run with rank processes equals single-rank training", "[cli][run]") {
  struct Case {
    std::string model, sets;
    int nproc, batch;
  };
  const std::string block = "--set wrap.type=class --set 'wrap.classes=[\"GPT2Block\"]' ";
  const std::vector<Case> cases = {
      {"gpt2-tiny", block, 2, 2},
      {"gpt2-tiny", block + "--set flavor=fsdp1 --set grad_accum_steps=2", 2, 2},
      {"gpt2-tiny", block + "--set activation_checkpointing=full --set reshard_after_forward=false",
       2, 2},
      {"gpt2-tiny", block + "--set shard_group_size=2", 4, 1},
      {"llama-tiny",
       "--set wrap.type=class --set 'wrap.classes=[\"LlamaDecoderLayer\"]' --set "
       "backward_prefetch=none",
       3, 1},
  };
  const std::string sgd = "--set 'optimizer={\"type\":\"sgd\",\"lr\":0.05,\"momentum\":0.9}' ";
  for (const Case& c : cases) {
    INFO(c.model << " " << c.sets << " nproc " << c.nproc);
    const std::string common = "--model " + c.model + " --set seq_len=16 " + sgd;
    const auto sharded = losses(common + c.sets + " --nproc " + std::to_string(c.nproc) +
                                " --set batch_size=" + std::to_string(c.batch));
    const std::string accum =
        c.sets.find("grad_accum_steps=2") != std::string::npos ? " --set grad_accum_steps=2" : "";
    const auto single =
        losses(common + "--nproc 1 --set batch_size=" + std::to_string(c.batch * c.nproc) + accum);
    REQUIRE(sharded.size() == single.size());
    for (size_t i = 0; i < single.size(); ++i)
      CHECK(std::abs(sharded[i] - single[i]) <= 1e-5 * std::abs(single[i]));
  }
}

TEST_CASE("a rank killed mid-run ends every process within 10 s and is named", "[cli][run]") {
  const std::string log = "/tmp/shardscope-kill-test-" + std::to_string(getpid()) + ".log";
  const pid_t launcher = fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    const std::string cmd = std::string(SHARDSCOPE_CLI) +
                            " run --model gpt2-tiny --nproc 3 --steps 1000000 --set batch_size=1 "
                            "--set seq_len=16 > " +
                            log + " 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training runs (rank 0 prints step lines), then find rank 1.
  auto read_log = [&] {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_log().find("step 3/") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(read_log().find("step 3/") != std::string::npos);
  std::vector<pid_t> children;
  {
    std::ifstream in("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) +
                     "/children");
    pid_t p;
    while (in >> p) children.push_back(p);
  }
  REQUIRE(children.size() == 3);  // ranks 0, 1, 2 in start order
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kill(children[1], SIGKILL) == 0);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(launcher, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (done == 0) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
  }
  const std::string out = read_log();
  std::remove(log.c_str());
  INFO(out);
  CHECK(done == launcher);
  CHECK(seconds <= 10.0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGKILL);  // the launcher's code for a killed rank
  CHECK(out.find("rank 1") != std::string::npos);
  CHECK(out.find("signal 9") != std::string::npos);
  for (pid_t c : children) CHECK((kill(c, 0) == -1 && errno == ESRCH));
}

TEST_CASE("bad launcher environments are clear errors", "[cli][run]") {
  // An environment variable before the binary: run_cli's command line goes through sh.
  const std::string cli = SHARDSCOPE_CLI;
  auto r = run_cli(
      "--help >/dev/null; RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=99999 " +
      cli + " run --model gpt2-tiny --steps 1");
  CHECK(r.status != 0);
  CHECK(r.output.find("MASTER_PORT") != std::string::npos);
  CHECK(r.output.find("99999") != std::string::npos);

  r = run_cli(
      "--help >/dev/null; RANK=2 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=29511 " +
      cli + " run --model gpt2-tiny --steps 1");
  CHECK(r.status != 0);
  CHECK(r.output.find("RANK") != std::string::npos);

  r = run_cli("run --model gpt2-tiny --nproc 2 --set world_size=4 --steps 1");
  CHECK(r.status == 2);
  CHECK(r.output.find("world_size") != std::string::npos);

  r = run_cli("run --model gpt2-tiny --backend cuda --steps 1");
  CHECK(r.status == 2);
  CHECK(r.output.find("CUDA") != std::string::npos);
}

TEST_CASE("a checkpoint load says where it resumes and refuses another optimizer's state",
          "[cli][run]") {
  const std::string dir = "/tmp/shardscope-cli-load-" + std::to_string(::getpid());
  const std::string common = "run --model gpt2-tiny --nproc 2 --ranks-as-threads --set seq_len=16";
  auto r = run_cli(common + " --steps 2 --save " + dir);
  REQUIRE(r.status == 0);
  // The same optimizer: resumed, and the log says from where.
  r = run_cli(common + " --steps 1 --load " + dir);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("resumed from step 2 (--load): steps 3..3 follow"));
  // AdamW's moments into an SGD run: refused, naming both and the way out.
  r = run_cli(common + " --steps 1 --set optimizer=sgd --load " + dir);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("its optimizer is adamw (exp_avg, exp_avg_sq), this "
                                       "run's is sgd (no state)") &&
                           Catch::Contains("/model.safetensors"));
  // The weights alone (model.safetensors) load into the SGD run.
  std::ifstream latest(dir + "/latest");
  std::string step;
  latest >> step;
  r = run_cli(common + " --steps 1 --set optimizer=sgd --load " + dir + "/" + step +
              "/model.safetensors");
  INFO(r.output);
  CHECK(r.status == 0);
  (void)std::system(("rm -rf " + dir).c_str());
}

namespace {

std::vector<std::string> run_dirs_in(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("shardscope-run-", 0) == 0)
      found.push_back(e.path().filename().string());
  return found;
}

// Starts a long `run` (2 rank processes) with TMPDIR=tmp in the background and
// waits until rank 0 prints step 3; returns the launcher's pid.
pid_t start_long_run(const std::string& tmp, const std::string& log) {
  std::remove(log.c_str());  // an earlier run's "step 3/" must not count
  const pid_t launcher = fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    const std::string cmd = "TMPDIR=" + tmp + " exec " + std::string(SHARDSCOPE_CLI) +
                            " run --model gpt2-tiny --nproc 2 --steps 1000000 --set batch_size=1 "
                            "--set seq_len=16 > " +
                            log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find("step 3/") != std::string::npos) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(launcher, SIGKILL);
      waitpid(launcher, nullptr, 0);
      FAIL("the run did not reach step 3: " << ss.str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return launcher;
}

}  // namespace

TEST_CASE("a killed launcher leaves no run directory behind", "[cli][run]") {
  const std::string tmp = "/tmp/shardscope-tmpdir-test-" + std::to_string(getpid());
  std::filesystem::create_directories(tmp);
  const std::string log = tmp + ".log";

  // SIGTERM: the launcher stops its ranks and removes its run directory.
  pid_t launcher = start_long_run(tmp, log);
  REQUIRE(run_dirs_in(tmp).size() == 1);
  CHECK(run_dirs_in(tmp)[0].rfind("shardscope-run-" + std::to_string(launcher) + "-", 0) == 0);
  REQUIRE(kill(launcher, SIGTERM) == 0);
  int status = 0;
  REQUIRE(waitpid(launcher, &status, 0) == launcher);
  CHECK(run_dirs_in(tmp).empty());

  // SIGKILL: nothing can clean up at once; the next run removes the directory
  // of the dead launcher (and keeps its own until it ends).
  launcher = start_long_run(tmp, log);
  REQUIRE(kill(launcher, SIGKILL) == 0);
  REQUIRE(waitpid(launcher, &status, 0) == launcher);
  REQUIRE(run_dirs_in(tmp).size() == 1);
  const auto r = run_cli("--help > /dev/null; TMPDIR=" + tmp + " " + SHARDSCOPE_CLI +
                         " run --model gpt2-tiny --nproc 2 --steps 1 --set batch_size=1 --set "
                         "seq_len=16");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(run_dirs_in(tmp).empty());
  std::filesystem::remove_all(tmp);
  std::remove(log.c_str());
}

TEST_CASE("a directory or missing file as --data is refused before any rank starts", "[cli][run]") {
  auto r = run_cli("run --model gpt2-tiny --steps 1 --data /tmp");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--data /tmp: is a directory, not a text file"));
  CHECK_THAT(r.output, !Catch::Contains("rank 1"));  // no rank was started
  r = run_cli("run --model gpt2-tiny --steps 1 --data /nonexistent-shardscope-data");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("No such file or directory"));
}

TEST_CASE("the peer timeout (--timeout, SHARDSCOPE_TIMEOUT) bounds the wait on a missing rank",
          "[cli][run]") {
  const std::string cli = SHARDSCOPE_CLI;
  // Rank 0 of 2 started alone (torchrun style): rank 1 never attaches.
  const std::string alone =
      "--help >/dev/null; RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "
      "MASTER_PORT=" +
      std::to_string(29600 + getpid() % 300) + " ";
  auto r = run_cli(alone + cli + " run --model gpt2-tiny --steps 1 --timeout 1");
  CHECK(r.status != 0);
  CHECK_THAT(r.output, Catch::Contains("timeout after 1 s") &&
                           Catch::Contains("rank(s) 1 of world size 2 have not attached"));
  r = run_cli(alone + "SHARDSCOPE_TIMEOUT=2 " + cli + " run --model gpt2-tiny --steps 1");
  CHECK_THAT(r.output, Catch::Contains("timeout after 2 s"));

  r = run_cli("run --model gpt2-tiny --steps 1 --timeout 0");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--timeout"));
  r = run_cli("--help >/dev/null; SHARDSCOPE_TIMEOUT=soon " + cli +
              " run --model gpt2-tiny --steps 1");
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("SHARDSCOPE_TIMEOUT: expected whole seconds") &&
                           Catch::Contains("'soon'"));
  r = run_cli("run --help");
  CHECK_THAT(r.output, Catch::Contains("default 60 on cpu, 120 on cuda"));
}

TEST_CASE("run reports each rank's measured tokens per expert next to the assumption",
          "[cli][run][moe]") {
  // Rank processes, real top-k routing: JSON "moe_routing" holds per router
  // the stated balance's tokens per expert (uniform: 2 x 16 x 2 / 4 = 16) and
  // every rank's measured counts, which sum to B*T*k = 64.
  const std::string model = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/data/mixtral-tiny.json";
  const auto r = run_cli("run --model " + model +
                         " --nproc 2 --steps 1 --set batch_size=2 --set seq_len=16"
                         " --set moe_routing=topk --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json moe = json_of(r.output).at("moe_routing");
  CHECK(moe.at("routing") == "topk");
  CHECK(moe.at("token_balance") == "uniform");
  REQUIRE(moe.at("layers").size() == 2);
  for (const nlohmann::json& layer : moe.at("layers")) {
    CHECK(layer.at("assumed") == nlohmann::json({16, 16, 16, 16}));
    REQUIRE(layer.at("measured").size() == 2);  // ranks
    for (const nlohmann::json& rank : layer.at("measured")) {
      int64_t sum = 0;
      for (const nlohmann::json& n : rank) sum += n.get<int64_t>();
      CHECK(sum == 64);
    }
  }
  // Forced routing measures exactly the assumption; the text output says so.
  const auto forced =
      run_cli("run --model " + model + " --nproc 2 --steps 1 --set batch_size=2 --set seq_len=16");
  INFO(forced.output);
  REQUIRE(forced.status == 0);
  CHECK_THAT(forced.output,
             Catch::Contains("model.layers.1.block_sparse_moe.router: measured 16..16, assumed "
                             "16..16"));
}
