// shardscope against the committed PyTorch references (tests/reference/,
// recorded by bench/torch_reference/ with real FSDP2/FSDP1 on CPU, torch
// 2.9.1 and transformers 4.57.6; scripts/torch-reference regenerates them).
// No torch needed: each reference carries its Hugging Face config and the
// shardscope flags describing the same run.
//
//  - Communication: every all-gather, reduce-scatter and all-reduce of the
//    measured step, per kind in issue order, has the unit, the bytes S
//    (all-gather output, reduce-scatter input, all-reduce buffer) and the
//    group size of the schedule's collective of the same rank. Exact.
//  - Peak memory: simulate's peak_requested_bytes (the buffers' unrounded
//    sizes live in host order: no 512 B rounding, no caching, as the CPU
//    allocator and FSDPMemTracker count) within 2% of the reference's peak;
//    a reference outside it can only be admitted as a known gap below, with
//    its own bound and a reason in docs/accuracy.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/reference_files.h"
#include "tests/cli/run_cli.h"
#include "tests/temp_dir.h"

using nlohmann::json;

namespace {

using shardscope::test::read_json;
using shardscope::test::shell_quote;

// The reference files directly under tests/<dir> (not its subfolders).
std::vector<std::filesystem::path> references(const std::string& dir) {
  return shardscope::test::reference_files(dir);
}

// Known gaps: the reference's name -> the largest |relative error| accepted
// until the gap is closed (docs/accuracy.md, "Open gaps").
// None since 2026-11-29: Phi-3 with a window below T (-2.5%) and Qwen2-MoE
// (-2.0%) closed by the fused SDPA kernel's repeated k and v and mask and
// Phi-3's copy of SDPA's output (plan/sdpa.h).
const std::map<std::string, double>& known_gaps() {
  static const std::map<std::string, double> gaps = {};
  return gaps;
}

// Known gaps of the CUDA references (tests/reference/cuda/, PyTorch 2.11 on an
// H200): none since the same change (Phi-3 was -2.6%, Qwen2-MoE -2.3%). (The
// math SDPA fallback's saved probabilities, fp32 with GQA, are modelled since
// issue 32: plan/sdpa.h.)
const std::map<std::string, double>& known_cuda_gaps() {
  static const std::map<std::string, double> gaps = {};
  return gaps;
}

struct Collective {
  std::string unit;
  int64_t bytes = 0;
  int64_t group_size = 0;
  bool operator==(const Collective& o) const {
    return unit == o.unit && bytes == o.bytes && group_size == o.group_size;
  }
};

std::ostream& operator<<(std::ostream& os, const Collective& c) {
  return os << c.unit << " " << c.bytes << " B over " << c.group_size;
}

}  // namespace

namespace Catch {
template <>
struct StringMaker<Collective> {
  static std::string convert(const Collective& c) {
    std::ostringstream os;
    os << c;
    return os.str();
  }
};
}  // namespace Catch

