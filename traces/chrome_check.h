// Checks a Chrome trace (JSON) against the rules viewers rely on, so every
// export is verified in the tests and tools can vet third-party files.
// Rules (the `rule` of each issue):
//   json       valid JSON: an object with a "traceEvents" array, or an array of events
//   event      each event is an object with a string "ph" and a pid and tid (number or string)
//   ts         every event but metadata ("M") has a numeric ts
//   dur        every complete event ("X") has a numeric dur >= 0
//   begin_end  B/E balanced and nested per pid/tid (an E closes the latest open B, same name
//              when both are named)
//   overlap    complete events on one pid/tid are disjoint or nested, never partially overlapping
//   flow       flow starts ("s") and ends ("f"), and steps ("t"), pair up by id + cat + name:
//              exactly one s and one f per flow
//   counter    counter events ("C") have an args object of numbers only
//   control    no control characters (< 0x20) in any string, keys included
// Times are compared in integer nanoseconds (ts * 1000 rounded).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::traces {

struct ChromeIssue {
  std::string rule;
  std::string where;  // "/traceEvents/12"
  std::string message;
};

// At most `max_issues` issues; empty when the trace passes.
std::vector<ChromeIssue> check_chrome_trace(std::string_view text, size_t max_issues = 100);

// "rule at where: message" lines.
std::string format_chrome_issues(const std::vector<ChromeIssue>& issues);

}  // namespace shardscope::traces
