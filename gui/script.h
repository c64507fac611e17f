// Parsing of the viewer's scripting options (--zoom, --select, --mem-time,
// --size, --tab). Pure; each throws std::invalid_argument naming the option.
#pragma once

#include <cstdint>
#include <string>

namespace shardscope::gui {

// "250" (ns), "1.5us", "2ms", "0.1s", "40ns" -> nanoseconds.
double parse_time_ns(const std::string& text, const std::string& option);
// "A:B" with A < B -> [A, B] in ns.
void parse_time_range(const std::string& text, const std::string& option, double* t0, double* t1);
// "1600x1000" -> width, height (each in [64, 16384]).
void parse_size(const std::string& text, int* width, int* height);
// "[RANK:]NAME": rank -1 when absent.
void parse_select(const std::string& text, int* rank, std::string* name);

enum class Tab : int { timeline = 0, statistics = 1, compare = 2, sweep = 3 };
// "timeline", "stats" (or "statistics"), "compare", "sweep".
Tab parse_tab(const std::string& text);
const char* tab_name(Tab t);

}  // namespace shardscope::gui
