#include "engine/cuda/comm/nccl_communicator.h"

#include <nccl.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "engine/cuda/check.h"
#include "engine/cuda/comm/collective_args.h"

namespace shardscope::engine::cuda {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPollPeriod = std::chrono::milliseconds(1);

// The k-th NcclCommunicator made in this process uses store keys "nccl/<k>/...":
// every rank makes its communicators in the same order, so k agrees across
// ranks, and a store that outlives one communicator never serves a stale id.
std::atomic<uint64_t> next_generation{0};

std::string hex_encode(const ncclUniqueId& id) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * sizeof id.internal);
  for (char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    text += digits[byte >> 4];
    text += digits[byte & 0xf];
  }
  return text;
}

bool hex_decode(const std::string& text, ncclUniqueId& id) {
  if (text.size() != 2 * sizeof id.internal) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    const int high = nibble(text[2 * i]), low = nibble(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    id.internal[i] = static_cast<char>((high << 4) | low);
  }
  return true;
}

ncclDataType_t nccl_type(plan::DType dtype) {
  switch (dtype) {
    case plan::DType::bf16:
      return ncclBfloat16;
    case plan::DType::f16:
      return ncclFloat16;
    default:
      return ncclFloat32;  // require_collective_dtype ran first
  }
}

ncclRedOp_t nccl_op(comm::ReduceOp op) {
  return op == comm::ReduceOp::avg ? ncclAvg : ncclSum;
}

// Polls the communicator's state until it is not ncclInProgress, `deadline`
// passed or `stop` is set (then ncclInProgress is returned).
ncclResult_t wait_state(ncclComm_t nccl_comm, Clock::time_point deadline,
                        const std::atomic<bool>* stop = nullptr) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(nccl_comm, &state);
    if (queried != ncclSuccess) return queried;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline || (stop != nullptr && stop->load())) return ncclInProgress;
    std::this_thread::sleep_for(kPollPeriod);
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  Impl(int rank_of_world, int world_size, launch::TcpStore& rendezvous,
       std::chrono::milliseconds limit)
      : rank(rank_of_world),
        world(world_size),
        store(rendezvous),
        timeout(limit),
        generation(next_generation.fetch_add(1)) {}
  ~Impl();

  std::string key(const std::string& what) const {
    return "nccl/" + std::to_string(generation) + "/" + what;
  }
  std::string where(const char* collective) const {
    return std::string("nccl ") + collective + ": rank " + std::to_string(rank);
  }
  // "; rank 3 aborted: <message>" for each rank that left an abort record
  // (best effort: nothing when the store does not answer).
  std::string peer_aborts() const;
  void init_group(const comm::Group& group, int index, ncclComm_t& nccl_comm);
  ncclComm_t begin(const std::vector<comm::Group>& groups, int group, const char* collective);
  void check(ncclResult_t result, ncclComm_t nccl_comm, const comm::Group& group,
             const char* collective);

  const int rank, world;
  launch::TcpStore& store;
  const std::chrono::milliseconds timeout;
  const uint64_t generation;
  std::vector<ncclComm_t> comms;  // per group; nullptr where this rank is not a member
  std::mutex issue_mutex;         // collectives and abort()
  std::atomic<bool> aborted{false};
  std::string abort_message;  // issue_mutex
};

NcclCommunicator::Impl::~Impl() {
  // abort() already aborted (and cleared) the communicators. Otherwise flush
  // them (ncclCommFinalize, non-blocking: poll until quiescent) and destroy;
  // one that fails or takes longer than the timeout is aborted instead.
  for (ncclComm_t& nccl_comm : comms) {
    if (nccl_comm == nullptr) continue;
    const ncclResult_t finalized = ncclCommFinalize(nccl_comm);
    const ncclResult_t state = finalized == ncclSuccess || finalized == ncclInProgress
                                   ? wait_state(nccl_comm, Clock::now() + timeout)
                                   : finalized;
    if (state == ncclSuccess) {
      (void)ncclCommDestroy(nccl_comm);
    } else {
      (void)ncclCommAbort(nccl_comm);
    }
    nccl_comm = nullptr;
  }
}

std::string NcclCommunicator::Impl::peer_aborts() const {
  std::string text;
  try {
    for (int r = 0; r < world; ++r) {
      if (r == rank) continue;
      if (const auto message = store.try_get("abort/" + std::to_string(r))) {
        text += "; rank " + std::to_string(r) + " aborted: " + *message;
      }
    }
  } catch (const std::exception&) {
    text += "; the store did not answer";
  }
  return text;
}

