// Policy defaults, JSON round trips, --set overrides and validation messages.
#include <catch2/catch.hpp>

#include "plan/error.h"
#include "plan/policy.h"
#include "tests/plan/toy_graph.h"

using namespace shardscope;
using nlohmann::json;

namespace {

plan::World validate(const json& doc, int64_t world) {
  plan::Graph g = test::toy_graph();
  return plan::validate_policy(plan::policy_from_json(doc), g, world);
}

}  // namespace

TEST_CASE("flavor defaults follow PyTorch", "[policy]") {
  plan::Policy p1 = plan::policy_from_json({{"flavor", "fsdp1"}});
  CHECK(p1.limit_all_gathers);                                 // FSDP1 limit_all_gathers=True
  CHECK(p1.backward_prefetch == plan::BackwardPrefetch::pre);  // BACKWARD_PRE
  CHECK(p1.reshard_after_forward.flag);                        // FULL_SHARD
  CHECK(p1.forward_prefetch == 0);
  plan::Policy p2 = plan::policy_from_json(json::object());
  CHECK(p2.flavor == plan::Flavor::fsdp2);
  CHECK_FALSE(p2.limit_all_gathers);
  CHECK(p2.mixed_precision.param_dtype == plan::DType::f32);
  CHECK(p2.optimizer.type == plan::OptimizerType::adamw);
  CHECK(p2.batch_size == 1);
  CHECK(p2.grad_accum_steps == 1);
}

TEST_CASE("reduce_dtype defaults to param_dtype (PyTorch reduce_dtype=None)", "[policy]") {
  plan::Policy p = plan::policy_from_json({{"mixed_precision", {{"param_dtype", "bf16"}}}});
  CHECK(p.mixed_precision.reduce_dtype == plan::DType::bf16);
  plan::Policy q = plan::policy_from_json(
      {{"mixed_precision", {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}}});
  CHECK(q.mixed_precision.reduce_dtype == plan::DType::f32);
}

TEST_CASE("policy JSON round trip is lossless", "[policy][json]") {
  json doc = {{"flavor", "fsdp2"},
              {"world_size", 8},
              {"shard_group_size", 4},
              {"wrap", {{"type", "class"}, {"classes", {"Block"}}}},
              {"reshard_after_forward", 2},
              {"backward_prefetch", "none"},
              {"forward_prefetch", 3},
              {"mixed_precision", {{"param_dtype", "fp16"}, {"reduce_dtype", "fp32"}}},
              {"cpu_offload", true},
              {"activation_checkpointing", {{"every", 2}}},
              {"optimizer", {{"type", "sgd"}, {"lr", 0.5}, {"momentum", 0.9}}},
              {"grad_clip_norm", 1.0},
              {"loss_scale", "dynamic"},
              {"batch_size", 4},
              {"seq_len", 8},
              {"grad_accum_steps", 3},
              {"seed", 7}};
  json once = plan::policy_to_json(plan::policy_from_json(doc));
  json twice = plan::policy_to_json(plan::policy_from_json(once));
  CHECK(once == twice);
  CHECK(once["reshard_after_forward"] == 2);
  CHECK(once["optimizer"]["momentum"] == 0.9);
  CHECK(once["activation_checkpointing"]["every"] == 2);
  CHECK(once["loss_scale"] == "dynamic");
  for (const char* flavor : {"fsdp1", "fsdp2"}) {
    json d = plan::policy_to_json(plan::default_policy(
        std::string(flavor) == "fsdp1" ? plan::Flavor::fsdp1 : plan::Flavor::fsdp2));
    CHECK(plan::policy_to_json(plan::policy_from_json(d)) == d);
  }
}

TEST_CASE("policy set overrides: dotted keys, JSON values, bare strings", "[policy][set]") {
  json doc = json::object();
  plan::apply_set(doc, "wrap.type=class");
  plan::apply_set(doc, "wrap.classes=[\"Block\"]");
  plan::apply_set(doc, "reshard_after_forward=2");
  plan::apply_set(doc, "flavor=fsdp2");
  plan::apply_set(doc, "optimizer=sgd");
  plan::apply_set(doc, "optimizer.lr=0.1");
  CHECK(doc["wrap"]["type"] == "class");
  CHECK(doc["wrap"]["classes"] == json::array({"Block"}));
  CHECK(doc["reshard_after_forward"] == 2);
  CHECK(doc["optimizer"]["type"] == "sgd");
  CHECK(doc["optimizer"]["lr"] == 0.1);
  plan::Policy p = plan::policy_from_json(doc);
  CHECK(p.wrap.type == plan::WrapType::class_name);
  CHECK(p.optimizer.lr == 0.1);
  CHECK_THROWS_WITH(plan::apply_set(doc, "novalue"), Catch::Contains("KEY=VALUE"));
}

