#include "engine/cuda/comm/emulated_communicator.h"

// Driver API types only (CUresult, CUstream, CUdeviceptr, the wait flags): the
// functions are reached through cudaGetDriverEntryPointByVersion, never linked.
#include <cuda.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "engine/cuda/check.h"
#include "engine/cuda/comm/collective_args.h"
#include "engine/cuda/comm/collective_turns.h"
#include "engine/cuda/comm/divide_kernel.h"
#include "engine/cuda/memory/scoped_device.h"
#include "profiler/host_clock.h"

namespace shardscope::engine::cuda {

namespace {

using StreamWaitValue32Fn = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using GetErrorNameFn = CUresult(CUDAAPI*)(CUresult, const char**);

// The driver ABI asked for: 12.0 gives the _v2 stream memory operations.
constexpr unsigned kDriverApiVersion = 12000;
constexpr size_t kMaxStreams = 64;
constexpr size_t kFlagStride = 16;    // 32-bit words between two streams' flags (64 bytes)
constexpr int64_t kSpinNs = 100'000;  // the release thread spins the last 100 us

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::broadcast:
      return "broadcast";
  }
  return "collective";
}

DivideElement divide_element(plan::DType dtype) {
  switch (dtype) {
    case plan::DType::bf16:
      return DivideElement::bf16;
    case plan::DType::f16:
      return DivideElement::f16;
    default:
      return DivideElement::f32;  // require_collective_dtype ran first
  }
}

// A driver function for the CUDA 12.0 ABI, through the runtime.
void* driver_entry_point(const char* symbol) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  SS_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &function, kDriverApiVersion,
                                                 cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    throw CudaError(
        std::string("emulated communicator: the CUDA driver has no ") + symbol +
        " for the CUDA 12.0 ABI (" +
        (found == cudaDriverEntryPointVersionNotSufficent ? "driver too old" : "symbol not found") +
        ")");
  }
  return function;
}

template <typename Fn>
Fn function_pointer(void* address) {
  Fn function = nullptr;
  static_assert(sizeof function == sizeof address, "function and object pointers differ in size");
  std::memcpy(&function, &address, sizeof function);
  return function;
}

// 32-bit flags in host-pinned memory that the device can read (mapped).
class PinnedFlags {
 public:
  explicit PinnedFlags(size_t words) {
    void* host = nullptr;
    SS_CUDA_CHECK(cudaHostAlloc(&host, words * sizeof(uint32_t),
                                cudaHostAllocMapped | cudaHostAllocPortable));
    host_ = static_cast<uint32_t*>(host);
    std::memset(host_, 0, words * sizeof(uint32_t));
    void* device = nullptr;
    const cudaError_t err = cudaHostGetDevicePointer(&device, host_, 0);
    if (err != cudaSuccess) {
      (void)cudaFreeHost(host_);
      check_cuda(err, "cudaHostGetDevicePointer", __FILE__, __LINE__);
    }
    device_ = reinterpret_cast<CUdeviceptr>(device);
  }
  ~PinnedFlags() { (void)cudaFreeHost(host_); }
  PinnedFlags(const PinnedFlags&) = delete;
  PinnedFlags& operator=(const PinnedFlags&) = delete;

  uint32_t* host_word(size_t index) const { return host_ + index; }
  CUdeviceptr device_word(size_t index) const { return device_ + index * sizeof(uint32_t); }

 private:
  uint32_t* host_ = nullptr;
  CUdeviceptr device_ = 0;
};

}  // namespace

struct EmulatedCommunicator::Impl {
  // One issued collective. Lives in a deque (never moves): its address is the
  // host function's argument.
  struct Entry {
    Impl* impl;
    size_t index;     // in entries, and its id in turns
    size_t slot;      // stream slot
    uint32_t ticket;  // the slot's k-th collective: its wait passes when flag >= ticket
    CollectiveKind kind;
    uint64_t bytes;
  };
  struct Slot {
    cudaStream_t stream = nullptr;
    uint32_t issued_ticket = 0;             // last ticket enqueued (state_mutex)
    cudaEvent_t after_last_wait = nullptr;  // recorded after each wait
  };

  Impl(int rank_of_world, CollectiveDuration model);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void issue(CollectiveKind kind, int group, const comm::Group& members, uint64_t bytes,
             cudaStream_t stream, const std::function<void()>& data_effect);
  void abort(const std::string& message);
  std::vector<Issued> issued() const;

 private:
  static void CUDART_CB on_reached(void* argument);
  size_t slot_of(cudaStream_t stream);
  void check_driver(CUresult result, const char* what, const char* collective) const;
  void release_locked(size_t slot, uint32_t ticket);
  void release_all_locked();
  void run_releaser();
  std::string where(const char* collective) const {
    return std::string("emulated ") + collective + ": rank " + std::to_string(rank);
  }

