// CuptiRecorder: CUPTI's activity API with asynchronous buffers.
//
// Threads: CUPTI calls buffer_requested / buffer_completed from its own
// worker thread and from whichever thread flushes; records are decoded under
// one process-wide lock into the active session's pending Recording, which
// take() moves out. The process-wide state is leaked on purpose: CUPTI may
// complete buffers while the process exits, after static destructors ran.
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "profiler/cupti/cupti_internal.h"
#include "profiler/host_clock.h"

namespace shardscope::profiler {

namespace {

struct Session {  // the recording in progress; at most one per process
  detail::RecordDecoder decoder;
  Recording pending;
  std::map<uint32_t, std::string> device_names;  // DEVICE records come once, at start
};

struct Globals {
  std::mutex mutex;
  Session* session = nullptr;  // guarded by mutex; null when no recorder is active
  std::atomic<size_t> buffer_bytes{0};
};

Globals& globals() {
  static Globals* g = new Globals;  // leaked, see above
  return *g;
}

constexpr size_t kBufferAlignment = 8;  // CUPTI's requirement for activity buffers
constexpr size_t kMinBufferBytes = 64 << 10;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  const size_t bytes = globals().buffer_bytes.load();
  void* p = nullptr;
  // On failure CUPTI gets no buffer and counts the records it drops.
  if (bytes == 0 || posix_memalign(&p, kBufferAlignment, bytes) != 0) p = nullptr;
  *buffer = static_cast<uint8_t*>(p);
  *size = p ? bytes : 0;
  *max_records = 0;  // as many as fit
}

// Adds CUPTI's dropped-record count (reset by reading it) to the session's
// recording; discarded when no session records. Since CUDA 6 buffers are
// global (context null, stream 0): the global count. Caller holds the lock.
void add_dropped_records(CUcontext context, uint32_t stream_id, Session* session) {
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS && session)
    session->pending.dropped_records += dropped;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                               size_t /*size*/, size_t valid_bytes) {
  Globals& g = globals();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.session) g.session->decoder.decode(buffer, valid_bytes, g.session->pending);
    // Read (and so reset) CUPTI's count even without a session, so that a
    // later session does not inherit drops from before it started.
    add_dropped_records(context, stream_id, g.session);
  }
  std::free(buffer);
}

void CUPTIAPI ignore_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

uint64_t CUPTIAPI host_timestamp() {
  return static_cast<uint64_t>(host_now_ns());
}

const char* kind_name(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return "cuptiActivityEnable(CONCURRENT_KERNEL)";
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return "cuptiActivityEnable(MEMCPY)";
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return "cuptiActivityEnable(MEMSET)";
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      return "cuptiActivityEnable(MEMORY2)";
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return "cuptiActivityEnable(SYNCHRONIZATION)";
    case CUPTI_ACTIVITY_KIND_MARKER:
      return "cuptiActivityEnable(MARKER)";
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      return "cuptiActivityEnable(EXTERNAL_CORRELATION)";
    case CUPTI_ACTIVITY_KIND_RUNTIME:
      return "cuptiActivityEnable(RUNTIME)";
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return "cuptiActivityEnable(DRIVER)";
    default:
      return "cuptiActivityEnable";
  }
}

}  // namespace

struct CuptiRecorder::Impl {
  CuptiConfig config;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::vector<CUpti_ActivityKind> enabled;
  std::unique_ptr<Session> session;
  uint32_t api_version = 0;
  std::string clock;

  // Undoes whatever start() got done; safe on a partly started recorder.
  void stop() {
    for (CUpti_ActivityKind kind : enabled) cuptiActivityDisable(kind);
    if (!enabled.empty()) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    enabled.clear();
    {
      Globals& g = globals();
      std::lock_guard<std::mutex> lock(g.mutex);
      if (g.session == session.get()) g.session = nullptr;
    }
    if (subscriber) cuptiUnsubscribe(subscriber);
    subscriber = nullptr;
  }
};

