#include "gui/trace_doc.h"

#include <exception>
#include <utility>

#include "traces/trace_io.h"

namespace shardscope::gui {

const char* job_stage_name(JobStage s) {
  switch (s) {
    case JobStage::reading:
      return "reading";
    case JobStage::indexing:
      return "indexing";
    case JobStage::metrics:
      return "computing metrics";
    case JobStage::done:
      return "done";
  }
  return "?";
}

std::shared_ptr<TraceDoc> make_trace_doc(traces::Trace trace, const std::string& label,
                                         std::atomic<int>* stage) {
  auto doc = std::make_shared<TraceDoc>();
  doc->label = label;
  try {
    traces::validate(trace, label);
    if (stage) stage->store(static_cast<int>(JobStage::indexing));
    doc->trace = std::move(trace);
    doc->index = build_index(doc->trace);
    for (const traces::RankTrace& r : doc->trace.ranks) {
      doc->memory.push_back(build_memory_series(r, doc->index.origin_ns));
      doc->has_memory = doc->has_memory || !r.memory.empty();
    }
    if (stage) stage->store(static_cast<int>(JobStage::metrics));
    doc->metrics = traces::compute_metrics(doc->trace);
  } catch (const std::exception& e) {
    doc = std::make_shared<TraceDoc>();
    doc->label = label;
    doc->error = e.what();
  }
  if (stage) stage->store(static_cast<int>(JobStage::done));
  return doc;
}

std::shared_ptr<TraceDoc> load_trace_doc(const std::string& path, std::atomic<int>* stage) {
  traces::Trace t;
  try {
    t = traces::load_trace(path);
  } catch (const std::exception& e) {
    auto doc = std::make_shared<TraceDoc>();
    doc->label = path;
    doc->error = e.what();
    if (stage) stage->store(static_cast<int>(JobStage::done));
    return doc;
  }
  return make_trace_doc(std::move(t), path, stage);
}

TraceJob::TraceJob(std::string what, Work work)
    : what_(std::move(what)), started_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this, w = std::move(work)]() {
    std::shared_ptr<TraceDoc> doc;
    try {
      doc = w(&stage_);
    } catch (const std::exception& e) {
      doc = std::make_shared<TraceDoc>();
      doc->label = what_;
      doc->error = e.what();
    }
    result_ = std::move(doc);
    stage_.store(static_cast<int>(JobStage::done));
    done_.store(true, std::memory_order_release);
  });
}

TraceJob::~TraceJob() {
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<TraceDoc> TraceJob::take() {
  if (thread_.joinable()) thread_.join();
  return std::move(result_);
}

double TraceJob::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

}  // namespace shardscope::gui