  const int rank;
  int device = 0;
  const CollectiveDuration duration;
  StreamWaitValue32Fn wait_value32 = nullptr;
  GetErrorNameFn get_error_name = nullptr;  // for messages; may stay null
  std::optional<PinnedFlags> flags;         // kMaxStreams flags, kFlagStride apart

  // issue_mutex serialises issue() (CUDA calls are made under it); the host
  // function and the release thread never take it. state_mutex guards what
  // they share and is never held across a CUDA call.
  std::mutex issue_mutex;
  mutable std::mutex state_mutex;
  std::condition_variable wake;
  std::array<Slot, kMaxStreams> slots{};
  size_t slot_count = 0;
  std::deque<Entry> entries;
  // Starts and due times: one collective at a time per process group
  // (collective_turns.h), entry i is turn i.
  CollectiveTurns turns;
  bool stopping = false;
  bool aborted = false;
  std::string abort_message;
  std::thread releaser;  // started last in the constructor
};

EmulatedCommunicator::Impl::Impl(int rank_of_world, CollectiveDuration model)
    : rank(rank_of_world), duration(std::move(model)) {
  SS_CUDA_CHECK(cudaGetDevice(&device));
  int can_map = 0;
  SS_CUDA_CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, device));
  if (can_map == 0) {
    throw CudaError("emulated communicator: device " + std::to_string(device) +
                    " cannot map host memory (cudaDevAttrCanMapHostMemory = 0); its stream "
                    "waits need host-mapped flags");
  }
  wait_value32 = function_pointer<StreamWaitValue32Fn>(driver_entry_point("cuStreamWaitValue32"));
  try {
    get_error_name = function_pointer<GetErrorNameFn>(driver_entry_point("cuGetErrorName"));
  } catch (const CudaError&) {
    get_error_name = nullptr;  // messages then give the CUresult number
  }
  flags.emplace(kMaxStreams * kFlagStride);
  // The data effects' kernels, loaded before any wait exists (lazy loading
  // would load them at their first launch, possibly behind a pending wait).
  preload_divide_kernels();

  // One wait that is already satisfied (flag 0 >= 0) on a private stream:
  // CUDA_ERROR_NOT_SUPPORTED here means no stream memory operations.
  cudaStream_t probe = nullptr;
  SS_CUDA_CHECK(cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking));
  const CUresult waited = wait_value32(probe, flags->device_word(0), 0, CU_STREAM_WAIT_VALUE_GEQ);
  const cudaError_t synced = cudaStreamSynchronize(probe);
  (void)cudaStreamDestroy(probe);
  check_driver(waited, "cuStreamWaitValue32 (stream memory operations)", "communicator");
  check_cuda(synced, "cudaStreamSynchronize after a stream wait", __FILE__, __LINE__);

  releaser = std::thread([this] { run_releaser(); });
}

EmulatedCommunicator::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    release_all_locked();
  }
  // Every wait is satisfied now. Once each stream passed its last wait, its
  // host functions (enqueued before the waits) have run too: nothing refers
  // to this object or to the flags any more. Errors are ignored (a broken
  // context runs nothing more).
  for (size_t i = 0; i < slot_count; ++i) (void)cudaEventSynchronize(slots[i].after_last_wait);
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    stopping = true;
  }
  wake.notify_all();
  if (releaser.joinable()) releaser.join();
  for (size_t i = 0; i < slot_count; ++i) (void)cudaEventDestroy(slots[i].after_last_wait);
}

void EmulatedCommunicator::Impl::check_driver(CUresult result, const char* what,
                                              const char* collective) const {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (get_error_name == nullptr || get_error_name(result, &name) != CUDA_SUCCESS) name = nullptr;
  throw CudaError(where(collective) + ": " + what +
                  " failed: " + (name != nullptr ? std::string(name) : "CUresult") + " (" +
                  std::to_string(static_cast<int>(result)) + ")");
}

size_t EmulatedCommunicator::Impl::slot_of(cudaStream_t stream) {
  for (size_t i = 0; i < slot_count; ++i) {
    if (slots[i].stream == stream) return i;
  }
  if (slot_count == kMaxStreams) {
    throw comm::CommError("emulated communicator: rank " + std::to_string(rank) + ": more than " +
                          std::to_string(kMaxStreams) + " streams carry collectives");
  }
  cudaEvent_t event = nullptr;
  SS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  std::lock_guard<std::mutex> lock(state_mutex);
  slots[slot_count] = Slot{stream, 0, event};
  return slot_count++;
}

