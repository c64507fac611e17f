#include "engine/exec/numerics_check.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardscope::engine::exec {

const char* non_finite_name(double value) {
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}

namespace {

// Every rank's local value (world group 0, one double each), and the ranks
// whose value is not finite.
std::vector<int> non_finite_ranks(double local, comm::Communicator& comm) {
  std::vector<double> all(static_cast<size_t>(comm.world_size()));
  comm.all_gather(0, &local, all.data(), sizeof(double));
  std::vector<int> ranks;
  for (size_t r = 0; r < all.size(); ++r)
    if (!std::isfinite(all[r])) ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

[[noreturn]] void fail(NonFinite d, const std::string& what_local) {
  std::string m = "non-finite " + std::string(d.quantity == "loss" ? "loss" : "gradient norm") +
                  " at step " + std::to_string(d.step);
  if (d.global_step != d.step) m += " (global step " + std::to_string(d.global_step) + ")";
  m += ": the " +
       std::string(d.quantity == "loss" ? "global mean loss"
                                        : "total gradient norm (before "
                                          "clipping)") +
       " is " + non_finite_name(d.value) + "; ";
  if (d.ranks.empty())
    m += "every rank's " + what_local + " is finite (their reduction overflowed)";
  else
    m +=
        what_local + " non-finite on rank" + (d.ranks.size() > 1 ? "s " : " ") + rank_list(d.ranks);
  m += "; training stopped (no checkpoint saved): lower the learning rate, clip gradients "
       "(grad_clip_norm) or use bf16/loss scaling";
  throw NumericsError(m, std::move(d));
}

}  // namespace

void check_step_numbers(const StepNumbers& s, comm::Communicator& comm) {
  const bool norm_computed = !(s.grad_norm < 0);  // -1: no clipping; NaN counts
  if (std::isfinite(s.global_loss) && (!norm_computed || s.skipped || std::isfinite(s.grad_norm)))
    return;  // the usual case: nothing copied
  NonFinite d;
  d.step = s.index + 1;
  d.global_step = s.global_step + 1;
  if (s.losses_so_far) {
    const size_t before = std::min(s.losses_so_far->size(), static_cast<size_t>(s.index));
    d.losses_before.assign(s.losses_so_far->begin(),
                           s.losses_so_far->begin() + static_cast<std::ptrdiff_t>(before));
  }
  if (!std::isfinite(s.global_loss)) {
    d.quantity = "loss";
    d.value = s.global_loss;
    d.ranks = non_finite_ranks(s.local_loss, comm);
    fail(std::move(d), "local loss");
  }
  // A skipped step's gradients overflowed under loss scaling: expected, not checked.
  if (norm_computed && !s.skipped && !std::isfinite(s.grad_norm)) {
    d.quantity = "grad_norm";
    d.value = s.grad_norm;
    d.ranks = non_finite_ranks(s.local_grad_norm_sq, comm);
    fail(std::move(d), "local squared gradient norm");
  }
}

}  // namespace shardscope::engine::exec