void NcclCommunicator::Impl::init_group(const comm::Group& group, int index,
                                        ncclComm_t& nccl_comm) {
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string id_key = key(group.name);
  const int publisher = group.ranks.front();
  ncclUniqueId id{};
  if (rank == publisher) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    if (made != ncclSuccess) {
      throw comm::CommError(where("init") + ", group '" + group.name + "': ncclGetUniqueId: " +
                            ncclGetErrorString(made) + " (" + ncclGetLastError(nullptr) + ")");
    }
    store.set(id_key, hex_encode(id));
  } else {
    // Poll rather than block in get(): the communicator's own timeout applies,
    // and a publisher that aborted is reported at once.
    for (;;) {
      std::optional<std::string> text;
      try {
        text = store.try_get(id_key);
      } catch (const launch::LaunchError& e) {
        throw comm::CommError(where("init") + ", group '" + group.name +
                              "': the store failed: " + e.what());
      }
      if (text) {
        if (!hex_decode(*text, id)) {
          throw comm::CommError(where("init") + ", group '" + group.name + "': store key '" +
                                id_key + "' does not hold a hex-encoded ncclUniqueId");
        }
        break;
      }
      // One round trip per poll: the publisher's abort record only (every
      // rank's would cost W - 1 round trips each 10 ms, W^2 requests per
      // poll period at the store during the world's init); the message then
      // names every peer that aborted.
      bool publisher_aborted = false;
      try {
        publisher_aborted = store.try_get("abort/" + std::to_string(publisher)).has_value();
      } catch (const launch::LaunchError&) {
        publisher_aborted = true;  // the store is gone: say so below
      }
      if (publisher_aborted || Clock::now() >= deadline) {
        throw comm::CommError(where("init") + ", group '" + group.name + "': rank " +
                              std::to_string(publisher) + " did not publish the NCCL id ('" +
                              id_key + "') within " + std::to_string(timeout.count()) + " ms" +
                              peer_aborts());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking =
      0;  // init returns at once; we poll with a deadline (a dead peer: error, no hang)
  const ncclResult_t started =
      ncclCommInitRankConfig(&nccl_comm, static_cast<int>(group.ranks.size()), id, index, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    const std::string last = ncclGetLastError(nccl_comm);
    if (nccl_comm != nullptr) (void)ncclCommAbort(nccl_comm);
    nccl_comm = nullptr;
    throw comm::CommError(where("init") + ", group '" + group.name + "': ncclCommInitRankConfig: " +
                          ncclGetErrorString(started) + " (" + last + ")" + peer_aborts());
  }
  const ncclResult_t state = wait_state(nccl_comm, deadline);
  if (state != ncclSuccess) {
    const std::string last = ncclGetLastError(nccl_comm);
    (void)ncclCommAbort(nccl_comm);
    nccl_comm = nullptr;
    throw comm::CommError(where("init") + ", group '" + group.name + "': " +
                          (state == ncclInProgress
                               ? "ncclCommInitRankConfig did not complete within " +
                                     std::to_string(timeout.count()) +
                                     " ms (a member of the group did not join)"
                               : std::string("ncclCommInitRankConfig: ") +
                                     ncclGetErrorString(state) + " (" + last + ")") +
                          peer_aborts());
  }
}

ncclComm_t NcclCommunicator::Impl::begin(const std::vector<comm::Group>& groups, int group,
                                         const char* collective) {
  if (aborted.load()) {
    throw comm::CommError(where(collective) + ": aborted earlier: " + abort_message);
  }
  member_index(groups, group, rank, "nccl", collective);
  return comms[static_cast<size_t>(group)];
}

void NcclCommunicator::Impl::check(ncclResult_t result, ncclComm_t nccl_comm,
                                   const comm::Group& group, const char* collective) {
  if (result == ncclInProgress) result = wait_state(nccl_comm, Clock::now() + timeout, &aborted);
  if (result == ncclSuccess) return;
  const std::string detail =
      result == ncclInProgress
          ? std::string("not enqueued within ") + std::to_string(timeout.count()) + " ms or aborted"
          : std::string(ncclGetErrorString(result)) + " (" + ncclGetLastError(nccl_comm) + ")";
  throw comm::CommError(where(collective) + ", group '" + group.name + "': " + detail +
                        peer_aborts());
}

// ---- NcclCommunicator ---------------------------------------------------------------

NcclCommunicator::NcclCommunicator(int rank, int world_size, std::vector<comm::Group> groups,
                                   launch::TcpStore& store, std::chrono::milliseconds timeout)
    : rank_(rank), world_(world_size), groups_(std::move(groups)) {
  validate_groups(groups_, world_, rank_, "nccl");
  int device = 0;
  SS_CUDA_CHECK(cudaGetDevice(&device));  // CudaError without a driver or device
  impl_ = std::make_unique<Impl>(rank_, world_, store, timeout);
  impl_->comms.assign(groups_.size(), nullptr);
  // Same group order on every rank; a rank skips the groups it is not in.
  // Each init completes before the next starts, so the lowest-index group
  // not yet made always has all its members at it: no deadlock.
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<int>& ranks = groups_[g].ranks;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank_) impl_->init_group(groups_[g], static_cast<int>(i), impl_->comms[g]);
    }
  }
}

