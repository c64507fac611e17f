// fp32 views of buffer regions whose storage is fp32, bf16 or fp16 (the plan's
// element size): 4-byte storage is used in place; 16-bit storage is converted
// into a thread-local scratch on entry and, for written views, rounded back
// (round to nearest even) when the view is destroyed.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "plan/graph.h"

namespace shardscope::engine::exec {

uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(uint16_t h);
uint16_t float_to_fp16_bits(float x);
float fp16_bits_to_float(uint16_t h);

// Converts n elements of dtype `dt` at src into floats at dst, and back.
void load_f32(const void* src, plan::DType dt, float* dst, int64_t n);
void store_f32(const float* src, void* dst, plan::DType dt, int64_t n);

class F32View {
 public:
  // base: the buffer; offset and n in elements of `dt`.
  F32View(void* base, plan::DType dt, int64_t offset, int64_t n, bool read, bool write);
  ~F32View();
  F32View(const F32View&) = delete;
  F32View& operator=(const F32View&) = delete;
  F32View(F32View&& other) noexcept;
  F32View& operator=(F32View&&) = delete;

  float* data() { return ptr_; }
  int64_t size() const { return n_; }

 private:
  void* dst_ = nullptr;
  plan::DType dt_ = plan::DType::f32;
  int64_t n_ = 0;
  bool write_ = false;
  float* ptr_ = nullptr;
  std::vector<float> scratch_;
};

}  // namespace shardscope::engine::exec
