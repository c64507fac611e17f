// FSDP policy: every key of ARCHITECTURE.md's policy JSON, for both flavors,
// with PyTorch's defaults for the chosen flavor. Reading is strict: unknown
// keys, wrong types and knobs that do not apply to the flavor are errors that
// name the key (plan::Error).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/op_checkpointing_spec.h"
#include "plan/sdpa.h"
#include "plan/unit_pattern.h"

namespace shardscope::plan {

enum class Flavor : uint8_t { fsdp1, fsdp2 };
enum class WrapType : uint8_t { none, size, class_name, modules };
enum class BackwardPrefetch : uint8_t { none, pre, post };
// none; full (every block); every (blocks j % every == offset, recomputed
// whole); ops (per-op selective checkpointing inside the blocks every/offset
// choose: plan/op_checkpointing.h).
enum class CheckpointMode : uint8_t { none, full, every, ops };

const char* flavor_name(Flavor f);
const char* wrap_type_name(WrapType w);
const char* backward_prefetch_name(BackwardPrefetch b);

struct WrapPolicy {
  WrapType type = WrapType::none;
  int64_t min_num_params = 100000000;  // size policy threshold, elements (PyTorch default 1e8)
  std::vector<std::string> classes;    // class policy: module class names
  std::vector<std::string> modules;    // modules policy: module paths
};

// true | false | k (fsdp2). Resolved against the shard group size N by
// reshard_degree(): the number of ranks the backward all-gather runs over.
struct ReshardAfterForward {
  bool is_int = false;
  bool flag = true;  // when !is_int
  int64_t k = 0;     // when is_int
};

struct MixedPrecision {
  DType param_dtype = DType::f32;
  DType reduce_dtype = DType::f32;
  std::optional<DType> output_dtype;  // unset: outputs not cast
  bool enabled() const { return param_dtype != DType::f32 || reduce_dtype != DType::f32; }
};

// One entry of the policy's `overrides` list: per-unit settings, as FSDP2
// gives every fully_shard call its own kwargs (and FSDP1 every wrap). The
// units it applies to are named by a regex (full match against the unit's
// name: its module path, "<root>" for the root) or by a list of exact names.
// Keys left out keep the policy's value. Overrides apply in list order, a
// later one winning for the keys it sets (docs/policy.md, "overrides").
// Resolved against the units by unit_settings (plan/overrides.h).
struct UnitOverride {
  // "units": "<pattern>", compiled once when the policy is read
  // (plan/unit_pattern.h); shared, immutable, by copies of the policy.
  std::shared_ptr<const UnitPattern> pattern;
  std::vector<std::string> names;  // "units": ["<name>", ...] (when no pattern)
  std::optional<ReshardAfterForward> reshard_after_forward;
  // Replaces the unit's whole mixed precision (fields left out take their
  // defaults: param fp32, reduce = param dtype), as a MixedPrecisionPolicy
  // passed to that unit's fully_shard does.
  std::optional<MixedPrecision> mixed_precision;
  std::string units_text() const;  // the "units" value as written, for messages
};

// Mixture of experts: the stated token balance (key token_balance), how many
// of a micro-batch's tokens each expert gets, which sizes and FLOPs follow
// (plan/expr.h TokenBalance, docs/policy.md "token_balance").
struct TokenBalanceSpec {
  bool explicit_weights = false;  // false: "uniform"
  std::vector<double> weights;    // {"weights": [...]}: one per expert, summing to 1
  bool operator==(const TokenBalanceSpec& o) const {
    return explicit_weights == o.explicit_weights && weights == o.weights;
  }
};
// How the CPU engine routes (key moe_routing): "forced" assigns every expert
// exactly the stated balance's tokens (the router's softmax still weighs
// them); "topk" routes by the router's real top-k, every expert's buffers
// sized for all B*T tokens of the micro-batch (plan and engine alike).
enum class MoeRouting : uint8_t { forced, topk };

enum class OptimizerType : uint8_t { adamw, sgd };
const char* optimizer_type_name(OptimizerType type);  // "adamw", "sgd"

struct OptimizerConfig {
  OptimizerType type = OptimizerType::adamw;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double momentum = 0.0;  // sgd only
  // fp32 tensors of optimizer state per parameter element: adamw 2, sgd 1 with momentum else 0.
  int state_tensors() const;
};

struct Policy {
  Flavor flavor = Flavor::fsdp2;
  std::optional<int64_t> world_size;        // must agree with the CLI's world when set
  std::optional<int64_t> shard_group_size;  // unset = world; 1 = DDP
  WrapPolicy wrap;
  ReshardAfterForward reshard_after_forward;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::pre;
  int64_t forward_prefetch = 0;   // false = 0, true = 1, or units ahead (fsdp2 explicit list)
  bool limit_all_gathers = true;  // fsdp1 only (fsdp2 stores false)
  MixedPrecision mixed_precision;
  bool cpu_offload = false;
  CheckpointMode activation_checkpointing = CheckpointMode::none;
  // CheckpointMode::every: wrapped blocks j (0-based, in model order) with
  // j % checkpoint_every == checkpoint_offset. Offset 0: blocks 0, k, 2k, ...;
  // torchtitan's layer-frequency option (ac_freq = k) is offset k - 1:
  // blocks k-1, 2k-1, ... (its wrapper counts calls from 1).
  // CheckpointMode::ops chooses its blocks the same way (default 1, 0).
  int64_t checkpoint_every = 1;
  int64_t checkpoint_offset = 0;
  OpCheckpointing op_checkpointing;  // CheckpointMode::ops: what is saved inside a block
  OptimizerConfig optimizer;
  std::optional<double> grad_clip_norm;
  // optimizer.zero_grad(set_to_none=...) after the step (PyTorch's default
  // true): true frees the sharded gradients, which the next backward's
  // reductions allocate again; false keeps them allocated (and zeroed).
  bool zero_grad_set_to_none = true;
  // "allocator": {"expandable_segments": bool}: PyTorch's
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (false by default). The
  // simulator models it (docs/allocator.md); the engines refuse it.
  bool expandable_segments = false;
  // null | "dynamic" | a fixed scale (fp16 only)
  std::optional<std::string> loss_scale_mode;  // "dynamic" or "static"
  double loss_scale_value = 0.0;
  int64_t batch_size = 1;
  int64_t seq_len = 0;  // 0 = min(1024, model max), resolved by resolve_seq_len
  int64_t grad_accum_steps = 1;
  int64_t seed = 0;
  std::vector<UnitOverride> overrides;  // per-unit settings, in order (later wins)
  TokenBalanceSpec token_balance;       // mixture of experts only
  MoeRouting moe_routing = MoeRouting::forced;
  // vocab_pad_to: the vocabulary padded to a multiple of it (1: none), as
  // llm.c pads GPT-2's 50257 to 50304 (plan/vocab_padding.h). Applied to the
  // graph before planning (pad_vocabulary); validate_policy checks that the
  // graph it is given is padded so.
  int64_t vocab_pad_to = 1;
  // attention.sdpa_backend: PyTorch's own SDPA kernel choice, or one backend
  // forced (torch.nn.attention.sdpa_kernel); plan/sdpa.h.
  SdpaBackend sdpa_backend = SdpaBackend::automatic;
  // The device family the plan is for: not a policy key. The executor's
  // hardware sets it (simulate and sweep: the hardware model's "device";
  // the CPU engine: cpu); it decides the SDPA kernel (plan/sdpa.h).
  DeviceFamily device;
};

// PyTorch's defaults for a flavor: fsdp1 FULL_SHARD, BACKWARD_PRE,
// limit_all_gathers=True; fsdp2 reshard_after_forward=True, implicit prefetch.
Policy default_policy(Flavor flavor);

// Reads a policy document. The flavor is read first and its defaults applied;
// then every other key. Throws plan::Error naming the key.
Policy policy_from_json(const nlohmann::json& doc);
nlohmann::json policy_to_json(const Policy& policy);
Policy load_policy_file(const std::string& path);

// Applies `--set KEY=VALUE` to a policy document: KEY dotted for nested keys,
// VALUE parsed as JSON, or taken as a bare string when it is not JSON.
void apply_set(nlohmann::json& doc, const std::string& assignment);

// The world a policy is planned for, and the sharding it implies.
struct World {
  int64_t world_size = 1;
  int64_t shard_group_size = 1;  // N
  int64_t replicas = 1;          // R = world / N
};

// Checks everything that needs the world and the model: shard_group_size
// divides world, reshard k divides N, world_size agrees, flavor-only knobs,
// seq_len fits the model, loss_scale only with fp16, grad_accum_steps within
// kMaxScheduleOps, ... Returns the resolved
// world; throws plan::Error naming the key.
World validate_policy(const Policy& policy, const Graph& graph, int64_t world_size);

// Backward all-gather degree for non-root units: N when resharding (true), 1
// when not (false), k for an integer.
int64_t reshard_degree(const Policy& policy, const World& world);

int64_t resolve_seq_len(const Policy& policy, const Graph& graph);

// Tokens one optimizer step consumes over all ranks: world x batch_size x
// seq_len x grad_accum_steps, where a model without token input
// (vocab_size 0: the mlp, one sample per row) counts samples (seq_len 1).
// Throws plan::Error when the product overflows int64. The engines'
// tokens_per_s and the sweep's both divide this.
int64_t tokens_per_step(const Policy& policy, const Graph& graph, int64_t world);

// The stated token balance (null for uniform): its weights' cumulative shares.
std::shared_ptr<const TokenBalance> stated_token_balance(const Policy& policy);
// The workload of one micro-step: B = batch_size, T = resolve_seq_len and the
// experts' balance: the stated one, or every token for each expert under
// moe_routing "topk" (TokenBalance::Mode::all_tokens).
Workload policy_workload(const Policy& policy, const Graph& graph);

// The step schedule grows linearly with grad_accum_steps: every micro-step
// repeats forward and backward (and the recompute) of every graph op, each a
// few schedule ops, actions and buffers. This is an upper bound of its ops,
// grad_accum_steps x graph ops x 4 (measured 2.8x graph ops per micro-step
// without checkpointing, 3.8x with, per-unit ops included), saturating at
// INT64_MAX. Planning and simulating cost about 600 bytes per estimated op
// (measured: docs/benchmarks.md, "Limits").
int64_t estimated_schedule_ops(const Policy& policy, const Graph& graph);
// validate_policy refuses a policy whose estimate is above this: about 3 GiB
// to plan and simulate, and still grad_accum_steps up to 1,197 for
// Llama-3-70B (1,044 graph ops), where real runs use a few hundred at most
// (docs/policy.md, "Limits").
constexpr int64_t kMaxScheduleOps = 5'000'000;

// batch_size is the per-rank micro-batch: real ones are at most a few
// thousand sequences. policy_from_json refuses more.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;  // 1,048,576
// Tokens of one rank's micro-step, batch_size x seq_len: real ones are at
// most about a million. With a vocabulary of at most 2^21 (the logits'
// width, plan/model_limits.h) every tensor then has at most 2^53 elements,
// and its bytes fit int64 with room for sums. validate_policy refuses more.
constexpr int64_t kMaxTokensPerMicroStep = int64_t{1} << 32;  // 4,294,967,296

}  // namespace shardscope::plan
