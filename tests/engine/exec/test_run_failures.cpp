// How training fails (issue 34): a non-finite loss stops every rank at that
// step naming it and the ranks; a bad --save target is refused before the
// first step; a save that fails after training and a collective that times
// out inside a step are runtime failures (RuntimeFailure, CommError: `run`
// exits 1), not input errors.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/shm_communicator.h"
#include "engine/exec/exec_error.h"
#include "engine/exec/numerics_check.h"
#include "engine/exec/train.h"
#include "plan/models.h"
#include "tests/temp_dir.h"

using namespace shardscope;
using engine::exec::NumericsError;

namespace {

engine::exec::TrainConfig config(const plan::Graph& g, const std::vector<std::string>& sets,
                                 int world, int steps) {
  nlohmann::json doc = nlohmann::json::object();
  for (const std::string& s : sets) plan::apply_set(doc, s);
  engine::exec::TrainConfig c;
  c.graph = &g;
  c.policy = plan::policy_from_json(doc);
  c.world_size = world;
  c.steps = steps;
  return c;
}

// Runs check_step_numbers on `world` thread ranks, rank r with numbers[r];
// returns each rank's NumericsError message ("" when it did not throw) and
// rank 0's detail.
struct Checked {
  std::vector<std::string> messages;
  engine::exec::NonFinite detail;
};
Checked check_on_ranks(const std::vector<engine::exec::StepNumbers>& numbers) {
  const int world = static_cast<int>(numbers.size());
  auto comms =
      engine::comm::make_thread_communicators(world, {engine::comm::world_group(world)}, {});
  Checked out;
  out.messages.resize(numbers.size());
  std::vector<engine::exec::NonFinite> details(numbers.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        engine::exec::check_step_numbers(numbers[static_cast<size_t>(r)],
                                         *comms[static_cast<size_t>(r)]);
      } catch (const NumericsError& e) {
        out.messages[static_cast<size_t>(r)] = e.what();
        details[static_cast<size_t>(r)] = e.detail();
      }
    });
  for (std::thread& t : threads) t.join();
  out.detail = details[0];
  return out;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("a non-finite global loss stops every rank, naming the step and the ranks", "[exec]") {
  // Step index 2 of a run resumed at global step 10; rank 1's local loss is
  // NaN, so the all-reduced mean is NaN on both ranks.
  const std::vector<double> losses = {3.0, 2.5, kNaN};
  engine::exec::StepNumbers r0{2, 12, kNaN, 2.4, -1, 0, false, &losses};
  engine::exec::StepNumbers r1{2, 12, kNaN, kNaN, -1, 0, false, &losses};
  const Checked c = check_on_ranks({r0, r1});
  INFO(c.messages[0]);
  CHECK(c.messages[0] == c.messages[1]);  // every rank says the same
  CHECK_THAT(c.messages[0],
             Catch::StartsWith("non-finite loss at step 3 (global step 13): the global mean "
                               "loss is nan; local loss non-finite on rank 1; training stopped"));
  CHECK(c.detail.quantity == "loss");
  CHECK(c.detail.step == 3);
  CHECK(c.detail.ranks == std::vector<int>{1});
  CHECK(c.detail.losses_before == std::vector<double>{3.0, 2.5});
}

TEST_CASE("a non-finite gradient norm stops training unless loss scaling skipped the step",
          "[exec]") {
  // Both ranks' local squared norms are finite, their float sum is not.
  engine::exec::StepNumbers r{0, 0, 2.0, 2.0, kInf, 3e38, false, nullptr};
  Checked c = check_on_ranks({r, r});
  INFO(c.messages[0]);
  CHECK_THAT(c.messages[0], Catch::StartsWith("non-finite gradient norm at step 1: the total "
                                              "gradient norm (before clipping) is inf; every "
                                              "rank's local squared gradient norm is finite"));
  CHECK(c.detail.quantity == "grad_norm");
  CHECK(c.detail.ranks.empty());
  // fp16 dynamic loss scaling: an overflow skips the step, as GradScaler does.
  r.skipped = true;
  c = check_on_ranks({r, r});
  CHECK(c.messages[0].empty());
  // No clipping (-1) and finite values: nothing to say.
  c = check_on_ranks({{0, 0, 2.0, 2.0, -1, 0, false, nullptr}});
  CHECK(c.messages[0].empty());
}

