// `shardscope run` failing (issue 34): a non-finite loss (exit 1, step and
// ranks named, --json valid with no null), a FIFO among the checkpoint files
// (refused at once, naming it), a bad --save target (refused before the first
// step), an oversized `latest` file, and the exit codes of runtime failures.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"

using shardscope::test::run_cli;
using shardscope::test::TempDir;

namespace {

// The last JSON document of the output: from the last line that is "{".
nlohmann::json last_json(const std::string& output) {
  const size_t at = output.rfind("\n{\n");
  const size_t start = output.rfind("{\n", 0) == 0 ? 0 : (at == std::string::npos ? 0 : at + 1);
  return nlohmann::json::parse(output.substr(start));
}

bool has_null(const nlohmann::json& j) {
  if (j.is_null()) return true;
  if (j.is_structured())
    for (const auto& item : j) {
      if (has_null(item)) return true;
    }
  return false;
}

// Every run below is wrapped in timeout(1): a hang ends as status 124 (and
// fails the test) instead of blocking the suite.
std::string bounded(const std::string& args) {
  return "--help >/dev/null; timeout -s KILL 120 " + std::string(SHARDSCOPE_CLI) + " " + args;
}

const char* kHugeLr = " --set 'optimizer={\"type\":\"sgd\",\"lr\":1e30}'";

}  // namespace

TEST_CASE("a non-finite loss exits 1 naming the step and ranks, with rank processes and threads",
          "[cli][run]") {
  // SGD at lr 1e30: step 1 is finite (initial weights), its update overflows
  // step 2's logits (tests/engine/exec/test_run_failures.cpp).
  for (const std::string how : {"--nproc 1", "--nproc 2", "--nproc 2 --ranks-as-threads"}) {
    INFO(how);
    const auto r = run_cli(
        bounded("run --model gpt2-tiny --steps 4 --set seq_len=16 " + how + kHugeLr + " --json"));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Catch::Contains("non-finite loss at step 2: the global mean loss is ") &&
                             Catch::Contains("non-finite on rank") &&
                             Catch::Contains("training stopped"));
    CHECK_THAT(r.output, !Catch::Contains("step 3/4"));  // stopped at the first
    const nlohmann::json j = last_json(r.output);
    CHECK_FALSE(has_null(j));
    CHECK(j.at("source") == "engine-cpu");
    CHECK(j.at("error").at("kind") == "numerics");
    CHECK(j.at("error").at("quantity") == "loss");
    CHECK(j.at("error").at("step") == 2);
    const std::string value = j.at("error").at("value");
    CHECK((value == "nan" || value == "inf"));
    CHECK_FALSE(j.at("error").at("ranks").empty());
    CHECK(j.at("losses").size() == 1);  // step 1's, a number
    CHECK(j.at("losses").at(0).is_number());
  }
  // Text output: the same error, exit 1, no summary.
  const auto r = run_cli(
      bounded("run --model gpt2-tiny --steps 4 --set seq_len=16 --nproc 2" + std::string(kHugeLr)));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Catch::Contains("exited with code 1: non-finite loss at step 2"));
  CHECK_THAT(r.output, !Catch::Contains("step time"));
}

TEST_CASE("a FIFO in place of a shard file ends a --load at once, naming it", "[cli][run]") {
  TempDir tmp("cli-fifo");
  const std::string dir = (tmp.path / "ckpt").string();
  const std::string common = "run --model gpt2-tiny --nproc 2 --set seq_len=16 --steps 1";
  auto r = run_cli(bounded(common + " --ranks-as-threads --save " + dir));
  REQUIRE(r.status == 0);
  std::ifstream latest(dir + "/latest");
  std::string step;
  latest >> step;
  const std::string shard = dir + "/" + step + "/shard-1-of-2.bin";
  REQUIRE(std::filesystem::remove(shard));
  REQUIRE(::mkfifo(shard.c_str(), 0644) == 0);
  r = run_cli(bounded(common + " --timeout 5 --load " + dir));
  INFO(r.output);
  CHECK(r.status == 2);  // an input that cannot be read: not a hang (124), not a crash
  CHECK_THAT(r.output, Catch::Contains(shard) && Catch::Contains("a FIFO (named pipe)"));
}

