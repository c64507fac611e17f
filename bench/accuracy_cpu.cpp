// bench/accuracy_cpu: how close the simulator gets to the CPU engine across
// policies after calibrating on this machine (issue 21 item 4; the table and
// its commands are in docs/accuracy.md).
//
//   accuracy_cpu [--model M] [--block CLASS] [--batch B] [--seq T] [--steps N]
//                [--runs R] [--tiny] [--hw-out FIT.json] [--report]
//
// 1. `calibrate --measure`'s runs (engine/run/accuracy.h measure_runs: fp32,
//    bf16 and fp16 at batch B and 2B, the base policy otherwise) fit a
//    hardware model on the cpu-local preset;
// 2. twelve policies on 2 ranks as threads (fsdp1/fsdp2, reshard true /
//    false / 1, forward and backward prefetch, activation checkpointing,
//    bf16 and fp32, batch B and 2B) are each trained R times (default 3: the
//    median run is compared, the spread is the noise) and predicted on the
//    fitted model;
// 3. one row per policy: step time, compute, exposed communication, overlap
//    and peak allocated, measured (median over the steps after the first)
//    against predicted, with the error.
// Exit 0 when every row was measured and predicted, whatever the errors (a
// benchmark prints figures; CI's smoke test checks the rows, not the goal).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/run/accuracy.h"
#include "plan/models.h"
#include "sim/calibrate.h"
#include "sim/hardware.h"

using namespace shardscope;

int main(int argc, char** argv) {
  std::string model = "gpt2-tiny", block = "GPT2Block", hw_out;
  bool report = false;
  int64_t batch = 8, seq = 128, steps = 8, runs = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "accuracy_cpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      model = value();
    else if (a == "--block")
      block = value();
    else if (a == "--batch")
      batch = std::atoll(value().c_str());
    else if (a == "--seq")
      seq = std::atoll(value().c_str());
    else if (a == "--steps")
      steps = std::atoll(value().c_str());
    else if (a == "--hw-out")
      hw_out = value();
    else if (a == "--report")
      report = true;
    else if (a == "--tiny") {
      batch = 1;
      seq = 16;
      steps = 3;
      runs = 2;
    } else {
      std::fprintf(stderr,
                   "usage: accuracy_cpu [--model M] [--block CLASS] [--batch B] [--seq T] "
                   "[--steps N] [--runs R] [--tiny] [--hw-out FIT.json] [--report]\n");
      return 2;
    }
  }
  if (batch < 1 || seq < 1 || steps < 2 || runs < 1 || runs > 100) {
    std::fprintf(stderr,
                 "accuracy_cpu: --batch, --seq must be >= 1, --steps >= 2, --runs in [1, 100]\n");
    return 2;
  }
  try {
    const plan::Graph g = plan::load_model(model);
    const int world = 2;
    const nlohmann::json base = {{"wrap", {{"type", "class"}, {"classes", {block}}}},
                                 {"batch_size", batch},
                                 {"seq_len", seq}};
    auto with = [&](nlohmann::json extra) {
      nlohmann::json p = base;
      p.update(extra);
      return p;
    };
    const nlohmann::json bf16 = {{"param_dtype", "bf16"}};
    const std::vector<std::pair<std::string, nlohmann::json>> policies = {
        {"fsdp2", base},
        {"fsdp1", with({{"flavor", "fsdp1"}})},
        {"fsdp2 no reshard", with({{"reshard_after_forward", false}})},
        {"fsdp2 reshard 1", with({{"reshard_after_forward", 1}})},
        {"fsdp2 fwd prefetch 2", with({{"forward_prefetch", 2}})},
        {"fsdp1 fwd prefetch", with({{"flavor", "fsdp1"}, {"forward_prefetch", true}})},
        {"fsdp2 no bwd prefetch", with({{"backward_prefetch", "none"}})},
        {"fsdp2 checkpointing", with({{"activation_checkpointing", "full"}})},
        {"fsdp2 bf16", with({{"mixed_precision", bf16}})},
        {"fsdp1 bf16", with({{"flavor", "fsdp1"}, {"mixed_precision", bf16}})},
        {"fsdp2 batch x2", with({{"batch_size", 2 * batch}})},
        {"fsdp2 ckpt bf16 batch x2", with({{"activation_checkpointing", "full"},
                                           {"mixed_precision", bf16},
                                           {"batch_size", 2 * batch}})},
    };

    std::printf(
        "accuracy_cpu: %s, %d ranks as threads, batch %lld, seq %lld, %lld steps, %lld runs per "
        "policy\n\n",
        model.c_str(), world, static_cast<long long>(batch), static_cast<long long>(seq),
        static_cast<long long>(steps), static_cast<long long>(runs));
    engine::run::MeasureConfig mc;
    mc.graph = &g;
    mc.model_name = model;
    mc.policy = base;
    mc.world = world;
    mc.steps = steps;
    const std::vector<engine::run::MeasuredRun> measured = engine::run::measure_runs(mc);
    const sim::CalibrationResult fit =
        engine::run::calibrate_runs(measured, sim::hardware_preset("cpu-local"), "measured-cpu");
    std::printf("calibrated on --measure (%zu runs): op dispatch %.1f us, contention %.3f\n\n",
                measured.size(), static_cast<double>(fit.hw.op_dispatch_ns) / 1e3,
                fit.hw.contention_factor);
    if (report) std::printf("%s\n", sim::format_calibration_report(fit.report).c_str());
    if (!hw_out.empty()) {
      std::FILE* f = std::fopen(hw_out.c_str(), "w");
      if (!f) {
        std::fprintf(stderr, "accuracy_cpu: cannot write %s\n", hw_out.c_str());
        return 1;
      }
      const std::string text = sim::calibrated_hardware_json(fit.hw, "cpu-local").dump(2) + "\n";
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
    const engine::run::AccuracyTable table = engine::run::accuracy_table(
        g, model, policies, fit.hw, world, steps, static_cast<int>(runs));
    std::fputs(engine::run::format_accuracy_table(table).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accuracy_cpu: error: %s\n", e.what());
    return 1;
  }
}
