// `shardscope calibrate`: fits a hardware model (compute efficiency per op
// type, contention factor, collective latency and bus bandwidth) to measured
// traces and nccl-tests output, and writes it as a hardware JSON for --hw
// (docs/calibration.md).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output_flags.h"
#include "cli/plan_inputs.h"
#include "engine/run/accuracy.h"
#include "io/output_file.h"
#include "plan/error.h"
#include "sim/calibrate.h"
#include "sim/hardware.h"
#include "sim/nccl_tests.h"
#include "traces/torch_nvtx.h"

namespace shardscope::cli {

namespace {

const char* kUsage =
    "shardscope calibrate TRACE... [--nccl-tests [KIND=]FILE]... [--base H] [--dtype D]\n"
    "                     [--group-size N] [--name NAME] --out HW.json [--json]\n"
    "shardscope calibrate --measure --model M [--policy P] [--set K=V]... [--world N]\n"
    "                     [--backend cpu] [--steps S] [TRACE...] [--base H] --out HW.json\n\n"
    "  TRACE               measured or simulated traces (.sstrace, .json, Kineto JSON)\n"
    "  --nccl-tests FILE   nccl-tests output (all_gather_perf, reduce_scatter_perf,\n"
    "                      all_reduce_perf); KIND=FILE names the collective (all_gather,\n"
    "                      reduce_scatter, all_reduce) when the file does not\n"
    "  --base H            model to start from: a preset or a hardware JSON (default: the\n"
    "                      first trace's hardware when it is a preset, else h100-sxm)\n"
    "  --dtype D           compute dtype of the traces' ops: fp32, bf16, fp16 (default: each\n"
    "                      trace's policy param_dtype, else fp32)\n"
    "  --group-size N      the shard group size of every trace: all-gathers and reduce-scatters\n"
    "                      over N consecutive ranks, all-reduces over the ranks equal mod N\n"
    "                      (default: derived from each trace's policy and world size)\n"
    "  --name NAME         name of the fitted model (default: the --out file's stem)\n"
    "  --out HW.json       the hardware JSON to write (simulate --hw HW.json)\n"
    "  --json              print the fit report as JSON\n"
    "  --measure           measure this machine: train the model on --world CPU ranks (threads)\n"
    "                      under the policy in fp32, bf16 and fp16, each at its batch size\n"
    "                      and twice it, --steps steps each (the first is warm-up), and fit\n"
    "                      to those runs (plus any TRACE); default --base cpu-local\n"
    "  --world N           ranks of the measured runs (default 2)\n"
    "  --backend cpu       the engine measured; cuda is not available yet (needs a GPU run)\n"
    "  --steps S           steps of each measured run (default 4, at least 2)";

// "all_gather=FILE" -> (all_gather, FILE); a FILE alone -> (unknown, FILE).
std::pair<sim::NcclCollective, std::string> nccl_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq != std::string::npos) {
    sim::NcclCollective kind = sim::NcclCollective::unknown;
    if (sim::parse_nccl_collective(spec.substr(0, eq), &kind)) return {kind, spec.substr(eq + 1)};
  }
  return {sim::NcclCollective::unknown, spec};
}

}  // namespace

