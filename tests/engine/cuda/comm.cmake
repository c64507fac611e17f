# engine/cuda/comm: argument checks, NCCL (world size 1 on the GPU), emulated peers.
shardscope_test(test_cuda_comm_nodevice
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_comm_nodevice.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_collective_turns.cpp
  LIBS shardscope_engine_cuda_comm shardscope_engine_launch)
shardscope_gpu_test(test_cuda_comm
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_comm_nccl.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_comm_emulated.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_memory_gate.cu
  LIBS shardscope_engine_cuda_comm shardscope_engine_launch)