namespace {

// Every reference file of `refs`: the schedule's collectives equal the
// recorded ones exactly, and simulate's `peak_field` is within 2% of the
// reference's peak (within its own bound for a known gap).
void check_references(const std::vector<std::filesystem::path>& refs, const char* peak_field,
                      const std::map<std::string, double>& gaps) {
  int within = 0;
  for (const auto& path : refs) {
    const json ref = read_json(path.string());
    const std::string name = ref.at("name");
    INFO(name);
    REQUIRE(ref.at("format") == "shardscope.torch_reference");
    shardscope::test::TempDir dir;
    const std::string config = dir.write("config.json", ref.at("config"));
    std::string args;
    for (const auto& a : ref.at("shardscope_args")) args += " " + shell_quote(a.get<std::string>());
    const std::string schedule = (dir.path / "schedule.json").string();

    const auto plan = shardscope::test::run_cli("plan --model " + shell_quote(config) + args +
                                                " --schedule-out " + shell_quote(schedule));
    INFO(plan.output);
    REQUIRE(plan.status == 0);
    const json s = read_json(schedule);

    // Collectives of the schedule, per kind, in issue (host) order.
    std::map<std::string, std::vector<Collective>> predicted, measured;
    for (const json& a : s.at("actions")) {
      if (a.at("action") != "launch") continue;
      const json& op = s.at("ops").at(a.at("op").get<size_t>());
      const std::string kind = op.at("kind");
      if (kind != "all_gather" && kind != "reduce_scatter" && kind != "all_reduce") continue;
      Collective c;
      c.unit = op.contains("unit")
                   ? s.at("units").at(op.at("unit").get<size_t>()).at("name").get<std::string>()
                   : "";
      c.bytes = op.at("bytes");
      for (const json& g : s.at("groups"))
        if (g.at("name") == op.at("group"))
          c.group_size = static_cast<int64_t>(g.at("ranks").size());
      predicted[kind].push_back(c);
    }
    for (const json& c : ref.at("collectives")) {
      const std::string kind = c.at("op");
      Collective m;
      m.unit = c.value("unit", "");
      m.bytes = kind == "all_gather" ? c.at("output_bytes").get<int64_t>()
                                     : c.at("input_bytes").get<int64_t>();
      m.group_size = c.at("group_size");
      measured[kind].push_back(m);
    }
    CHECK(predicted == measured);

    // The hardware the reference ran on: its SDPA kernel follows the device
    // (plan/sdpa.h; the CPU runs PyTorch's CPU flash kernel).
    std::string hw = "cpu-local";
    if (ref.at("setup").value("device", "cpu") == "cuda") {
      const std::string gpu = ref.at("cuda").at("device_name");
      REQUIRE(gpu.find("H200") != std::string::npos);
      hw = "h200-sxm";
    }
    const auto sim = shardscope::test::run_cli("simulate --model " + shell_quote(config) + args +
                                               " --hw " + hw + " --mem-limit 1TiB --json");
    INFO(sim.output);
    REQUIRE(sim.status == 0);
    const json j = json::parse(sim.output);
    REQUIRE(j.at("fits") == true);
    const double pred = j.at(peak_field).get<double>();
    const double want = ref.at("peak").at("allocated_bytes").get<double>();
    const double err = (pred - want) / want;
    CAPTURE(pred, want, err);
    auto gap = gaps.find(name);
    if (gap == gaps.end()) {
      CHECK(std::fabs(err) <= 0.02);
      ++within;
    } else {
      CHECK(std::fabs(err) <= gap->second);
    }
  }
  CHECK(within + static_cast<int>(gaps.size()) == static_cast<int>(refs.size()));
}

}  // namespace

TEST_CASE("shardscope matches the committed PyTorch FSDP references", "[cli][reference]") {
  // CPU runs: the tracker counts unrounded sizes, as peak_requested_bytes does.
  const std::vector<std::filesystem::path> refs = references("reference");
  REQUIRE(refs.size() >= 66);
  check_references(refs, "peak_requested_bytes", known_gaps());
}

// Issue 32: every family has a reference at a published configuration's
// hidden size, head layout and vocabulary (fewer layers), and those
// references cover bf16 and fp32, with and without checkpointing, tied and
// untied. The test case above holds each within 2% (none is a known gap).
TEST_CASE("the CPU references hold every family at a published size", "[cli][reference]") {
  // family (config model_type) -> the published model's hidden size and vocabulary
  const std::map<std::string, std::pair<int64_t, int64_t>> published = {
      {"gpt2", {768, 50257}},     {"llama", {2048, 128256}},   {"mistral", {4096, 32000}},
      {"mixtral", {4096, 32000}}, {"qwen2", {896, 151936}},    {"qwen2_moe", {2048, 151936}},
      {"qwen3", {1024, 151936}},  {"gemma", {2048, 256000}},   {"gemma2", {2304, 256000}},
      {"phi3", {3072, 32064}},    {"gpt_neox", {1024, 50304}}, {"opt", {1024, 50272}}};
  std::map<std::string, int> per_family;
  std::set<std::string> dtypes, checkpointing, tying;
  for (const auto& path : references("reference")) {
    const json ref = read_json(path.string());
    const json& c = ref.at("config");
    const auto want = published.find(c.at("model_type").get<std::string>());
    const json& hidden = c.contains("hidden_size") ? c.at("hidden_size") : c.at("n_embd");
    if (want == published.end() || hidden != want->second.first ||
        c.at("vocab_size") != want->second.second)
      continue;
    INFO(ref.at("name").get<std::string>());
    CHECK(known_gaps().count(ref.at("name").get<std::string>()) == 0);
    ++per_family[want->first];
    const json& setup = ref.at("setup");
    dtypes.insert(setup.at("param_dtype").get<std::string>());
    checkpointing.insert(setup.at("activation_checkpointing").dump());
    tying.insert(c.at("tie_word_embeddings").get<bool>() ? "tied" : "untied");
  }
  for (const auto& [family, sizes] : published) {
    INFO(family << " at hidden " << sizes.first << ", vocabulary " << sizes.second);
    CHECK(per_family[family] >= 1);
  }
  CHECK(dtypes == std::set<std::string>{"bf16", "fp32"});
  CHECK(checkpointing == std::set<std::string>{"\"full\"", "\"none\""});
  CHECK(tying == std::set<std::string>{"tied", "untied"});
}

