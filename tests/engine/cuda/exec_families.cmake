# Needs a GPU (exit 77 = skipped without one): the tiny dense families whose
# attention needs windows, partial rotary or the per-head / packed GQA qkv
# layouts, trained on the GPU against the CPU engine and the simulator's peak.
shardscope_gpu_test(test_cuda_exec_families
  test_cuda_exec_families.cpp
  LIBS shardscope_engine_cuda_exec shardscope_engine_exec shardscope_engine_launch shardscope_sim
       shardscope_plan)
