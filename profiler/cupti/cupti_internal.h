// Internal to shardscope_profiler_cupti (needs the CUPTI headers): error
// mapping and the decoder of CUPTI activity buffers.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "profiler/cupti/cupti_recorder.h"

namespace shardscope::profiler::detail {

// The message of a failed CUPTI call, with what the user can do about it:
// another profiler holding CUPTI (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
// CUPTI_ERROR_DISABLED), no CUDA driver (libcuda.so.1 not loadable), else
// CUPTI's own error string.
std::string cupti_failure(CUptiResult result, const char* call);
// Throws ProfilerError(cupti_failure(result, call)) unless result is CUPTI_SUCCESS.
void check_cupti(CUptiResult result, const char* call);
// The message shared by every "CUPTI is taken" error.
std::string another_profiler_message(const std::string& detail);
// True when libcuda.so.1 is loaded or loadable; otherwise *why holds dlerror().
bool cuda_driver_loadable(std::string* why);

// A kernel's name as CUPTI reports it, demangled when it is an Itanium-mangled
// C++ name ("_Z..."); other names (extern "C" kernels) as they are: `f` stays
// `f`, where __cxa_demangle would read it as the type `float`.
std::string demangle_kernel_name(const char* name);

// Decodes CUPTI activity buffers into a Recording. Not thread-safe: the
// recorder serialises calls under its lock.
class RecordDecoder {
 public:
  // offset added to every CUPTI timestamp (0 when CUPTI's timestamps already
  // come from profiler::host_now_ns through the timestamp callback).
  // keep_launches: RUNTIME and DRIVER records become Recording::launches
  // (CuptiConfig::launches); otherwise they are dropped.
  explicit RecordDecoder(int64_t timestamp_offset_ns = 0, bool keep_launches = false)
      : offset_ns_(timestamp_offset_ns), keep_launches_(keep_launches) {}

  void decode(uint8_t* buffer, size_t valid_bytes, Recording& out);
  // Sets external_id of records launched inside push_external_id() (CUPTI
  // reports the pairing in EXTERNAL_CORRELATION records, possibly in another
  // buffer than the kernel's, so this runs when records are taken).
  void join_external_ids(Recording& out) const;

 private:
  int64_t host_ns(uint64_t cupti_ns) const { return static_cast<int64_t>(cupti_ns) + offset_ns_; }
  const std::string& demangled(const char* name);

  int64_t offset_ns_;
  bool keep_launches_;
  std::unordered_map<const char*, std::string> names_;   // CUPTI's shared name pointers
  std::unordered_map<uint32_t, uint64_t> external_ids_;  // correlation id -> external id
  std::map<uint32_t, MarkerRecord> open_markers_;        // NVTX marker id -> its start
  // (device, address) -> bytes of live device allocations: a release record
  // without a size takes its allocation's.
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> live_allocations_;
};

// Fills out.device_names for the devices the records ran on that CUPTI named
// in no DEVICE record (those come at CUDA's initialisation, which may precede
// the recorder), from the driver already loaded in the process
// (cuDeviceGetName through dlsym; never loads the driver).
void name_devices_from_driver(Recording& out);

}  // namespace shardscope::profiler::detail
