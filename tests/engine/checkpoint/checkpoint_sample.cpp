// Interop helper for check_safetensors.py (not a Catch2 test):
//   checkpoint_sample write PATH            writes the sample model with write_safetensors
//   checkpoint_sample check PATH            reads PATH (written by Python) and checks it
//   checkpoint_sample refused PATH TEXT     Reader::open(PATH) must fail with TEXT in the message
// Sample model: "transformer.wte.weight" [7, 5], "transformer.h.0.ln_1.bias" [5], "scalar" [];
// element k of tensor s = s * 1000 + k * 0.25 - 3.5 (exact in fp32); metadata step=12.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

using namespace shardscope::engine::checkpoint;

namespace {

struct SampleTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<SampleTensor> sample() {
  std::vector<SampleTensor> out = {{"transformer.wte.weight", {7, 5}, {}},
                                   {"transformer.h.0.ln_1.bias", {5}, {}},
                                   {"scalar", {}, {}}};
  for (size_t s = 0; s < out.size(); ++s) {
    int64_t n = 1;
    for (int64_t d : out[s].shape) n *= d;
    for (int64_t k = 0; k < n; ++k)
      out[s].values.push_back(static_cast<float>(s + 1) * 1000.0f + static_cast<float>(k) * 0.25f -
                              3.5f);
  }
  return out;
}

int check(const std::string& path) {
  const Reader r = Reader::open(path);
  const auto tensors = sample();
  if (r.names().size() != tensors.size()) {
    std::fprintf(stderr, "%s: %zu tensors, expected %zu\n", path.c_str(), r.names().size(),
                 tensors.size());
    return 1;
  }
  for (const SampleTensor& t : tensors) {
    if (!r.has(t.name) || r.shape(t.name) != t.shape || r.read_all(t.name) != t.values) {
      std::fprintf(stderr, "%s: tensor %s differs\n", path.c_str(), t.name.c_str());
      return 1;
    }
  }
  if (r.metadata().count("step") == 0 || r.metadata().at("step") != "12") {
    std::fprintf(stderr, "%s: metadata step != 12\n", path.c_str());
    return 1;
  }
  std::printf("check ok: %zu tensors\n", tensors.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "write" && argc == 3) {
      const auto tensors = sample();
      std::vector<FullTensor> full;
      for (const SampleTensor& t : tensors) full.push_back({t.name, t.shape, t.values.data()});
      write_safetensors(argv[2], full, {{"step", "12"}, {"model", "sample"}});
      return 0;
    }
    if (mode == "check" && argc == 3) return check(argv[2]);
    if (mode == "refused" && argc == 4) {
      try {
        Reader::open(argv[2]);
      } catch (const CheckpointError& e) {
        std::printf("refused: %s\n", e.what());
        return std::string(e.what()).find(argv[3]) != std::string::npos ? 0 : 1;
      }
      std::fprintf(stderr, "%s: accepted, expected a refusal with '%s'\n", argv[2], argv[3]);
      return 1;
    }
    std::fprintf(stderr, "usage: checkpoint_sample write|check PATH | refused PATH TEXT\n");
    return 2;
  } catch (const CheckpointError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
