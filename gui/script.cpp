#include "gui/script.h"

#include <cmath>
#include <stdexcept>

namespace shardscope::gui {

double parse_time_ns(const std::string& text, const std::string& option) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || !std::isfinite(v))
    throw std::invalid_argument(option + ": '" + text + "' is not a time (250, 1.5us, 2ms, 0.1s)");
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "ns")
    scale = 1;
  else if (unit == "us")
    scale = 1e3;
  else if (unit == "ms")
    scale = 1e6;
  else if (unit == "s")
    scale = 1e9;
  else
    throw std::invalid_argument(option + ": unknown time unit '" + unit + "' (ns, us, ms, s)");
  return v * scale;
}

void parse_time_range(const std::string& text, const std::string& option, double* t0, double* t1) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos)
    throw std::invalid_argument(option + ": '" + text + "' is not a range A:B");
  *t0 = parse_time_ns(text.substr(0, colon), option);
  *t1 = parse_time_ns(text.substr(colon + 1), option);
  if (!(*t1 > *t0)) throw std::invalid_argument(option + ": the range end must follow its start");
}

void parse_size(const std::string& text, int* width, int* height) {
  const size_t x = text.find('x');
  size_t used_w = 0, used_h = 0;
  long w = 0, h = 0;
  try {
    if (x != std::string::npos) {
      w = std::stol(text.substr(0, x), &used_w);
      h = std::stol(text.substr(x + 1), &used_h);
    }
  } catch (const std::exception&) {
    used_w = 0;
  }
  if (x == std::string::npos || used_w != x || used_h != text.size() - x - 1 || w < 64 || h < 64 ||
      w > 16384 || h > 16384)
    throw std::invalid_argument("--size: '" + text + "' is not WxH with 64 <= W, H <= 16384");
  *width = static_cast<int>(w);
  *height = static_cast<int>(h);
}

void parse_select(const std::string& text, int* rank, std::string* name) {
  *rank = -1;
  *name = text;
  const size_t colon = text.find(':');
  if (colon != std::string::npos && colon > 0) {
    size_t used = 0;
    long r = -1;
    try {
      r = std::stol(text.substr(0, colon), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == colon && r >= 0) {
      *rank = static_cast<int>(r);
      *name = text.substr(colon + 1);
    }
  }
  if (name->empty()) throw std::invalid_argument("--select: no event name in '" + text + "'");
}

Tab parse_tab(const std::string& text) {
  if (text == "timeline") return Tab::timeline;
  if (text == "stats" || text == "statistics") return Tab::statistics;
  if (text == "compare") return Tab::compare;
  if (text == "sweep") return Tab::sweep;
  throw std::invalid_argument("--tab: '" + text + "' is not timeline, stats, compare or sweep");
}

const char* tab_name(Tab t) {
  switch (t) {
    case Tab::timeline:
      return "timeline";
    case Tab::statistics:
      return "stats";
    case Tab::compare:
      return "compare";
    case Tab::sweep:
      return "sweep";
  }
  return "?";
}

}  // namespace shardscope::gui
