#include "engine/exec/checkpointing.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/file_io.h"
#include "engine/checkpoint/publish_dir.h"

namespace shardscope::engine::exec {

namespace ckpt = engine::checkpoint;

namespace {

std::vector<std::string> state_names(const plan::Policy& policy) {
  const plan::OptimizerConfig& o = policy.optimizer;
  switch (o.type) {
    case plan::OptimizerType::adamw:
      return {"exp_avg", "exp_avg_sq"};
    case plan::OptimizerType::sgd:
      if (o.momentum > 0) return {"momentum_buffer"};
      return {};
  }
  return {};
}

// The shard group index of this rank and whether it writes shard files (the
// first replica does; the others hold the same shards).
bool writes_shards(const plan::Schedule& s) {
  return s.rank < s.world.shard_group_size;
}

testing::SavePointHook& save_point_hook() {
  static testing::SavePointHook hook;
  return hook;
}

void at_save_point(const char* point, int rank) {
  if (save_point_hook()) save_point_hook()(point, rank);
}

}  // namespace

std::string step_dir_name(int64_t steps_done) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(steps_done));
  return buf;
}

void check_save_target(const std::string& dir, int64_t steps_done) {
  try {
    ckpt::check_save_root(dir, steps_done < 0 ? std::string() : step_dir_name(steps_done));
  } catch (const ckpt::CheckpointError& e) {
    throw ckpt::CheckpointError(std::string("--save: ") + e.what());
  }
}

