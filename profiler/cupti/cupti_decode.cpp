// CUPTI activity records -> Recording. Record layouts are those of the CUPTI
// headers this is built against (CUDA 13.0: Kernel10, Memcpy6, Memset4,
// Memory4, Synchronization2, Marker2, ExternalCorrelation, Device5, API); newer
// CUPTI versions append fields, and the recorder refuses another major version.
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <iterator>
#include <memory>
#include <set>

#include "profiler/cupti/cupti_internal.h"

namespace shardscope::profiler::detail {

namespace {

CopyKind copy_kind(uint8_t cupti_kind) {
  switch (cupti_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return CopyKind::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return CopyKind::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return CopyKind::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return CopyKind::h2h;
    default:
      return CopyKind::other;
  }
}

const char* sync_name(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    default:
      return "synchronize";
  }
}

}  // namespace

std::string demangle_kernel_name(const char* name) {
  if (!name) return "";
  if (name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> plain(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && plain ? std::string(plain.get()) : std::string(name);
}

const std::string& RecordDecoder::demangled(const char* name) {
  auto it = names_.find(name);
  if (it != names_.end()) return it->second;
  return names_.emplace(name, demangle_kernel_name(name)).first->second;
}

void RecordDecoder::decode(uint8_t* buffer, size_t valid_bytes, Recording& out) {
  CUpti_Activity* record = nullptr;
  // Records whose start and end are both 0: CUPTI could not time them.
  auto untimed = [&](uint64_t start, uint64_t end) {
    if (start != 0 || end != 0) return false;
    ++out.untimed_records;
    return true;
  };
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        if (untimed(k->start, k->end)) break;
        KernelRecord r;
        r.start_ns = host_ns(k->start);
        r.end_ns = host_ns(k->end);
        r.device = k->deviceId;
        r.stream = k->streamId;
        r.correlation = k->correlationId;
        r.name = demangled(k->name);
        r.grid[0] = k->gridX;
        r.grid[1] = k->gridY;
        r.grid[2] = k->gridZ;
        r.block[0] = k->blockX;
        r.block[1] = k->blockY;
        r.block[2] = k->blockZ;
        r.graph_id = k->graphId;
        out.kernels.push_back(std::move(r));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        if (untimed(c->start, c->end)) break;
        CopyRecord r;
        r.start_ns = host_ns(c->start);
        r.end_ns = host_ns(c->end);
        r.device = c->deviceId;
        r.stream = c->streamId;
        r.correlation = c->correlationId;
        r.bytes = c->bytes;
        r.kind = copy_kind(c->copyKind);
        out.copies.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        if (untimed(m->start, m->end)) break;
        MemsetRecord r;
        r.start_ns = host_ns(m->start);
        r.end_ns = host_ns(m->end);
        r.device = m->deviceId;
        r.stream = m->streamId;
        r.correlation = m->correlationId;
        r.bytes = m->bytes;
        out.memsets.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
        // Device memory only: pinned host buffers (cudaHostAlloc) are not GPU memory.
        if (m->memoryKind != CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) break;
        if (m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
            m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
          break;
        if (untimed(m->timestamp, 0)) break;
        MemoryRecord r;
        r.time_ns = host_ns(m->timestamp);
        r.device = m->deviceId;
        r.address = m->address;
        r.bytes = m->bytes;
        r.allocation = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
        r.correlation = m->correlationId;
        r.is_async = m->isAsync != 0;
        const std::pair<uint32_t, uint64_t> key{r.device, r.address};
        if (r.allocation) {
          live_allocations_[key] = r.bytes;
        } else {
          auto live = live_allocations_.find(key);
          if (live != live_allocations_.end()) {
            if (r.bytes == 0) r.bytes = live->second;
            live_allocations_.erase(live);
          }
        }
        out.memory.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
        if (untimed(s->start, s->end)) break;
        SyncRecord r;
        r.start_ns = host_ns(s->start);
        r.end_ns = host_ns(s->end);
        r.stream = s->streamId;  // CUPTI_SYNCHRONIZATION_INVALID_VALUE (0xffffffff): none
        r.what = sync_name(s->type);
        out.syncs.push_back(std::move(r));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
        const int64_t t = host_ns(m->timestamp);
        // The thread that pushed it (push/pop ranges end on the same thread).
        const uint32_t thread =
            m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) {
          out.markers.push_back(
              MarkerRecord{t, t, m->name ? m->name : "", m->domain ? m->domain : "", thread});
        } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
          open_markers_[m->id] =
              MarkerRecord{t, t, m->name ? m->name : "", m->domain ? m->domain : "", thread};
        } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
          auto it = open_markers_.find(m->id);
          if (it == open_markers_.end()) break;  // started before recording began
          it->second.end_ns = t;
          out.markers.push_back(std::move(it->second));
          open_markers_.erase(it);
        }
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        if (!keep_launches_) break;
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        if (untimed(a->start, a->end)) break;
        out.launches.push_back(LaunchRecord{host_ns(a->start), a->correlationId, a->threadId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
          external_ids_[x->correlationId] = x->externalId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_DEVICE: {
        const auto* d = reinterpret_cast<const CUpti_ActivityDevice5*>(record);
        if (d->name) out.device_names[d->id] = d->name;
        break;
      }
      default:
        break;  // kinds we did not enable
    }
  }
}

void RecordDecoder::join_external_ids(Recording& out) const {
  if (external_ids_.empty()) return;
  auto external = [&](uint32_t correlation) -> uint64_t {
    auto it = external_ids_.find(correlation);
    return it == external_ids_.end() ? 0 : it->second;
  };
  for (KernelRecord& k : out.kernels)
    if (k.external_id == 0) k.external_id = external(k.correlation);
  for (CopyRecord& c : out.copies)
    if (c.external_id == 0) c.external_id = external(c.correlation);
  for (MemsetRecord& m : out.memsets)
    if (m.external_id == 0) m.external_id = external(m.correlation);
}

void name_devices_from_driver(Recording& out) {
  std::set<uint32_t> devices;
  for (const KernelRecord& k : out.kernels) devices.insert(k.device);
  for (const CopyRecord& c : out.copies) devices.insert(c.device);
  for (const MemsetRecord& m : out.memsets) devices.insert(m.device);
  for (const MemoryRecord& m : out.memory) devices.insert(m.device);
  for (auto it = devices.begin(); it != devices.end();)
    it = out.device_names.count(*it) ? devices.erase(it) : std::next(it);
  if (devices.empty()) return;
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!driver) return;
  // CUPTI's device ids are the driver's device ordinals.
  using GetName = decltype(&cuDeviceGetName);
  const auto get_name = reinterpret_cast<GetName>(dlsym(driver, "cuDeviceGetName"));
  for (uint32_t device : devices) {
    char name[256] = {};
    if (get_name && get_name(name, static_cast<int>(sizeof name - 1),
                             static_cast<CUdevice>(device)) == CUDA_SUCCESS)
      out.device_names[device] = name;
  }
  dlclose(driver);  // drops the reference RTLD_NOLOAD took; the driver stays loaded
}

}  // namespace shardscope::profiler::detail
