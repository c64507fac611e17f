# tests of engine/cuda/ops: every kernel against its CPU op (GPU binary,
# label gpu, skipped without a device) and the launchers' argument checks
# (runs everywhere: they throw before any CUDA call).
shardscope_gpu_test(test_cuda_ops
  test_cuda_ops_embedding_loss.cpp
  test_cuda_ops_hf.cpp
  test_cuda_ops_linear.cpp
  test_cuda_ops_norm.cpp
  test_cuda_ops_optim.cpp
  test_cuda_ops_pointwise.cpp
  LIBS shardscope_engine_cuda_ops shardscope_engine_cpu)
shardscope_test(test_cuda_ops_args
  test_cuda_ops_args.cpp
  LIBS shardscope_engine_cuda_ops)
# engine/cuda/ops/hf_math.h compiled as plain C++: the kernels' per-element
# math against the CPU ops, bit for bit (runs everywhere).
shardscope_test(test_cuda_hf_math
  test_cuda_hf_math.cpp
  LIBS shardscope_engine_cpu)
