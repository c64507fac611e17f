# tests of engine/cuda/exec (the CUDA rank executor and training driver).
# Runs everywhere: the no-device error path (and, with a device, the refusals).
shardscope_test(test_cuda_exec_nodevice
  test_cuda_exec_nodevice.cpp
  test_host_poll.cpp
  LIBS shardscope_engine_cuda_exec shardscope_plan)
# Needs a GPU (exit 77 = skipped without one): CPU equivalence over NCCL world 1,
# emulated peers against the simulator, CUPTI memory accounting, layout kernels.
shardscope_gpu_test(test_cuda_exec
  test_cuda_exec_train.cpp
  test_cuda_exec_families.cpp
  test_cuda_exec_families_attention.cpp
  test_cuda_exec_emulated.cpp
  test_cuda_exec_cupti.cpp
  test_cuda_exec_layout.cpp
  LIBS shardscope_engine_cuda_exec shardscope_engine_exec shardscope_engine_launch shardscope_sim
       shardscope_plan)
