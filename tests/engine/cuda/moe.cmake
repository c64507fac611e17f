# tests of the mixture-of-experts ops on CUDA (engine/cuda/ops/moe.cu,
# engine/cuda/exec/cuda_moe_ops.cpp).
# Run everywhere: the kernels' row and index math (moe_math.h) on the host
# against the CPU ops, and the launchers' argument checks.
shardscope_test(test_cuda_moe_math
  test_cuda_moe_math.cpp
  LIBS shardscope_engine_exec shardscope_engine_cpu shardscope_plan)
shardscope_test(test_cuda_moe_args
  test_cuda_moe_args.cpp
  LIBS shardscope_engine_cuda_ops)
# Needs a GPU (exit 77 = skipped without one): each kernel against its CPU op,
# and training the tiny MoE configurations against the CPU engine.
shardscope_gpu_test(test_cuda_moe
  test_cuda_ops_moe.cpp
  test_cuda_exec_moe.cpp
  LIBS shardscope_engine_cuda_exec shardscope_engine_exec shardscope_engine_launch shardscope_sim
       shardscope_engine_cpu shardscope_plan)