// Issue 37: PyTorch FSDP2 references of models shardscope has no builder for
// (tests/reference/no-builder/, read only by tests of exported graphs). Each
// names what rebuilds it (a Hugging Face config, or a custom nn.Module's
// constructor) and its inputs, and is what FSDP2 makes of its units: every
// all-gather is its unit's padded shard in the parameter dtype times the group,
// every reduce-scatter its shard in the reduce dtype times the group; with
// reshard_after_forward=true each non-root unit gathers twice, the root once,
// and each unit reduces once; forward gathers the root, then the units in the
// order `units` lists them; the peak's categories sum to the peak.
TEST_CASE("the references of models with no builder are complete and FSDP2-consistent",
          "[cli][reference]") {
  const std::map<std::string, int64_t> dtype_bytes = {{"fp32", 4}, {"bf16", 2}};
  std::map<std::string, std::set<std::string>> variants;  // model -> "dtype ac"
  // Issue 37 item 4: a peak of parameters and gradients says nothing about the
  // activations an exported graph must get right. Image models: a reference
  // whose tracker "Activation" is at least half its peak. Causal LMs: a
  // long-sequence reference that peaks in the loss's backward
  // (_log_softmax_backward_data), where the saved fp32 log-softmax (B*T*V*4
  // bytes, "Activation") and its gradient in and out (2*B*T*V*4, "Temp") are
  // alive: with Hugging Face's loss and 1-2 layers at these widths the tracker's
  // "Activation" stays under half the peak at any token count a CPU run allows
  // (bench/torch_reference/README.md, "Activation-dominated runs").
  std::set<std::string> activation_dominated, loss_peaked;
  const std::vector<std::filesystem::path> refs = references("reference/no-builder");
  for (const auto& path : refs) {
    const json ref = read_json(path.string());
    const std::string name = ref.at("name").get<std::string>();
    INFO(name);
    REQUIRE(ref.at("format") == "shardscope.torch_reference");
    REQUIRE(ref.at("version") == 1);
    const json& setup = ref.at("setup");
    std::string model;
    if (ref.contains("config")) {
      model = ref.at("config").at("architectures").at(0).get<std::string>();
    } else {
      const json& ctor = ref.at("model_constructor");
      CHECK(ctor.at("module") == "bench/torch_reference/models_custom.py");
      CHECK(!ctor.at("args").empty());
      model = ctor.at("class").get<std::string>();
    }
    // Image models list their inputs (shape, dtype); causal LMs have B x T tokens.
    CHECK((setup.contains("inputs") ? !setup.at("inputs").empty() : setup.contains("seq_len")));
    CHECK(!setup.at("wrap_classes").empty());
    CHECK(setup.at("flavor") == "fsdp2");
    CHECK(setup.at("reshard_after_forward") == true);
    variants[model].insert(setup.at("param_dtype").get<std::string>() + " " +
                           setup.at("activation_checkpointing").get<std::string>());

    const int64_t world = setup.at("world").get<int64_t>();
    const json& units = ref.at("model").at("units");
    REQUIRE(units.size() >= 2);
    REQUIRE(units.back().at("name") == "<root>");
    std::map<std::string, int64_t> shard;
    int64_t params = 0;
    std::vector<std::string> order = {"<root>"};
    for (const json& u : units) {
      CHECK(u.at("local_numel").get<int64_t>() * world >= u.at("params").get<int64_t>());
      shard[u.at("name").get<std::string>()] = u.at("local_numel").get<int64_t>();
      params += u.at("params").get<int64_t>();
      if (u.at("name") != "<root>") order.push_back(u.at("name").get<std::string>());
    }
    CHECK(params == ref.at("model").at("params_total").get<int64_t>());
    const int64_t param_bytes = dtype_bytes.at(setup.at("param_dtype").get<std::string>());
    const int64_t reduce_bytes = dtype_bytes.at(setup.at("reduce_dtype").get<std::string>());
    std::vector<std::string> forward_gathers;
    size_t gathers = 0, reductions = 0;
    for (const json& c : ref.at("collectives")) {
      const std::string unit = c.at("unit").get<std::string>();
      const int64_t n = c.at("group_size").get<int64_t>();
      CHECK(n == world);
      if (c.at("op") == "all_gather") {
        ++gathers;
        CHECK(c.at("input_bytes").get<int64_t>() == shard.at(unit) * param_bytes);
        CHECK(c.at("output_bytes").get<int64_t>() == c.at("input_bytes").get<int64_t>() * n);
        if (c.at("phase") == "forward") forward_gathers.push_back(unit);
      } else {
        REQUIRE(c.at("op") == "reduce_scatter");
        ++reductions;
        CHECK(c.at("output_bytes").get<int64_t>() == shard.at(unit) * reduce_bytes);
        CHECK(c.at("input_bytes").get<int64_t>() == c.at("output_bytes").get<int64_t>() * n);
      }
    }
    CHECK(gathers == 2 * units.size() - 1);
    CHECK(reductions == units.size());
    CHECK(forward_gathers == order);
    CHECK(ref.at("collectives_check").at("agrees") == true);

    const json& peak = ref.at("peak");
    int64_t categories = 0;
    for (const auto& [category, bytes] : peak.at("breakdown").items())
      categories += bytes.get<int64_t>();
    CHECK(categories == peak.at("allocated_bytes").get<int64_t>());
    CHECK(!peak.at("at").at("pass").get<std::string>().empty());
    const int64_t activation = peak.at("breakdown").at("Activation").get<int64_t>();
    if (setup.contains("inputs") && 2 * activation >= peak.at("allocated_bytes").get<int64_t>())
      activation_dominated.insert(model);
    if (setup.contains("seq_len") &&
        peak.at("at").at("op") == "aten._log_softmax_backward_data.default") {
      const int64_t logits_fp32 = setup.at("batch").get<int64_t>() *
                                  setup.at("seq_len").get<int64_t>() *
                                  ref.at("config").at("vocab_size").get<int64_t>() * 4;
      CHECK(activation >= logits_fp32);
      CHECK(peak.at("breakdown").at("Temp").get<int64_t>() >= 2 * logits_fp32);
      loss_peaked.insert(model);
    }
  }
  // Issue 37's families: the three causal LMs in all of {bf16, fp32} x {no, full
  // checkpointing}; the ViT and the UNet in bf16 and fp32, with and without
  // checkpointing among their two runs.
  for (const char* model : {"OlmoeForCausalLM", "StableLmForCausalLM", "Olmo2ForCausalLM"}) {
    INFO(model);
    CHECK(variants[model] ==
          std::set<std::string>{"bf16 full", "bf16 none", "fp32 full", "fp32 none"});
  }
  CHECK(activation_dominated == std::set<std::string>{"ViTForImageClassification", "UNet"});
  CHECK(loss_peaked ==
        std::set<std::string>{"OlmoeForCausalLM", "StableLmForCausalLM", "Olmo2ForCausalLM"});
  for (const char* model : {"ViTForImageClassification", "UNet"}) {
    INFO(model);
    std::set<std::string> dtypes, checkpointing;
    for (const std::string& v : variants[model]) {
      dtypes.insert(v.substr(0, v.find(' ')));
      checkpointing.insert(v.substr(v.find(' ') + 1));
    }
    CHECK(dtypes == std::set<std::string>{"bf16", "fp32"});
    CHECK(checkpointing == std::set<std::string>{"full", "none"});
  }
  CHECK(refs.size() == 24);
}