NcclCommunicator::~NcclCommunicator() = default;

void NcclCommunicator::all_gather(int group, const void* send, void* recv, size_t count,
                                  plan::DType dt, cudaStream_t stream) {
  constexpr const char* kName = "all_gather";
  std::lock_guard<std::mutex> lock(impl_->issue_mutex);
  ncclComm_t nccl_comm = impl_->begin(groups_, group, kName);
  require_collective_dtype(dt, rank_, "nccl", kName);
  impl_->check(ncclAllGather(send, recv, count, nccl_type(dt), nccl_comm, stream), nccl_comm,
               groups_[static_cast<size_t>(group)], kName);
}

void NcclCommunicator::reduce_scatter(int group, const void* send, void* recv, size_t count,
                                      plan::DType dt, comm::ReduceOp op, cudaStream_t stream) {
  constexpr const char* kName = "reduce_scatter";
  std::lock_guard<std::mutex> lock(impl_->issue_mutex);
  ncclComm_t nccl_comm = impl_->begin(groups_, group, kName);
  require_collective_dtype(dt, rank_, "nccl", kName);
  impl_->check(ncclReduceScatter(send, recv, count, nccl_type(dt), nccl_op(op), nccl_comm, stream),
               nccl_comm, groups_[static_cast<size_t>(group)], kName);
}

void NcclCommunicator::all_reduce(int group, void* data, size_t count, plan::DType dt,
                                  comm::ReduceOp op, cudaStream_t stream) {
  constexpr const char* kName = "all_reduce";
  std::lock_guard<std::mutex> lock(impl_->issue_mutex);
  ncclComm_t nccl_comm = impl_->begin(groups_, group, kName);
  require_collective_dtype(dt, rank_, "nccl", kName);
  impl_->check(ncclAllReduce(data, data, count, nccl_type(dt), nccl_op(op), nccl_comm, stream),
               nccl_comm, groups_[static_cast<size_t>(group)], kName);
}

void NcclCommunicator::broadcast(int group, void* data, size_t bytes, int root,
                                 cudaStream_t stream) {
  constexpr const char* kName = "broadcast";
  std::lock_guard<std::mutex> lock(impl_->issue_mutex);
  ncclComm_t nccl_comm = impl_->begin(groups_, group, kName);
  const int root_in_group = root_index(groups_, group, root, rank_, "nccl", kName);
  impl_->check(ncclBroadcast(data, data, bytes, ncclInt8, root_in_group, nccl_comm, stream),
               nccl_comm, groups_[static_cast<size_t>(group)], kName);
}

void NcclCommunicator::barrier() {
  if (impl_->aborted.load()) {
    std::lock_guard<std::mutex> lock(impl_->issue_mutex);
    throw comm::CommError(impl_->where("barrier") + ": aborted earlier: " + impl_->abort_message);
  }
  try {
    impl_->store.barrier(impl_->key("barrier"));
  } catch (const launch::LaunchError& e) {
    throw comm::CommError(impl_->where("barrier") + ": " + e.what() + impl_->peer_aborts());
  }
}

void NcclCommunicator::abort(const std::string& message) {
  impl_->aborted.store(true);  // a collective polling for enqueue gives up at once
  try {
    std::lock_guard<std::mutex> lock(impl_->issue_mutex);
    if (impl_->abort_message.empty()) impl_->abort_message = message;
    for (ncclComm_t& nccl_comm : impl_->comms) {
      if (nccl_comm != nullptr) (void)ncclCommAbort(nccl_comm);
      nccl_comm = nullptr;
    }
  } catch (...) {  // never throws
  }
  try {
    impl_->store.set("abort/" + std::to_string(rank_), message);
  } catch (...) {  // the store may be gone: peers then see NCCL errors or store timeouts
  }
}

void NcclCommunicator::check_async_errors() {
  std::lock_guard<std::mutex> lock(impl_->issue_mutex);
  if (impl_->aborted.load()) return;  // aborted: the caller is unwinding already
  for (size_t g = 0; g < impl_->comms.size(); ++g) {
    ncclComm_t nccl_comm = impl_->comms[g];
    if (nccl_comm == nullptr) continue;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(nccl_comm, &state);
    if (asked != ncclSuccess) state = asked;
    if (state == ncclSuccess || state == ncclInProgress) continue;
    throw comm::CommError(impl_->where("collective") + ", group '" + groups_[g].name +
                          "': asynchronous NCCL error " + ncclGetErrorString(state) + " (" +
                          ncclGetLastError(nccl_comm) + ")" + impl_->peer_aborts());
  }
}

std::string NcclCommunicator::version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return "NCCL " + std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace shardscope::engine::cuda
