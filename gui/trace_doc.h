// A trace as the viewer holds it: the trace, its timeline index, memory
// series and metrics (computed by traces/ metric code only), or the error that
// kept it from loading. Loading runs on a worker thread (TraceJob) so huge
// traces show a progress indicator instead of a frozen window.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gui/lod.h"
#include "gui/memory_series.h"
#include "traces/metrics.h"
#include "traces/trace.h"

namespace shardscope::gui {

struct TraceDoc {
  std::string label;  // file path, or what was simulated
  traces::Trace trace;
  TraceIndex index;
  std::vector<MemorySeries> memory;  // per rank slot
  bool has_memory = false;           // some rank has memory records
  traces::Metrics metrics;
  // Non-empty: a simulated step that ran out of memory (why). It stops at the
  // failed allocation, so its times predict nothing and are not shown; the
  // peaks are those up to the failure. (A trace read from a file does not
  // say whether it fit: `simulate --trace` warns when writing such a trace.)
  std::string does_not_fit;
  std::string error;  // non-empty: nothing else is valid
  bool ok() const { return error.empty(); }
};

// What a job is doing, for the progress indicator.
enum class JobStage : int { reading = 0, indexing = 1, metrics = 2, done = 3 };
const char* job_stage_name(JobStage s);

// Validates, indexes and computes the metrics of a trace already in memory.
// Never throws: a failure is returned in TraceDoc::error.
std::shared_ptr<TraceDoc> make_trace_doc(traces::Trace trace, const std::string& label,
                                         std::atomic<int>* stage = nullptr);
// load_trace(path) then make_trace_doc. Never throws.
std::shared_ptr<TraceDoc> load_trace_doc(const std::string& path,
                                         std::atomic<int>* stage = nullptr);

// One background job producing a TraceDoc (a load, or a simulation).
class TraceJob {
 public:
  using Work = std::function<std::shared_ptr<TraceDoc>(std::atomic<int>* stage)>;
  TraceJob(std::string what, Work work);
  ~TraceJob();
  TraceJob(const TraceJob&) = delete;
  TraceJob& operator=(const TraceJob&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Valid once done(); the job keeps no reference afterwards.
  std::shared_ptr<TraceDoc> take();
  const std::string& what() const { return what_; }
  JobStage stage() const { return static_cast<JobStage>(stage_.load()); }
  double seconds() const;

 private:
  std::string what_;
  std::atomic<int> stage_{0};
  std::atomic<bool> done_{false};
  std::shared_ptr<TraceDoc> result_;
  std::chrono::steady_clock::time_point started_;
  std::thread thread_;
};

}  // namespace shardscope::gui