TEST_CASE("validation rejects impossible policies, naming the key", "[policy][validation]") {
  CHECK_THROWS_WITH(validate({{"reshard_after_forward", 3}}, 8),
                    Catch::Contains("reshard_after_forward") && Catch::Contains("does not divide"));
  CHECK_THROWS_WITH(validate({{"shard_group_size", 3}}, 8),
                    Catch::Contains("shard_group_size") && Catch::Contains("does not divide"));
  CHECK_THROWS_WITH(validate({{"flavor", "fsdp2"}, {"backward_prefetch", "post"}}, 8),
                    Catch::Contains("backward_prefetch") && Catch::Contains("fsdp1 only"));
  CHECK_THROWS_WITH(validate({{"bogus", 1}}, 8),
                    Catch::Contains("bogus") && Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(validate({{"wrap", {{"type", "size"}, {"min_params", 3}}}}, 8),
                    Catch::Contains("wrap.min_params") && Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(validate({{"flavor", "fsdp2"}, {"limit_all_gathers", true}}, 8),
                    Catch::Contains("limit_all_gathers") && Catch::Contains("fsdp1 only"));
  CHECK_THROWS_WITH(validate({{"flavor", "fsdp1"}, {"forward_prefetch", 2}}, 8),
                    Catch::Contains("forward_prefetch"));
  CHECK_THROWS_WITH(validate({{"flavor", "fsdp1"}, {"reshard_after_forward", 2}}, 8),
                    Catch::Contains("reshard_after_forward") && Catch::Contains("fsdp2 only"));
  CHECK_THROWS_WITH(
      validate({{"mixed_precision", {{"param_dtype", "bf16"}}}, {"loss_scale", "dynamic"}}, 8),
      Catch::Contains("loss_scale") && Catch::Contains("fp16"));
  CHECK_THROWS_WITH(validate({{"world_size", 4}}, 8),
                    Catch::Contains("world_size") && Catch::Contains("8"));
  CHECK_THROWS_WITH(validate({{"seq_len", 9}}, 8),  // the toy model's maximum is 8
                    Catch::Contains("seq_len") && Catch::Contains("maximum"));
  CHECK_THROWS_WITH(validate({{"batch_size", 0}}, 8), Catch::Contains("batch_size"));
  CHECK_THROWS_WITH(validate({{"cpu_offload", "yes"}}, 8),
                    Catch::Contains("cpu_offload") && Catch::Contains("true or false"));
  CHECK_THROWS_WITH(validate({{"mixed_precision", {{"param_dtype", "fp8"}}}}, 8),
                    Catch::Contains("mixed_precision.param_dtype"));
  CHECK_THROWS_WITH(validate({{"wrap", {{"type", "class"}}}}, 8), Catch::Contains("wrap.classes"));
  CHECK_THROWS_WITH(validate({{"optimizer", {{"type", "adamw"}, {"momentum", 0.9}}}}, 8),
                    Catch::Contains("optimizer.momentum"));
  CHECK_THROWS_WITH(validate({{"grad_clip_norm", -1.0}}, 8), Catch::Contains("grad_clip_norm"));
  CHECK_THROWS_WITH(
      validate({{"mixed_precision", {{"param_dtype", "bf16"}, {"output_dtype", "fp32"}}}}, 8),
      Catch::Contains("mixed_precision.output_dtype") && Catch::Contains("not modelled"));
  CHECK_THROWS_WITH(validate({{"activation_checkpointing", "some"}}, 8),
                    Catch::Contains("activation_checkpointing"));
}

TEST_CASE("valid corner cases pass: k = 1 and k = N, shard group 1 (DDP)", "[policy][validation]") {
  CHECK(validate({{"reshard_after_forward", 1}}, 8).shard_group_size == 8);
  CHECK(validate({{"reshard_after_forward", 8}}, 8).shard_group_size == 8);
  plan::World ddp = validate({{"shard_group_size", 1}}, 8);
  CHECK(ddp.replicas == 8);
  plan::Policy p = plan::policy_from_json({{"reshard_after_forward", 4}});
  CHECK(plan::reshard_degree(p, validate({{"reshard_after_forward", 4}}, 8)) == 4);
  plan::Policy f = plan::policy_from_json({{"reshard_after_forward", false}});
  CHECK(plan::reshard_degree(f, validate(json::object(), 8)) == 1);
}

TEST_CASE("an integer above INT64_MAX is out of range, not wrapped negative", "[policy]") {
  // 18446744073709551615 (2^64 - 1) used to read back as -1 ("got -1").
  const json doc = json::parse(R"({"seed": 18446744073709551615})");
  CHECK_THROWS_WITH(plan::policy_from_json(doc),
                    Catch::Contains("seed") && Catch::Contains("out of range") &&
                        Catch::Contains("18446744073709551615") && !Catch::Contains("got -1"));
  // INT64_MAX itself is a valid seed.
  CHECK(plan::policy_from_json(json::parse(R"({"seed": 9223372036854775807})")).seed ==
        9223372036854775807LL);
}

TEST_CASE("grad_accum_steps is counted before the schedule is built and refused over the limit",
          "[policy][validation][limits]") {
  const plan::Graph g = test::toy_graph();
  const int64_t graph_ops = static_cast<int64_t>(g.ops.size());
  plan::Policy p = plan::policy_from_json({{"grad_accum_steps", 3}});
  CHECK(plan::estimated_schedule_ops(p, g) == 3 * 4 * graph_ops);
  // The largest accepted value and the next.
  const int64_t allowed = plan::kMaxScheduleOps / (4 * graph_ops);
  p.grad_accum_steps = allowed;
  CHECK_NOTHROW(plan::validate_policy(p, g, 8));
  p.grad_accum_steps = allowed + 1;
  CHECK_THROWS_WITH(plan::validate_policy(p, g, 8),
                    Catch::StartsWith("policy: grad_accum_steps: " + std::to_string(allowed + 1) +
                                      " micro-steps") &&
                        Catch::Contains("over the limit of 5e+06 ops") &&
                        Catch::Contains("this model allows at most " + std::to_string(allowed)));
  // 2e9 (the issue's) and INT64_MAX: counted without overflow, refused at once.
  p.grad_accum_steps = 2000000000;
  CHECK_THROWS_WITH(plan::validate_policy(p, g, 8),
                    Catch::Contains("grad_accum_steps: 2000000000"));
  p.grad_accum_steps = INT64_MAX;
  CHECK(plan::estimated_schedule_ops(p, g) == INT64_MAX);
  CHECK_THROWS_WITH(plan::validate_policy(p, g, 8), Catch::Contains("grad_accum_steps"));
}

TEST_CASE("apply_set: a key or bare value that is not UTF-8 is an error naming it (fuzz_policy)",
          "[policy][errors]") {
  // A bare value became a JSON string that nlohmann could not dump: the
  // message of the next error ("batch_size: expected an integer, got ...")
  // threw json type_error 316 instead, which named no key.
  auto error_of = [](const std::string& assignment) {
    json doc = json::object();
    try {
      plan::apply_set(doc, assignment);
      (void)plan::policy_from_json(doc);
    } catch (const plan::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_of("batch_size=\xd5"
                 "2") == "--set batch_size: the value is not valid UTF-8 (byte 0xd5 at offset 0)");
  CHECK(error_of("wrap.type=cl\xe2\x82") ==
        "--set wrap.type: the value is not valid UTF-8 (byte 0xe2 at offset 2)");
  CHECK(error_of("ba\xff=1") == "--set: the key is not valid UTF-8 (byte 0xff at offset 2)");
  CHECK(error_of("seq_len=\xed\xa0\x80") ==  // a UTF-16 surrogate, not UTF-8
        "--set seq_len: the value is not valid UTF-8 (byte 0xed at offset 0)");
  // Well-formed UTF-8 reaches the key's own check.
  CHECK_THAT(error_of("wrap.type=caf\xc3\xa9"), Catch::Contains("wrap.type"));
  CHECK_THAT(error_of("wrap.type=caf\xc3\xa9"), !Catch::Contains("UTF-8"));
}

TEST_CASE("tokens_per_step: world x batch x seq x accumulation, samples without a vocabulary",
          "[policy]") {
  plan::Graph g = test::toy_graph();  // vocab 10, max_seq_len 8
  plan::Policy p =
      plan::policy_from_json({{"batch_size", 3}, {"seq_len", 5}, {"grad_accum_steps", 2}});
  CHECK(plan::tokens_per_step(p, g, 4) == 4 * 3 * 5 * 2);
  p.seq_len = 0;  // the default: min(1024, the model's maximum)
  CHECK(plan::tokens_per_step(p, g, 4) == 4 * 3 * 8 * 2);
  g.vocab_size = 0;  // no token input (the mlp): one per sample, whatever seq_len says
  CHECK(plan::tokens_per_step(p, g, 4) == 4 * 3 * 2);
  g.vocab_size = 10;
  p.grad_accum_steps = int64_t{1} << 40;
  CHECK_THROWS_WITH(plan::tokens_per_step(p, g, int64_t{1} << 20),
                    Catch::Contains("tokens per step (world 1048576 x batch_size 3 x seq_len 8 x "
                                    "grad_accum_steps 1099511627776) overflow int64"));
}
