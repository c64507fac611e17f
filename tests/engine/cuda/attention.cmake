# Fused CUDA attention (engine/cuda/ops/attention_*.cu): forward and backward
# against cpu::attention on the GPU, and the argument checks everywhere (they
# throw before any CUDA call, so they run on machines without a device).
shardscope_gpu_test(test_cuda_attention test_cuda_attention.cpp
  LIBS shardscope_engine_cuda_ops shardscope_engine_cpu)
shardscope_test(test_cuda_attention_args test_cuda_attention_args.cpp
  LIBS shardscope_engine_cuda_ops)
# The kernels' mask / tile-range / soft-capping / rotary index math
# (attention_math.h, plain C++ too) against cpu::attention on the host.
shardscope_test(test_attention_math test_attention_math.cpp
  LIBS shardscope_engine_cpu)
# cuDNN's fused attention (engine/cuda/ops/attention_cudnn.h): against the CPU
# twin on the GPU, and its refusals, cache key and index math everywhere.
shardscope_gpu_test(test_cuda_attention_cudnn test_cuda_attention_cudnn.cpp
  LIBS shardscope_engine_cuda_ops shardscope_engine_cpu)
shardscope_test(test_cuda_attention_cudnn_args test_cuda_attention_cudnn_args.cpp
  LIBS shardscope_engine_cuda_ops shardscope_engine_cpu)
