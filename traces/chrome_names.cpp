#include "traces/chrome_names.h"

#include <algorithm>
#include <cctype>

#include "traces/chrome_export.h"

namespace shardscope::traces {

namespace {

constexpr const char* kNcclArgs = "(ncclDevComm*, unsigned long, ncclWork*)";

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool contains_ci(std::string_view s, std::string_view needle) {
  auto it = std::search(s.begin(), s.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != s.end();
}

}  // namespace

KinetoShown kineto_shown_as(const Event& e, std::string_view name, std::string_view op,
                            bool device) {
  if (!device || e.category == Category::host) {
    for (const char* cat :
         {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "mtia_runtime"})
      if (op == cat) return {cat, std::string(name), false};
    switch (e.category) {
      case Category::marker:
        return {"user_annotation", std::string(name), false};
      case Category::memcpy_h2d:
      case Category::memcpy_d2h:
      case Category::memcpy_d2d:
      case Category::memset:
      case Category::sync:
        return {"cuda_runtime", std::string(name), false};
      default:
        return {"cpu_op", std::string(name), false};
    }
  }
  auto keep_or = [&](const char* cat, std::string_view prefix,
                     std::string kineto_name) -> KinetoShown {
    if (starts_with(name, prefix)) return {cat, std::string(name), false};
    return {cat, std::move(kineto_name), true};
  };
  switch (e.category) {
    case Category::compute:
      return {"kernel", std::string(name), false};
    case Category::comm_all_gather:
    case Category::comm_reduce_scatter:
    case Category::comm_all_reduce:
    case Category::comm_other:
      return keep_or("kernel", "nccl", nccl_kernel_name(e.category, name));
    case Category::memcpy_h2d:
      return keep_or("gpu_memcpy", "Memcpy HtoD", "Memcpy HtoD (Host -> Device)");
    case Category::memcpy_d2h:
      return keep_or("gpu_memcpy", "Memcpy DtoH", "Memcpy DtoH (Device -> Host)");
    case Category::memcpy_d2d:
      return keep_or("gpu_memcpy", "Memcpy DtoD", "Memcpy DtoD (Device -> Device)");
    case Category::memset:
      return keep_or("gpu_memset", "Memset", "Memset (Device)");
    case Category::sync:
      return {"cuda_sync", std::string(name), false};
    case Category::marker:
      return {"gpu_user_annotation", std::string(name), false};
    case Category::host:
      break;  // handled above
  }
  return {"kernel", std::string(name), false};
}

std::string nccl_kernel_name(Category c, std::string_view name) {
  std::string k = "ncclDevKernel_";
  switch (c) {
    case Category::comm_all_gather:
      k += "AllGather_RING_LL";
      break;
    case Category::comm_reduce_scatter:
      k += "ReduceScatter_Sum_f32_RING_LL";
      break;
    case Category::comm_all_reduce:
      k += "AllReduce_Sum_f32_RING_LL";
      break;
    default:
      // NCCL runs point-to-point and all-to-all as grouped send/recv.
      k += contains_ci(name, "broadcast") ? "Broadcast_RING_LL" : "SendRecv";
  }
  return k + kNcclArgs;
}

}  // namespace shardscope::traces