TEST_CASE("training with a huge learning rate stops at its first non-finite loss", "[exec]") {
  // SGD with lr 1e30: step 1's loss comes from the initial weights (finite,
  // about ln(vocab)); its update moves the weights by ~1e30 x gradient, and
  // step 2's logits overflow: the loss is no longer finite.
  const plan::Graph g = plan::load_model("gpt2-tiny");
  const auto c =
      config(g, {"batch_size=1", "seq_len=16", "optimizer={\"type\":\"sgd\",\"lr\":1e30}"}, 2, 4);
  std::vector<double> reported;
  engine::exec::TrainHooks hooks;
  hooks.on_step = [&](const engine::exec::StepReport& s) { reported.push_back(s.loss); };
  try {
    (void)engine::exec::train_threads(c, hooks);
    FAIL("training with lr 1e30 finished");
  } catch (const NumericsError& e) {
    INFO(e.what());
    CHECK(e.detail().step == 2);
    CHECK(e.detail().quantity == "loss");
    CHECK_FALSE(e.detail().ranks.empty());
    REQUIRE(e.detail().losses_before.size() == 1);
    CHECK(std::isfinite(e.detail().losses_before[0]));
  }
  CHECK(reported.size() == 2);  // step 3 never ran
}

TEST_CASE("a --save target that is a file is refused before the first step", "[exec][checkpoint]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  test::TempDir tmp("save-target");
  const std::string file = (tmp.path / "existing.json").string();
  std::ofstream(file) << "{}";
  auto c = config(g, {"batch_size=1", "seq_len=16"}, 2, 2);
  c.save_dir = file;
  int steps = 0;
  engine::exec::TrainHooks hooks;
  hooks.on_step = [&](const engine::exec::StepReport&) { ++steps; };
  CHECK_THROWS_WITH(engine::exec::train_threads(c, hooks),
                    "--save: " + file +
                        ": exists and is not a directory (a checkpoint is saved into a directory)");
  CHECK(steps == 0);
  // A missing parent: the save creates DIR, not its parents.
  c.save_dir = (tmp.path / "missing" / "ckpt").string();
  CHECK_THROWS_WITH(engine::exec::train_threads(c, hooks),
                    Catch::Contains((tmp.path / "missing").string()) &&
                        Catch::Contains("No such file or directory"));
  CHECK(steps == 0);
}

TEST_CASE("a save lock taken during training fails the save as a runtime failure",
          "[exec][checkpoint]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  test::TempDir tmp("save-lock");
  auto c = config(g, {"batch_size=1", "seq_len=16"}, 2, 1);
  c.save_dir = tmp.path.string();
  const std::string lock = c.save_dir + "/.save-lock";
  int fd = -1;
  bool locked = false;
  engine::exec::TrainHooks hooks;
  // After the pre-check, before the save: another "run" takes the lock.
  hooks.on_step = [&](const engine::exec::StepReport&) {
    fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    locked = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  };
  CHECK_THROWS_WITH(engine::exec::train_threads(c, hooks),
                    Catch::StartsWith("checkpoint save failed: ") &&
                        Catch::Contains("another process is saving"));
  REQUIRE(locked);
  try {
    (void)engine::exec::train_threads(c, hooks);
  } catch (const engine::exec::RuntimeFailure&) {
    FAIL("the lock held before training must be refused as an input error, before the steps");
  } catch (const std::exception&) {
  }
  CHECK_THROWS_WITH(engine::exec::train_threads(c, {}),
                    Catch::Contains("--save: " + c.save_dir) &&
                        Catch::Contains("another process is saving"));  // still held: refused early
  ::close(fd);
}

TEST_CASE("a collective that times out inside a step is a CommError, not an ExecError", "[exec]") {
  const plan::Graph g = plan::load_model("gpt2-tiny");
  auto c = config(g, {"batch_size=1", "seq_len=16"}, 2, 1);
  engine::comm::ThreadCommOptions opt;
  opt.timeout = std::chrono::seconds(1);
  auto comms =
      engine::comm::make_thread_communicators(2, engine::exec::comm_groups(g, c.policy, 2), opt);
  // Rank 1 never takes part: rank 0's first all-gather waits for it.
  CHECK_THROWS_AS(engine::exec::train_rank(c, *comms[0], {}), engine::comm::CommError);
}
