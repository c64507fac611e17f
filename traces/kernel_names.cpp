#include "traces/kernel_names.h"

#include <cctype>

namespace shardscope::traces {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

// "_Z30ncclDevKernel_..." -> "ncclDevKernel_..." (the Itanium mangling of a
// plain function name: "_Z", its length in decimal, the name); other names unchanged.
std::string_view unmangled_prefix(std::string_view name) {
  if (!starts_with(name, "_Z")) return name;
  size_t i = 2;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  return i == 2 ? name : name.substr(i);
}

}  // namespace

bool is_nccl_kernel(std::string_view kernel_name) {
  return starts_with(unmangled_prefix(kernel_name), "nccl");
}

Category nccl_kernel_category(std::string_view kernel_name) {
  if (contains(kernel_name, "AllGather")) return Category::comm_all_gather;
  if (contains(kernel_name, "ReduceScatter")) return Category::comm_reduce_scatter;
  if (contains(kernel_name, "AllReduce")) return Category::comm_all_reduce;
  return Category::comm_other;  // Broadcast, Reduce, SendRecv, AllToAll, Generic...
}

Category kernel_category(std::string_view kernel_name) {
  return is_nccl_kernel(kernel_name) ? nccl_kernel_category(kernel_name) : Category::compute;
}

bool parse_profiler_step(std::string_view name, int64_t* number) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  if (!starts_with(name, kPrefix) || name.size() == kPrefix.size() ||
      name.size() > kPrefix.size() + 18)
    return false;
  int64_t n = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
    n = n * 10 + (name[i] - '0');
  }
  *number = n;
  return true;
}

}  // namespace shardscope::traces