void EmulatedCommunicator::Impl::issue(CollectiveKind kind, int group, const comm::Group& members,
                                       uint64_t bytes, cudaStream_t stream,
                                       const std::function<void()>& data_effect) {
  const char* name = kind_name(kind);
  std::lock_guard<std::mutex> issue_lock(issue_mutex);
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (aborted) throw comm::CommError(where(name) + ": aborted earlier: " + abort_message);
  }
  ScopedDevice on_device(device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SS_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    throw comm::CommError(where(name) +
                          ": emulated peers cannot be captured in a CUDA graph (their wait "
                          "tickets are fixed when enqueued)");
  }
  const int64_t duration_ns = duration(kind, bytes, members);
  if (duration_ns < 0) {
    throw comm::CommError(where(name) + ": the duration model gave " + std::to_string(duration_ns) +
                          " ns for " + std::to_string(bytes) + " bytes on group '" + members.name +
                          "'");
  }
  const size_t slot = slot_of(stream);
  Entry* entry = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_mutex);
    const uint32_t ticket = slots[slot].issued_ticket + 1;
    const size_t id = turns.issue(group, duration_ns);
    entries.push_back(Entry{this, id, slot, ticket, kind, bytes});
    entry = &entries.back();
    // From here on destruction and abort() release this ticket too.
    slots[slot].issued_ticket = ticket;
  }
  const cudaError_t launched = cudaLaunchHostFunc(stream, &Impl::on_reached, entry);
  if (launched != cudaSuccess) {
    // Never reached: take it out of its group's queue, or the group's later
    // collectives would wait for it forever.
    {
      std::lock_guard<std::mutex> lock(state_mutex);
      turns.withdraw(entry->index, profiler::host_now_ns());
    }
    check_cuda(launched, "cudaLaunchHostFunc", __FILE__, __LINE__);
  }
  try {
    data_effect();
    check_driver(wait_value32(stream, flags->device_word(slot * kFlagStride), entry->ticket,
                              CU_STREAM_WAIT_VALUE_GEQ),
                 "cuStreamWaitValue32", name);
  } catch (...) {
    // The host function is enqueued and refers to this object: the
    // destructor must wait for it too, so the event still follows it.
    (void)cudaEventRecord(slots[slot].after_last_wait, stream);
    throw;
  }
  SS_CUDA_CHECK(cudaEventRecord(slots[slot].after_last_wait, stream));
}

void CUDART_CB EmulatedCommunicator::Impl::on_reached(void* argument) {
  auto* entry = static_cast<Entry*>(argument);
  Impl& impl = *entry->impl;
  const int64_t now = profiler::host_now_ns();
  {
    std::lock_guard<std::mutex> lock(impl.state_mutex);
    try {
      impl.turns.reached(entry->index, now);
      // Released at once: abort() or destruction came first (it may have been
      // issued just after them: issue() checks `aborted` and takes its ticket
      // under two separate locks).
      if (impl.turns.turn(entry->index).released_ns != 0)
        impl.release_locked(entry->slot, entry->ticket);
    } catch (...) {  // no memory: release at once rather than hang the stream
      impl.release_locked(entry->slot, entry->ticket);
    }
  }
  impl.wake.notify_one();
}

void EmulatedCommunicator::Impl::release_locked(size_t slot, uint32_t ticket) {
  uint32_t* flag = flags->host_word(slot * kFlagStride);
  const uint32_t current = __atomic_load_n(flag, __ATOMIC_RELAXED);
  // Cyclic compare, as the GEQ wait does: never move a flag backwards.
  if (static_cast<int32_t>(ticket - current) > 0) __atomic_store_n(flag, ticket, __ATOMIC_RELEASE);
}

void EmulatedCommunicator::Impl::release_all_locked() {
  turns.release_all(profiler::host_now_ns());
  for (size_t i = 0; i < slot_count; ++i) release_locked(i, slots[i].issued_ticket);
}

void EmulatedCommunicator::Impl::run_releaser() {
  std::unique_lock<std::mutex> lock(state_mutex);
  while (!stopping) {
    const std::optional<std::pair<int64_t, size_t>> next = turns.next_due();
    if (!next) {
      wake.wait(lock);
      continue;
    }
    const int64_t due_ns = next->first;
    const int64_t remaining = due_ns - profiler::host_now_ns();
    if (remaining > kSpinNs) {
      wake.wait_for(lock, std::chrono::nanoseconds(remaining - kSpinNs));
      continue;  // woken early by new work or at the spin point: look again
    }
    if (remaining > 0) {
      lock.unlock();
      while (profiler::host_now_ns() < due_ns) std::this_thread::yield();
      lock.lock();
      continue;  // an earlier entry may have arrived meanwhile
    }
    // Stamped before the flag is written: the stream can only pass (and stamp
    // its next collective's start) after this time. Starts the group's next
    // collective when its stream already reached it.
    const Entry& entry = entries[next->second];
    turns.release(entry.index, profiler::host_now_ns());
    release_locked(entry.slot, entry.ticket);
  }
}

