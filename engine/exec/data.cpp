#include "engine/exec/data.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "engine/exec/f32_view.h"
#include "engine/exec/normal_ziggurat.h"
#include "plan/vocab_padding.h"

namespace shardscope::engine::exec {

uint64_t hash_name(const std::string& name) {  // FNV-1a 64
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

double uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t r = mix64(mix64(seed ^ mix64(stream)) + index);
  return (static_cast<double>(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double normal01(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = uniform01(seed, stream, 2 * index);
  const double u2 = uniform01(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

namespace {
const plan::Op* first_user(const plan::Graph& g, int param) {
  for (const plan::Op& op : g.ops)
    for (int p : op.params)
      if (p == param) return &op;
  return nullptr;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

ParamInit unpadded_param_init(const plan::Graph& g, int param) {
  const plan::Param& p = g.params[static_cast<size_t>(param)];
  const plan::Op* op = first_user(g, param);
  ParamInit init;
  if (ends_with(p.name, ".bias")) {
    init.kind = ParamInit::Kind::zero;
    return init;
  }
  if (op && (op->type == plan::OpType::layernorm || op->type == plan::OpType::rmsnorm)) {
    // Gemma's x * rstd * (1 + weight): weight 0 is the unit scale (HF initialises zeros).
    init.kind =
        op->attrs.weight_offset.value_or(0.0) != 0.0 ? ParamInit::Kind::zero : ParamInit::Kind::one;
    return init;
  }
  if (g.family == "gpt2" && ends_with(p.name, ".c_proj.weight")) {
    int64_t layers = 0;
    for (const plan::Module& m : g.modules)
      if (m.class_name == "GPT2Block") ++layers;
    init.std /= std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(layers, 1)));
  }
  init.stream = hash_name(p.name);
  return init;
}

}  // namespace

ParamInit param_init(const plan::Graph& g, int param) {
  ParamInit init = unpadded_param_init(g, param);
  const plan::VocabPadding vp = plan::vocab_padding(g);
  const plan::Param& p = g.params[static_cast<size_t>(param)];
  if (std::find(vp.params.begin(), vp.params.end(), param) != vp.params.end())
    init.zero_from = vp.valid * (p.numel() / p.shape[0]);  // row-major: rows [V, Vp) after
  return init;
}

float ParamInit::value(int64_t index, uint64_t seed) const {
  if (index >= zero_from) return 0.0f;
  switch (kind) {
    case Kind::zero:
      return 0.0f;
    case Kind::one:
      return 1.0f;
    case Kind::normal:
      break;
  }
  return static_cast<float>(
      std * ziggurat_normal(mix64(seed ^ mix64(stream)), static_cast<uint64_t>(index)));
}

void ParamInit::fill(int64_t first, int64_t count, uint64_t seed, float* out) const {
  switch (kind) {
    case Kind::zero:
      std::fill(out, out + count, 0.0f);
      break;
    case Kind::one:
      std::fill(out, out + count, 1.0f);
      break;
    case Kind::normal:
      fill_normal(mix64(seed ^ mix64(stream)), static_cast<uint64_t>(first), count, std, out);
      break;
  }
  if (zero_from < first + count)
    std::fill(out + std::max<int64_t>(zero_from - first, 0), out + count, 0.0f);
}

float initial_value(const plan::Graph& g, int param, int64_t index, uint64_t seed) {
  return param_init(g, param).value(index, seed);
}

DataSource::DataSource(const plan::Graph& graph, uint64_t seed) : g_(&graph), seed_(seed) {}

void DataSource::check_text_file(const plan::Graph& graph, const std::string& path) {
  if (graph.vocab_size < 256)
    throw std::invalid_argument("--data " + path + ": model '" + graph.model_name +
                                "' has a vocabulary of " + std::to_string(graph.vocab_size) +
                                " < 256 byte values (byte-level training needs a token model)");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::invalid_argument("--data " + path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    throw std::invalid_argument("--data " + path + ": is a directory, not a text file");
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument("--data " + path + ": not a regular file");
  if (::access(path.c_str(), R_OK) != 0)
    throw std::invalid_argument("--data " + path + ": " + std::strerror(errno));
  if (st.st_size < 2)
    throw std::invalid_argument("--data " + path + ": the file holds fewer than 2 bytes");
}

DataSource DataSource::from_text_file(const plan::Graph& graph, uint64_t seed,
                                      const std::string& path) {
  check_text_file(graph, path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("--data " + path + ": cannot open the file");
  DataSource d(graph, seed);
  d.text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (d.text_.size() < 2)
    throw std::invalid_argument("--data " + path + ": the file holds fewer than 2 bytes");
  return d;
}

uint64_t DataSource::token_at(int64_t sample, int64_t pos, int64_t seq) const {
  if (text_.empty())
    return static_cast<uint64_t>(
        uniform01(seed_, 0x70c3e5ull + static_cast<uint64_t>(sample), static_cast<uint64_t>(pos)) *
        static_cast<double>(g_->vocab_size));
  const uint64_t len = text_.size();
  const uint64_t span = static_cast<uint64_t>(seq) + 1;
  const uint64_t starts = len > span ? len - span + 1 : 1;
  const uint64_t start = mix64(seed_ ^ mix64(static_cast<uint64_t>(sample))) % starts;
  return text_[(start + static_cast<uint64_t>(pos)) % len];
}

void DataSource::fill(int tensor, int64_t first, int64_t batch, int64_t seq, void* out) const {
  const plan::Tensor& t = g_->tensors[static_cast<size_t>(tensor)];
  if (g_->family == "mlp") {
    if (t.dtype == plan::DType::f32) {  // x [B, in]
      const auto in = static_cast<int64_t>(t.shape.back().eval(plan::Workload{1, 1}));
      auto* x = static_cast<float*>(out);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < in; ++i)
          x[b * in + i] = static_cast<float>(normal01(
              seed_, 0xf00dull + static_cast<uint64_t>(first + b), static_cast<uint64_t>(i)));
      return;
    }
    int64_t classes = 0;  // labels [B]: from the cross-entropy op
    for (const plan::Op& op : g_->ops)
      if (op.type == plan::OpType::cross_entropy) classes = op.attrs.classes.value_or(0);
    auto* y = static_cast<int64_t*>(out);
    for (int64_t b = 0; b < batch; ++b)
      y[b] = static_cast<int64_t>(uniform01(seed_, 0x1abe1ull, static_cast<uint64_t>(first + b)) *
                                  static_cast<double>(classes));
    return;
  }
  const bool labels = t.name == "labels";
  auto* ids = static_cast<int64_t*>(out);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i)
      ids[b * seq + i] = static_cast<int64_t>(token_at(first + b, i + (labels ? 1 : 0), seq));
}

void fill_input(const DataSource& data, const plan::Schedule& s, const plan::Buffer& b,
                int micro_step, void* dst) {
  const int64_t W = s.world.world_size, B = s.workload.batch;
  const int64_t first = (micro_step * W + s.rank) * B;
  if (plan::is_floating(b.dtype) && b.dtype != plan::DType::f32) {
    // A float input (MLP features) stored 16-bit: the data is made in fp32
    // and rounded into the buffer (fill() writes 4-byte floats).
    std::vector<float> staging(static_cast<size_t>(b.bytes / plan::dtype_bytes(b.dtype)));
    data.fill(b.tensor, first, B, s.workload.seq, staging.data());
    store_f32(staging.data(), dst, b.dtype, static_cast<int64_t>(staging.size()));
  } else {
    data.fill(b.tensor, first, B, s.workload.seq, dst);
  }
}

}  // namespace shardscope::engine::exec