std::unique_ptr<CuptiRecorder> CuptiRecorder::start(const CuptiConfig& config) {
  if (config.buffer_bytes < kMinBufferBytes || config.buffer_bytes % kBufferAlignment != 0)
    throw ProfilerError("CuptiConfig::buffer_bytes = " + std::to_string(config.buffer_bytes) +
                        ": must be a multiple of 8 and at least 65536");
  Globals& g = globals();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.session)
      throw ProfilerError(
          detail::another_profiler_message("a CuptiRecorder of this process is already recording"));
  }

  std::unique_ptr<CuptiRecorder> recorder(new CuptiRecorder);
  recorder->impl_ = std::make_unique<Impl>();
  Impl& impl = *recorder->impl_;
  impl.config = config;
  struct StopOnThrow {
    Impl* impl;
    ~StopOnThrow() {
      if (impl) impl->stop();
    }
  } guard{&impl};

  detail::check_cupti(cuptiGetVersion(&impl.api_version), "cuptiGetVersion");
  if (impl.api_version / 10000 != CUPTI_API_VERSION / 10000)
    throw ProfilerError("CUPTI API version " + std::to_string(impl.api_version) +
                        " is loaded, but shardscope was built against " +
                        std::to_string(CUPTI_API_VERSION) +
                        ": activity record layouts differ between major versions; load the CUPTI "
                        "of CUDA " +
                        std::to_string(CUPTI_API_VERSION / 10000));

  // The subscriber slot: taken by Nsight tools and by Kineto (PyTorch's profiler).
  detail::check_cupti(cuptiSubscribe(&impl.subscriber, ignore_callback, nullptr), "cuptiSubscribe");

  // Timestamps on the host clock, registered before any kind is enabled.
  int64_t offset_ns = 0;
  if (cuptiActivityRegisterTimestampCallback(host_timestamp) == CUPTI_SUCCESS) {
    impl.clock = "host-monotonic (timestamp callback)";
  } else {
    uint64_t cupti_ns = 0;
    const int64_t before = host_now_ns();
    detail::check_cupti(cuptiGetTimestamp(&cupti_ns), "cuptiGetTimestamp");
    const int64_t after = host_now_ns();
    offset_ns = before + (after - before) / 2 - static_cast<int64_t>(cupti_ns);
    impl.clock = "host-monotonic (offset measured at start)";
  }

  g.buffer_bytes.store(config.buffer_bytes);
  detail::check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                      "cuptiActivityRegisterCallbacks");
  impl.session = std::make_unique<Session>();
  impl.session->decoder = detail::RecordDecoder(offset_ns, config.launches);
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.session)  // another thread won the race since the check above
      throw ProfilerError(
          detail::another_profiler_message("a CuptiRecorder of this process is already recording"));
    g.session = impl.session.get();
  }

  // DEVICE records only name the devices (take() asks the driver for names they
  // lack): CUPTI emits them when CUDA initialises, which may precede us.
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE) == CUPTI_SUCCESS)
    impl.enabled.push_back(CUPTI_ACTIVITY_KIND_DEVICE);
  std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                           CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                           CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
  // EXTERNAL_CORRELATION records precede API records only: without these two
  // kinds CUPTI writes none and push_external_id() tags nothing. They are also
  // the launch records (thread, time) of CuptiConfig::launches.
  if (config.external_correlation || config.launches) {
    kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
    kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  }
  if (config.memory) kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
  if (config.synchronization) kinds.push_back(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  if (config.nvtx) kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
  for (CUpti_ActivityKind kind : kinds) {
    detail::check_cupti(cuptiActivityEnable(kind), kind_name(kind));
    impl.enabled.push_back(kind);
  }
  guard.impl = nullptr;
  return recorder;
}

CuptiRecorder::~CuptiRecorder() {
  if (impl_) impl_->stop();
}

uint32_t CuptiRecorder::stream_id(void* cuda_stream) const {
  uint32_t id = 0;
  detail::check_cupti(
      cuptiGetStreamIdEx(nullptr, static_cast<CUstream>(cuda_stream), /*perThreadStream=*/0, &id),
      "cuptiGetStreamIdEx");
  return id;
}

void CuptiRecorder::push_external_id(uint64_t id) {
  detail::check_cupti(
      cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
      "cuptiActivityPushExternalCorrelationId");
}

void CuptiRecorder::pop_external_id() {
  uint64_t last = 0;
  detail::check_cupti(
      cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
      "cuptiActivityPopExternalCorrelationId");
}

bool CuptiRecorder::pop_external_id_noexcept() noexcept {
  uint64_t last = 0;
  return cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last) ==
         CUPTI_SUCCESS;
}

Recording CuptiRecorder::take() {
  // Not under the lock: flushing calls buffer_completed on this thread.
  detail::check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                      "cuptiActivityFlushAll");
  Recording out;
  {
    std::lock_guard<std::mutex> lock(globals().mutex);
    Session& s = *impl_->session;
    // Records dropped since the last completed buffer, or all of them when
    // CUPTI never got a buffer (allocation failed) and so never completed one.
    add_dropped_records(nullptr, 0, &s);
    out = std::move(s.pending);
    s.pending = Recording{};
    s.decoder.join_external_ids(out);
    for (auto& [id, name] : out.device_names) s.device_names[id] = name;
    out.device_names = s.device_names;
  }
  detail::name_devices_from_driver(out);
  out.cupti_api_version = impl_->api_version;
  out.clock = impl_->clock;
  std::stable_sort(
      out.memory.begin(), out.memory.end(),
      [](const MemoryRecord& a, const MemoryRecord& b) { return a.time_ns < b.time_ns; });
  return out;
}

}  // namespace shardscope::profiler