TEST_CASE("an oversized latest file is refused naming it and the cap", "[cli][run]") {
  TempDir tmp("cli-latest");
  const std::string dir = tmp.path.string();
  std::ofstream(dir + "/latest") << std::string(10 << 20, 's');
  const auto r =
      run_cli(bounded("run --model gpt2-tiny --nproc 2 --set seq_len=16 --steps 1 --load " + dir));
  INFO(r.output.substr(0, 4000));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains(dir + "/latest: 10485760 bytes, over the 4096-byte limit "
                                             "of a `latest` file"));
  CHECK(r.output.size() < 20000);  // the file's contents are not echoed
}

TEST_CASE("a bad --save target is refused before any step runs", "[cli][run]") {
  TempDir tmp("cli-save");
  const std::string file = (tmp.path / "existing_file.json").string();
  std::ofstream(file) << "{}";
  const std::string common = "run --model gpt2-tiny --nproc 2 --set seq_len=16 --steps 2";
  auto r = run_cli(bounded(common + " --save " + file));
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--save: " + file + ": exists and is not a directory"));
  CHECK_THAT(r.output, !Catch::Contains("step 1/2"));
  CHECK_THAT(r.output, !Catch::Contains("rank 0"));  // the launcher refused it: no rank started

  const std::string orphan = (tmp.path / "no-such-parent" / "ckpt").string();
  r = run_cli(bounded(common + " --ranks-as-threads --save " + orphan));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--save: " + orphan + ": its parent directory") &&
                           Catch::Contains("No such file or directory"));
  CHECK_THAT(r.output, !Catch::Contains("step 1/2"));

  // Another process holds the directory's save lock.
  const std::string locked = (tmp.path / "locked").string();
  std::filesystem::create_directories(locked);
  const int fd = ::open((locked + "/.save-lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  r = run_cli(bounded(common + " --save " + locked));
  ::close(fd);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("--save: " + locked +
                                       ": another process is saving a checkpoint into this "
                                       "directory"));
  CHECK_THAT(r.output, !Catch::Contains("step 1/2"));
}

TEST_CASE("runtime failures exit 1, input errors 2", "[cli][run]") {
  // Rank 0 of 2 started alone (torchrun style): the rendezvous times out.
  const std::string alone =
      "--help >/dev/null; RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 "
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
      std::to_string(29900 + getpid() % 90) + " timeout -s KILL 120 " + SHARDSCOPE_CLI;
  auto r = run_cli(alone + " run --model gpt2-tiny --steps 1 --timeout 1");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Catch::Contains("timeout after 1 s"));
  // An input error stays 2.
  r = run_cli(bounded("run --model gpt2-tiny --steps 1 --set batch_size=0"));
  CHECK(r.status == 2);
  // The help states the codes.
  r = run_cli("run --help");
  CHECK_THAT(r.output, Catch::Contains("1 runtime failure") &&
                           Catch::Contains("128+N a rank killed by signal N") &&
                           Catch::Contains("130 SIGINT"));
}

TEST_CASE("run refuses attention forced to the math SDPA kernel, which no engine runs",
          "[cli][run][sdpa]") {
  // The engines' attention is fused (output and log-sum-exp saved); the math
  // kernel's saved probabilities are simulate's only (docs/models.md).
  auto r = run_cli(
      bounded("run --model llama-tiny --nproc 1 --steps 1 --set attention.sdpa_backend=math"));
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("attention op model.layers.0.self_attn.attention runs "
                                       "PyTorch's math SDPA fallback on cpu "
                                       "(attention.sdpa_backend): the engines run fused "
                                       "attention only"));
}

TEST_CASE("run refuses an exported graph's aten op by name before starting ranks (exit 2)",
          "[cli][run][exported]") {
  auto r = run_cli(bounded("run --model " + std::string(SHARDSCOPE_SOURCE_DIR) +
                           "/tests/data/exported/tiny-mlp.graph.json --nproc 2 --steps 1"));
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Catch::Contains("shardscope run: error: layers.0.fc.addmm "
                                       "(aten.addmm.default): the CPU engine does not run aten "
                                       "ops of exported graphs (simulate and sweep take them)"));
  CHECK_THAT(r.output, !Catch::Contains("step 1/1"));
}
