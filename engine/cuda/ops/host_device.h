// Functions shared by CUDA kernels and host code: marked SS_HD they compile
// as __host__ __device__ under nvcc and as plain C++ elsewhere, so that the
// kernels' per-element and index math (hf_math.h, attention_math.h,
// moe_math.h) is tested on the host against the CPU engine's ops.
#pragma once

#ifdef __CUDACC__
#define SS_HD __host__ __device__
#define SS_HD_FORCEINLINE __host__ __device__ __forceinline__
#else
#define SS_HD
#define SS_HD_FORCEINLINE inline
#endif