TEST_CASE("shardscope matches the PyTorch FSDP references recorded on an H200",
          "[cli][reference]") {
  // CUDA runs (tests/reference/cuda/): the tracker counts storages rounded up
  // to 512 B, as peak_allocated_bytes does. torch.cuda's own allocated and
  // reserved: the next test case.
  const std::vector<std::filesystem::path> refs = references("reference/cuda");
  REQUIRE(refs.size() >= 57);
  check_references(refs, "peak_allocated_bytes", known_cuda_gaps());
}

// What torch.cuda reports on the H200 references of 100 MB or more
// (max_memory_allocated >= 1e8 B): max_memory_allocated against simulate's
// peak_allocated_with_workspaces_bytes (tensors plus the cuBLAS workspaces
// the caching allocator holds), max_memory_reserved against
// peak_reserved_bytes, each within 5% (issue 32), with no exception since
// FSDP2's flat mixed-precision all-gather input is its own block (the three
// llama-h256-l4 runs were -5.5% to -5.7%: a 2 MiB small segment of the
// copy-in stream missing, docs/accuracy.md).
TEST_CASE("simulate predicts torch.cuda's allocated and reserved peaks on the H200 references",
          "[cli][reference]") {
  int checked = 0, large = 0;
  for (const auto& path : references("reference/cuda")) {
    const json ref = read_json(path.string());
    const std::string name = ref.at("name");
    INFO(name);
    const double allocated = ref.at("peak").at("cuda_allocated_bytes").get<double>();
    const double reserved = ref.at("peak").at("cuda_reserved_bytes").get<double>();
    shardscope::test::TempDir dir;
    const std::string config = dir.write("config.json", ref.at("config"));
    std::string args;
    for (const auto& a : ref.at("shardscope_args")) args += " " + shell_quote(a.get<std::string>());
    const auto sim = shardscope::test::run_cli("simulate --model " + shell_quote(config) + args +
                                               " --hw h200-sxm --json");
    INFO(sim.output);
    REQUIRE(sim.status == 0);
    const json j = json::parse(sim.output);
    // Two 32 MiB workspaces in every run (the snapshots' two 32 MiB blocks),
    // and allocated = tensors + them.
    CHECK(j.at("blas_workspace_bytes") == 2 * 32 * 1048576);
    CHECK(j.at("peak_allocated_with_workspaces_bytes").get<int64_t>() ==
          j.at("peak_allocated_bytes").get<int64_t>() + 2 * 32 * 1048576);
    ++checked;
    if (allocated < 1e8) continue;
    ++large;
    const double alloc_err =
        j.at("peak_allocated_with_workspaces_bytes").get<double>() / allocated - 1;
    const double reserved_err = j.at("peak_reserved_bytes").get<double>() / reserved - 1;
    CAPTURE(alloc_err, reserved_err);
    CHECK(std::fabs(alloc_err) <= 0.05);
    CHECK(std::fabs(reserved_err) <= 0.05);
  }
  CHECK(checked >= 57);
  CHECK(large >= 10);  // the four gpt2-small runs (4.6-13.0 GiB) and six of 100-140 MB
}

