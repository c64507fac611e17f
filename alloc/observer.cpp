#include "alloc/observer.h"

namespace shardscope::alloc {

const char* event_kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::allocate:
      return "allocate";
    case EventKind::free:
      return "free";
    case EventKind::reusable:
      return "reusable";
    case EventKind::segment_alloc:
      return "segment_alloc";
    case EventKind::segment_release:
      return "segment_release";
    case EventKind::out_of_memory:
      return "out_of_memory";
  }
  return "unknown";
}

}  // namespace shardscope::alloc
