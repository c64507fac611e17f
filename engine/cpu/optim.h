// Optimizers on flat fp32 shards (PyTorch's torch.optim.AdamW and SGD
// update rules, single-tensor "for-loop" implementation) and the numerics
// helpers of the optimizer step: squared norms, scaling, inf/nan checks and
// rounding to reduced precision.
#pragma once

#include <cstdint>

namespace shardscope::engine::cpu {

struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};
// step: 1-based step count after this update. p *= 1 - lr*wd; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps).
// Evaluated as torch's single-tensor AdamW does (m via lerp towards g, fp32
// elementwise math with the scalars combined in double). Throws
// std::invalid_argument for step < 1 or a beta outside [0, 1).
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& h,
                int64_t step);

struct SgdParams {
  double lr = 1e-3, momentum = 0.0, weight_decay = 0.0;
};
// g' = g + wd*p; momentum > 0: buf = g' on step 1, else momentum*buf + g'; p -= lr*buf
// (momentum == 0: p -= lr*g'). torch.optim.SGD with dampening 0, nesterov false.
// buf may be nullptr when momentum == 0 (else std::invalid_argument).
void sgd_step(float* p, const float* g, float* buf, int64_t n, const SgdParams& h, int64_t step);

// Sum of squares in double, in index order (deterministic).
double squared_norm(const float* x, int64_t n);
void scale_inplace(float* x, int64_t n, float factor);  // x *= factor
bool has_inf_or_nan(const float* x, int64_t n);         // any element +-inf or NaN

// torch.nn.utils.clip_grad_norm_: the gradients are multiplied by
// max_norm / (total_norm + 1e-6), clamped to 1. std::min keeps a NaN norm's
// NaN factor (as torch's clamp does), which poisons the step instead of
// silently not clipping. Both engines use it: the CPU one and the CUDA one
// on the host, and its device kernel (engine/cuda/ops/optim.cu) with the
// same epsilon.
inline constexpr double kClipNormEps = 1e-6;
float clip_factor(double total_norm, double max_norm);

// Round-to-nearest-even to bf16 / fp16 and back to float (what a cast to that
// dtype and back does): overflow to +-inf as the hardware does, NaN kept.
float round_to_bf16(float x);
float round_to_fp16(float x);
// The same, in place over an array of n elements.
void round_inplace_bf16(float* x, int64_t n);
void round_inplace_fp16(float* x, int64_t n);

}  // namespace shardscope::engine::cpu
