// "Click simulates that configuration": the same steps as `shardscope
// simulate` (cli/cmd_simulate.cpp), with the model, hardware, memory limit,
// world and policy taken from the sweep file.
#include <stdexcept>
#include <string>

#include "gui/sweep_file.h"
#include "plan/models.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "sim/hardware.h"
#include "sim/simulator.h"

namespace shardscope::gui {

SweepPointSimulation simulate_sweep_point(const SweepFile& file, const SweepFilePoint& point) {
  if (!file.can_simulate())
    throw std::runtime_error("sweep file '" + file.path +
                             "' has no model or hardware (a CSV sweep): write the sweep with "
                             "--out FILE.json to simulate its configurations here");
  const plan::Graph graph = plan::load_model(file.model);
  const sim::HardwareModel hw = sim::load_hardware(file.hw);
  plan::Policy policy = plan::policy_from_json(point.policy);
  policy.device = hw.device;  // as sweep planned it (sim/sweep.cpp)
  const plan::World world = plan::validate_policy(policy, graph, point.world);
  const plan::UnitPlan units = plan::build_units(graph, policy, world);
  const plan::Schedule sched = plan::build_schedule(graph, policy, units, 0);
  sim::SimOptions options;
  options.memory_limit_bytes = file.memory_limit_bytes;
  options.model_name = file.model;
  options.policy_json = point.policy.dump();
  options.hardware_name = file.hw;
  sim::SimResult r = sim::simulate(graph, units, sched, hw, options);
  SweepPointSimulation out;
  out.trace = std::move(r.trace);
  if (!r.fits)
    out.does_not_fit = "rank " + std::to_string(r.oom_rank) + " ran out of memory allocating '" +
                       r.oom_buffer + "' (" + std::to_string(r.oom_bytes) +
                       " bytes): " + r.oom_message;
  return out;
}

}  // namespace shardscope::gui