// The small fp32 runs where PyTorch falls back to math SDPA (fp32 with
// grouped KV heads on the H200): its scores, probabilities and their
// gradients are separate sub-MiB tensors in the small pool; one block of
// their sum opened a 20 MiB large segment (+22% to +26% reserved, 78-80 MiB).
TEST_CASE("the math SDPA runs' reserved memory on the H200 within 5%", "[cli][reference]") {
  for (const char* name : {"gemma2-h128-l2-gqa2-sw64-fsdp2-fp32-w4-b2-t128-rafF-ac1",
                           "qwen2-h128-l2-gqa2-tied-fsdp2-fp32-w4-b2-t128-rafF-ac1",
                           "qwen2-h128-l2-gqa2-tied-fsdp2-fp32-w4-b2-t128-rafT-acTT"}) {
    INFO(name);
    const json ref =
        read_json(std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/reference/cuda/" + name + ".json");
    shardscope::test::TempDir dir;
    const std::string config = dir.write("config.json", ref.at("config"));
    std::string args;
    for (const auto& a : ref.at("shardscope_args")) args += " " + shell_quote(a.get<std::string>());
    const auto sim = shardscope::test::run_cli("simulate --model " + shell_quote(config) + args +
                                               " --hw h200-sxm --json");
    INFO(sim.output);
    REQUIRE(sim.status == 0);
    const json j = json::parse(sim.output);
    CHECK(j.at("attention_kernels").dump().find("\"math\"") != std::string::npos);
    const double reserved = ref.at("peak").at("cuda_reserved_bytes").get<double>();
    const double err = j.at("peak_reserved_bytes").get<double>() / reserved - 1;
    CAPTURE(err);
    CHECK(std::fabs(err) <= 0.05);
  }
}
