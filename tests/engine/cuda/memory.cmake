# engine/cuda/memory: CudaBacking + CudaEventSource.
shardscope_test(test_cuda_memory_nodevice
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_memory_nodevice.cpp
  LIBS shardscope_engine_cuda_memory)
shardscope_gpu_test(test_cuda_memory
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_cuda_memory_gate.cu
  LIBS shardscope_engine_cuda_memory)