void save_checkpoint(const std::string& dir, RankExecutor& exec, comm::Communicator& comm,
                     const plan::Graph& graph, const plan::Policy& policy,
                     const plan::UnitPlan& units, const CheckpointState& state) {
  const plan::Schedule& s = exec.schedule();
  const int64_t n = s.world.shard_group_size;
  const int64_t q = exec.shard_index();
  // Everything is written into a staging directory; the step directory appears
  // (or replaces an earlier save of the same step) in one atomic rename once
  // every file is durable, and only then does `latest` name it.
  const std::string step_name = step_dir_name(state.steps_done);
  const std::string step_dir = ckpt::staging_path(dir, step_name);
  ckpt::Metadata meta = {{"format", "shardscope.checkpoint"},
                         {"model", graph.model_name},
                         {"policy", plan::policy_to_json(policy).dump()},
                         {"steps_done", std::to_string(state.steps_done)},
                         {"optimizer_steps", std::to_string(exec.optimizer_steps())},
                         {"loss_scale", std::to_string(exec.loss_scaler().scale)},
                         {"loss_scale_good_steps", std::to_string(exec.loss_scaler().good_steps)},
                         {"world_size", std::to_string(s.world.world_size)}};
  const std::vector<std::string> states = state_names(policy);
  const int rank = comm.rank();
  std::unique_ptr<ckpt::SaveLock> lock;  // rank 0, for the whole save
  if (rank == 0) {
    lock = std::make_unique<ckpt::SaveLock>(dir);
    ckpt::remove_stale_staging(dir);  // left by saves that died
    ckpt::make_fresh_dir(step_dir);
  }
  at_save_point("staging", rank);
  comm.barrier(0);

  // Sharded: this rank's ranges of every parameter and optimizer state tensor.
  auto slices_of = [&](int64_t shard, bool with_data) {
    std::vector<ckpt::Slice> slices;
    for (size_t u = 0; u < units.units.size(); ++u) {
      const UnitLayout& lay = exec.layout(static_cast<int>(u));
      for (const ParamPlace& pp : lay.params()) {
        const Range r = lay.held_range(pp, shard);
        const int64_t off = lay.held_shard_offset(pp, shard);
        const plan::Param& param = graph.params[static_cast<size_t>(pp.param)];
        ckpt::Slice sl;
        sl.name = param.name;
        sl.shape = param.shape;
        sl.begin = r.begin;
        sl.end = r.end;
        sl.data = with_data ? exec.param_shard(static_cast<int>(u)) + off : nullptr;
        slices.push_back(sl);
        for (size_t k = 0; k < states.size(); ++k) {
          sl.name = param.name + "." + states[k];
          sl.data = with_data ? exec.optimizer_state(static_cast<int>(u), static_cast<int>(k)) + off
                              : nullptr;
          slices.push_back(sl);
        }
      }
    }
    return slices;
  };
  if (writes_shards(s))
    ckpt::write_shard_file(step_dir, static_cast<int>(q), static_cast<int>(n), slices_of(q, true),
                           meta);
  at_save_point("shard", rank);
  if (comm.rank() == 0) {
    std::vector<std::vector<ckpt::IndexEntry>> per_rank(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
      for (const ckpt::Slice& sl : slices_of(r, false))
        per_rank[static_cast<size_t>(r)].push_back(
            ckpt::IndexEntry{sl.name, sl.shape, sl.begin, sl.end, sl.padding});
    ckpt::write_shard_index(step_dir, static_cast<int>(n), per_rank, meta);
  }
  at_save_point("index", rank);
  // Consolidated parameters (a collective over the shard group).
  const std::vector<std::vector<float>> full = exec.gather_full_params();
  if (comm.rank() == 0) {
    std::vector<ckpt::FullTensor> tensors;
    for (size_t p = 0; p < graph.params.size(); ++p)
      tensors.push_back(
          ckpt::FullTensor{graph.params[p].name, graph.params[p].shape, full[p].data()});
    ckpt::write_safetensors(step_dir + "/model.safetensors", tensors, meta);
  }
  at_save_point("consolidated", rank);
  comm.barrier(0);  // every rank's files are complete and fsynced
  at_save_point("durable", rank);
  if (rank == 0) {
    const std::string replaced = ckpt::publish_dir(step_dir, dir, step_name);
    at_save_point("published", rank);
    ckpt::write_text_file_atomically(dir + "/latest", step_name + "\n");
    at_save_point("latest", rank);
    if (!replaced.empty()) ckpt::remove_tree(replaced);
    at_save_point("done", rank);
  }
  comm.barrier(0);
}

namespace testing {
void set_save_point_hook(SavePointHook hook) {
  save_point_hook() = std::move(hook);
}
}  // namespace testing

CheckpointState load_checkpoint(const std::string& path, RankExecutor& exec,
                                const plan::Graph& graph, const plan::Policy& policy,
                                const plan::UnitPlan& units) {
  std::string target = path;
  struct stat st {};
  if (stat((path + "/latest").c_str(), &st) == 0) {
    // One step directory name and a newline; the cap keeps a stray large
    // file from becoming a message no one can print or send to the launcher.
    constexpr uint64_t kMaxLatestBytes = 4096;
    const std::string text = ckpt::read_small_file(
        path + "/latest", kMaxLatestBytes, "a `latest` file (it holds one step directory name)");
    std::istringstream in(text);
    std::string name;
    in >> name;
    if (name.empty() || name.find('/') != std::string::npos)
      throw ExecError(path + "/latest: expected a step directory name, got '" + name.substr(0, 64) +
                      (name.size() > 64 ? "...'" : "'"));
    target = path + "/" + name;
  }
  const ckpt::Reader reader = ckpt::Reader::open(target);
  const std::vector<std::string> states = state_names(policy);
  // Optimizer state must be this run's kind: AdamW's moments mean nothing to
  // SGD, SGD's momentum nothing to AdamW. A checkpoint holding state of
  // another kind is refused; its model.safetensors loads the weights alone
  // (this run's optimizer then starts fresh, as from a weights-only file).
  // The saved run's vocab_pad_to (1 when the checkpoint names no policy): a
  // padded vocabulary is stored padded ([Vp, C], docs/models.md), so a resume
  // with another Vp is refused below, naming both paddings.
  int64_t saved_vocab_pad_to = 1;
  if (const auto it = reader.metadata().find("policy"); it != reader.metadata().end()) {
    plan::Policy saved;
    try {
      saved = plan::policy_from_json(nlohmann::json::parse(it->second));
    } catch (const std::exception& e) {
      throw ExecError(target + ": its metadata policy is unreadable: " + e.what());
    }
    saved_vocab_pad_to = saved.vocab_pad_to;
    const std::vector<std::string> saved_states = state_names(saved);
    // Only a checkpoint that holds optimizer state (a step directory, not
    // its model.safetensors) carries it over.
    const bool holds_state = !saved_states.empty() && !graph.params.empty() &&
                             reader.has(graph.params.front().name + "." + saved_states.front());
    if (holds_state && saved_states != states) {
      const auto describe = [](const plan::Policy& p, const std::vector<std::string>& names) {
        std::string d = plan::optimizer_type_name(p.optimizer.type);
        d += names.empty() ? std::string(" (no state)") : " (";
        for (size_t i = 0; i < names.size(); ++i) d += (i ? ", " : "") + names[i];
        if (!names.empty()) d += ")";
        return d;
      };
      throw ExecError(target + ": its optimizer is " + describe(saved, saved_states) +
                      ", this run's is " + describe(policy, states) +
                      ": the optimizer state cannot carry over; to start from its weights "
                      "alone, --load " +
                      target + "/model.safetensors");
    }
  }
  const int64_t q = exec.shard_index();
  bool has_states = !states.empty();
  for (size_t u = 0; u < units.units.size(); ++u) {
    const UnitLayout& lay = exec.layout(static_cast<int>(u));
    for (const ParamPlace& pp : lay.params()) {
      const plan::Param& param = graph.params[static_cast<size_t>(pp.param)];
      if (!reader.has(param.name))
        throw ExecError(target + ": no tensor '" + param.name + "' (model " + graph.model_name +
                        ")");
      if (reader.shape(param.name) != param.shape) {
        const auto text = [](const std::vector<int64_t>& shape) {
          std::string t = "[";
          for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
          return t + "]";
        };
        std::string why;
        if (saved_vocab_pad_to != policy.vocab_pad_to)
          why =
              ": the checkpoint was saved with vocab_pad_to = " +
              std::to_string(saved_vocab_pad_to) +
              ", this run has vocab_pad_to = " + std::to_string(policy.vocab_pad_to) +
              " (a padded vocabulary is stored padded; resume with the padding it was saved with)";
        throw ExecError(target + ": tensor '" + param.name + "' is " +
                        text(reader.shape(param.name)) + ", the model's is " + text(param.shape) +
                        why);
      }
      const Range r = lay.held_range(pp, q);
      const int64_t off = lay.held_shard_offset(pp, q);
      reader.read(param.name, r.begin, r.end, exec.param_shard(static_cast<int>(u)) + off);
      for (size_t k = 0; k < states.size(); ++k) {
        const std::string name = param.name + "." + states[k];
        if (!reader.has(name)) {
          has_states = false;
          continue;
        }
        reader.read(name, r.begin, r.end,
                    exec.optimizer_state(static_cast<int>(u), static_cast<int>(k)) + off);
      }
    }
  }
  CheckpointState state;
  const ckpt::Metadata& m = reader.metadata();
  auto get = [&](const char* key) -> const std::string* {
    auto it = m.find(key);
    return it == m.end() ? nullptr : &it->second;
  };
  if (const std::string* v = get("steps_done")) state.steps_done = std::stoll(*v);
  if (has_states) {
    if (const std::string* v = get("optimizer_steps")) exec.set_optimizer_steps(std::stoll(*v));
    if (const std::string* v = get("loss_scale")) exec.loss_scaler().scale = std::stod(*v);
    if (const std::string* v = get("loss_scale_good_steps"))
      exec.loss_scaler().good_steps = std::stoll(*v);
  }
  return state;
}

}  // namespace shardscope::engine::exec
