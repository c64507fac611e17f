#include "engine/exec/layout.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace shardscope::engine::exec {

UnitLayout::UnitLayout(const plan::Graph& graph, const plan::Unit& unit, plan::Flavor flavor,
                       int64_t n)
    : flavor_(flavor), n_(n), s_(unit.shard_numel) {
  int64_t flat = 0, shard_off = 0;
  for (int p : unit.params) {
    const plan::Param& param = graph.params[static_cast<size_t>(p)];
    ParamPlace pp;
    pp.param = p;
    pp.numel = param.numel();
    if (flavor == plan::Flavor::fsdp1) {
      pp.unsharded = flat;
      flat += pp.numel;
    } else {
      if (param.shape.empty())
        throw std::invalid_argument("parameter '" + param.name + "' has no dim 0 to shard");
      const int64_t dim0 = param.shape[0];
      const int64_t rest = dim0 > 0 ? pp.numel / dim0 : 0;
      pp.chunk = plan::ceil_div(dim0, n) * rest;
      pp.shard_offset = shard_off;
      pp.unsharded = n * shard_off;
      shard_off += pp.chunk;
    }
    params_.push_back(pp);
  }
  const int64_t expect = flavor == plan::Flavor::fsdp1 ? plan::ceil_div(flat, n) : shard_off;
  if (expect != s_)
    throw std::logic_error("unit '" + unit.name + "': layout has " + std::to_string(expect) +
                           " shard elements, the plan " + std::to_string(s_));
}

const ParamPlace* UnitLayout::find(int param) const {
  for (const ParamPlace& pp : params_)
    if (pp.param == param) return &pp;
  return nullptr;
}

int64_t UnitLayout::gathered_to_unsharded(int64_t index) const {
  if (flavor_ == plan::Flavor::fsdp1) return index;
  const int64_t q = index / s_, off = index % s_;
  // The parameter whose chunk holds shard offset `off` (chunks are in order).
  auto it = std::upper_bound(
      params_.begin(), params_.end(), off,
      [](int64_t v, const ParamPlace& pp) { return v < pp.shard_offset + pp.chunk; });
  return it->unsharded + q * it->chunk + (off - it->shard_offset);
}

void UnitLayout::gathered_to_unsharded(const void* gathered, void* unsharded, int bpe) const {
  const auto* src = static_cast<const char*>(gathered);
  auto* dst = static_cast<char*>(unsharded);
  if (flavor_ == plan::Flavor::fsdp1) {
    std::memcpy(dst, src, static_cast<size_t>(full_numel() * bpe));
    return;
  }
  for (int64_t q = 0; q < n_; ++q)
    for (const ParamPlace& pp : params_)
      std::memcpy(dst + (pp.unsharded + q * pp.chunk) * bpe, src + (q * s_ + pp.shard_offset) * bpe,
                  static_cast<size_t>(pp.chunk * bpe));
}

void UnitLayout::unsharded_to_gathered(const void* unsharded, void* gathered, int bpe) const {
  const auto* src = static_cast<const char*>(unsharded);
  auto* dst = static_cast<char*>(gathered);
  if (flavor_ == plan::Flavor::fsdp1) {
    std::memcpy(dst, src, static_cast<size_t>(full_numel() * bpe));
    return;
  }
  for (int64_t q = 0; q < n_; ++q)
    for (const ParamPlace& pp : params_)
      std::memcpy(dst + (q * s_ + pp.shard_offset) * bpe, src + (pp.unsharded + q * pp.chunk) * bpe,
                  static_cast<size_t>(pp.chunk * bpe));
}

Range UnitLayout::held_range(const ParamPlace& pp, int64_t q) const {
  Range r;
  if (flavor_ == plan::Flavor::fsdp1) {
    r.begin = std::clamp(q * s_ - pp.unsharded, int64_t{0}, pp.numel);
    r.end = std::clamp((q + 1) * s_ - pp.unsharded, int64_t{0}, pp.numel);
  } else {
    r.begin = std::min(q * pp.chunk, pp.numel);
    r.end = std::min((q + 1) * pp.chunk, pp.numel);
  }
  return r;
}

int64_t UnitLayout::held_shard_offset(const ParamPlace& pp, int64_t q) const {
  if (flavor_ == plan::Flavor::fsdp1) return pp.unsharded + held_range(pp, q).begin - q * s_;
  return pp.shard_offset;
}

UnshardedPlace unsharded_place(int param, int64_t numel, int64_t layout_numel,
                               const UnitLayout* layout) {
  if (param < 0) {
    if (numel != layout_numel)
      throw std::invalid_argument("a unit's unsharded gradient of " + std::to_string(numel) +
                                  " elements where its layout has " + std::to_string(layout_numel));
    return {0, numel};
  }
  const ParamPlace* pp = layout ? layout->find(param) : nullptr;
  if (!pp)
    throw std::invalid_argument("the gradient of parameter " + std::to_string(param) +
                                " is not in the op's unit");
  if (pp->numel != numel || pp->unsharded + numel > layout_numel)
    throw std::invalid_argument("the gradient of parameter " + std::to_string(param) + " has " +
                                std::to_string(numel) + " elements, the parameter " +
                                std::to_string(pp->numel));
  return {pp->unsharded, numel};
}

}  // namespace shardscope::engine::exec