int cmd_calibrate(int argc, char** argv) {
  Args args(argc, argv,
            plan_input_flags({{"nccl-tests", true, true},
                              {"base"},
                              {"dtype"},
                              {"group-size"},
                              {"name"},
                              {"out"},
                              {"json", false},
                              {"measure", false},
                              {"world"},
                              {"backend"},
                              {"steps"}}),
            true);
  if (args.help()) {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  check_output_flag(args, "out");
  const std::string out = args.require("out");
  const std::vector<std::string>& trace_paths = args.positionals();
  const std::vector<std::string> nccl_specs = args.all("nccl-tests");
  const bool measure = args.has("measure");
  if (!measure) {
    for (const char* flag : {"model", "policy", "set", "world", "backend", "steps"})
      if (args.has(flag)) throw UsageError(std::string("--") + flag + " needs --measure");
    if (trace_paths.empty() && nccl_specs.empty())
      throw UsageError("give at least one TRACE, --nccl-tests FILE or --measure");
  }

  sim::CalibrationOptions options;
  if (args.has("dtype")) {
    plan::DType d;
    try {
      d = plan::parse_dtype(args.get("dtype"), "--dtype");
    } catch (const plan::Error& e) {
      throw UsageError(e.what());
    }
    if (d != plan::DType::f32 && d != plan::DType::bf16 && d != plan::DType::f16)
      throw UsageError("--dtype must be fp32, bf16 or fp16");
    options.dtype = d;
  }
  options.group_size = args.get_int("group-size", 0, 1, 1 << 20);

  std::vector<std::unique_ptr<traces::Trace>> loaded;
  std::vector<sim::CalibrationTrace> inputs;
  for (const std::string& path : trace_paths) {
    loaded.push_back(std::make_unique<traces::Trace>(sim::load_calibration_trace(path)));
    inputs.push_back(sim::CalibrationTrace{path, loaded.back().get()});
  }

  // A `profile --torch-shapes` trace has no policy: the names of its kernels
  // with FLOPs state their dtype. Used only when every input is such a
  // profile and they agree (calibrate takes one dtype for all): anything
  // else needs --dtype, never a guess.
  std::string torch_dtype_note;
  if (!options.dtype) {
    std::string chosen, chosen_from;
    bool others = measure;
    for (size_t i = 0; i < loaded.size(); ++i) {
      std::string why;
      const std::string d = traces::torch_nvtx_compute_dtype(*loaded[i], &why);
      if (!why.empty())
        throw UsageError(trace_paths[i] + ": " + why +
                         ": calibrate cannot tell which dtype to fit; pass --dtype");
      if (d.empty() || !loaded[i]->meta.policy_json.empty()) {
        others = true;
        continue;
      }
      if (!chosen.empty() && d != chosen)
        throw UsageError("the kernels of " + chosen_from + " ran in " + chosen + ", those of " +
                         trace_paths[i] + " in " + d +
                         " (from their names): calibrate them separately, or pass --dtype");
      chosen = d;
      chosen_from = trace_paths[i];
    }
    if (!chosen.empty() && others)
      throw UsageError("the kernels of " + chosen_from + " ran in " + chosen +
                       " (from their names, a --torch-shapes profile), and other inputs take "
                       "their dtype from their policies: calibrate them separately, or pass "
                       "--dtype");
    if (!chosen.empty()) {
      options.dtype = plan::parse_dtype(chosen, "kernel dtype");
      torch_dtype_note = "compute dtype " + chosen +
                         ": the names of every kernel with FLOPs in the --torch-shapes "
                         "profile(s) state it (fitted as with --dtype " +
                         chosen + ")";
    }
  }
  // What the inputs say about their kernels' FLOPs (CUPTI profiles).
  std::vector<std::string> flops_notes;
  for (size_t i = 0; i < loaded.size(); ++i)
    for (const std::string& note : traces::torch_nvtx_notes(*loaded[i]))
      flops_notes.push_back(trace_paths[i] + ": " + note);

  // --measure: this machine's runs of the model, after any TRACE.
  std::vector<engine::run::MeasuredRun> measured;
  if (measure) {
    if (!args.has("model")) throw UsageError("--measure needs --model");
    const std::string backend = args.has("backend") ? args.get("backend") : "cpu";
    if (backend == "cuda")
      throw UsageError(
          "--measure --backend cuda is not available yet: it needs CUDA kernels and NCCL "
          "measured on a GPU; measure a profiled run instead (shardscope run --backend cuda "
          "--profile --trace T, then shardscope calibrate T)");
    if (backend != "cpu") throw UsageError("--backend must be cpu or cuda, got '" + backend + "'");
    const int world = static_cast<int>(args.get_int("world", 2, 1, 64));
    const PlanInputs in = load_plan_inputs(args, world);
    engine::run::MeasureConfig mc;
    mc.graph = &in.graph;
    mc.model_name = args.get("model");
    mc.policy = in.policy_doc;
    mc.world = world;
    mc.steps = args.get_int("steps", 4, 2, 1000);
    std::fprintf(stderr, "calibrate --measure: %zu runs of %s on %d CPU rank(s)...\n",
                 2 * mc.dtypes.size(), mc.model_name.c_str(), world);
    measured = engine::run::measure_runs(mc);
    for (const engine::run::MeasuredRun& m : measured)
      inputs.push_back(sim::CalibrationTrace{"measured " + m.label, &m.trace});
  }

  std::string base_spec = measure ? "cpu-local" : "h100-sxm";
  if (args.has("base"))
    base_spec = args.get("base");
  else if (!loaded.empty() && sim::is_hardware_preset(loaded.front()->meta.hardware))
    base_spec = loaded.front()->meta.hardware;
  try {
    options.base = sim::load_hardware(base_spec);
  } catch (const sim::Error& e) {
    throw UsageError(std::string("--base: ") + e.what());
  }
  options.name = args.has("name") ? args.get("name") : std::filesystem::path(out).stem().string();
  if (options.name.empty()) options.name = "calibrated";

  std::vector<sim::NcclTestsTable> tables;
  for (const std::string& spec : nccl_specs) {
    const auto [kind, file] = nccl_spec(spec);
    for (sim::NcclTestsTable& t : sim::load_nccl_tests(file, kind)) tables.push_back(std::move(t));
  }

  sim::CalibrationResult r;
  try {
    r = sim::calibrate(inputs, tables, options);
  } catch (const sim::Error&) {
    for (const std::string& note : flops_notes)
      std::fprintf(stderr, "shardscope calibrate: note: %s\n", note.c_str());
    throw;
  }
  if (!torch_dtype_note.empty()) r.report.notes.push_back(torch_dtype_note);
  for (const std::string& note : flops_notes) r.report.notes.push_back(note);
  const nlohmann::json hw_doc = sim::calibrated_hardware_json(
      r.hw, sim::is_hardware_preset(base_spec) ? base_spec : std::string());
  io::write_output_file(out, hw_doc.dump(2) + "\n");

  if (args.has("json")) {
    nlohmann::json j = sim::calibration_report_to_json(r.report);
    j["out"] = out;
    j["hardware"] = hw_doc;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s", sim::format_calibration_report(r.report).c_str());
  std::printf("\nwrote %s (use: shardscope simulate --hw %s ...)\n", out.c_str(), out.c_str());
  return 0;
}

}  // namespace shardscope::cli