void EmulatedCommunicator::Impl::abort(const std::string& message) {
  try {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (!aborted) {
      aborted = true;
      abort_message = message;
    }
    release_all_locked();
  } catch (...) {  // never throws (std::string copy)
  }
}

std::vector<EmulatedCommunicator::Issued> EmulatedCommunicator::Impl::issued() const {
  std::lock_guard<std::mutex> lock(state_mutex);
  std::vector<Issued> log;
  log.reserve(entries.size());
  for (const Entry& entry : entries) {
    const CollectiveTurns::Turn& t = turns.turn(entry.index);
    log.push_back(
        Issued{entry.kind, t.group, entry.bytes, t.duration_ns, t.start_ns, t.released_ns});
  }
  return log;
}

// ---- EmulatedCommunicator -----------------------------------------------------------

EmulatedCommunicator::EmulatedCommunicator(int rank, int world_size,
                                           std::vector<comm::Group> groups,
                                           CollectiveDuration duration)
    : rank_(rank), world_(world_size), groups_(std::move(groups)) {
  validate_groups(groups_, world_, rank_, "emulated");
  if (!duration) {
    throw comm::CommError("emulated communicator: rank " + std::to_string(rank_) +
                          ": no duration model given");
  }
  impl_ = std::make_unique<Impl>(rank_, std::move(duration));
}

EmulatedCommunicator::~EmulatedCommunicator() = default;

void EmulatedCommunicator::all_gather(int group, const void* send, void* recv, size_t count,
                                      plan::DType dt, cudaStream_t stream) {
  constexpr const char* kName = "all_gather";
  const int index = member_index(groups_, group, rank_, "emulated", kName);
  require_collective_dtype(dt, rank_, "emulated", kName);
  const uint64_t bytes = collective_bytes(count, dt, rank_, "emulated", kName);
  char* own_slot = static_cast<char*>(recv) + static_cast<uint64_t>(index) * bytes;
  impl_->issue(
      CollectiveKind::all_gather, group, groups_[static_cast<size_t>(group)], bytes, stream, [&] {
        if (bytes != 0 && own_slot != send) {
          SS_CUDA_CHECK(cudaMemcpyAsync(own_slot, send, bytes, cudaMemcpyDeviceToDevice, stream));
        }
      });
}

void EmulatedCommunicator::reduce_scatter(int group, const void* send, void* recv, size_t count,
                                          plan::DType dt, comm::ReduceOp op, cudaStream_t stream) {
  constexpr const char* kName = "reduce_scatter";
  const int index = member_index(groups_, group, rank_, "emulated", kName);
  require_collective_dtype(dt, rank_, "emulated", kName);
  const comm::Group& members = groups_[static_cast<size_t>(group)];
  const int group_size = static_cast<int>(members.ranks.size());
  const uint64_t bytes = collective_bytes(count, dt, rank_, "emulated", kName);
  const char* own_slot = static_cast<const char*>(send) + static_cast<uint64_t>(index) * bytes;
  impl_->issue(
      CollectiveKind::reduce_scatter, group, members, bytes * static_cast<uint64_t>(group_size),
      stream, [&] {
        if (bytes != 0 && own_slot != recv) {
          SS_CUDA_CHECK(cudaMemcpyAsync(recv, own_slot, bytes, cudaMemcpyDeviceToDevice, stream));
        }
        if (op == comm::ReduceOp::avg) {
          divide_in_place(recv, count, divide_element(dt), group_size, stream);
        }
      });
}

void EmulatedCommunicator::all_reduce(int group, void* data, size_t count, plan::DType dt,
                                      comm::ReduceOp op, cudaStream_t stream) {
  constexpr const char* kName = "all_reduce";
  member_index(groups_, group, rank_, "emulated", kName);
  require_collective_dtype(dt, rank_, "emulated", kName);
  const comm::Group& members = groups_[static_cast<size_t>(group)];
  const uint64_t bytes = collective_bytes(count, dt, rank_, "emulated", kName);
  impl_->issue(CollectiveKind::all_reduce, group, members, bytes, stream, [&] {
    if (op == comm::ReduceOp::avg) {
      divide_in_place(data, count, divide_element(dt), static_cast<int>(members.ranks.size()),
                      stream);
    }
  });
}

void EmulatedCommunicator::broadcast(int group, void* data, size_t bytes, int root,
                                     cudaStream_t stream) {
  (void)data;  // moves nothing: the root's data is not here
  root_index(groups_, group, root, rank_, "emulated", "broadcast");
  impl_->issue(CollectiveKind::broadcast, group, groups_[static_cast<size_t>(group)], bytes, stream,
               [] {});
}

void EmulatedCommunicator::abort(const std::string& message) {
  impl_->abort(message);
}

std::vector<EmulatedCommunicator::Issued> EmulatedCommunicator::issued() const {
  return impl_->issued();
}

}  // namespace shardscope::engine::cuda
