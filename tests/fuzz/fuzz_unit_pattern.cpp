// libFuzzer target: the pattern language of overrides[i].units
// (plan/unit_pattern.h). The first line of the input is a pattern, each
// further line a unit name; the pattern itself, a long run of 'a' and the
// empty name are tried too. A pattern compiles or is refused with a
// plan::Error that names the key; a compiled one stays within the program
// limit, and every match stays within max_steps (the linear-time bound).
// Short patterns on short names are checked against std::regex_match
// (ECMAScript): where we compile, std::regex must compile and agree. The
// sizes (12 characters, 32 instructions, 4-character names) keep std::regex's
// backtracking cheap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "plan/error.h"
#include "plan/json_input.h"
#include "plan/unit_pattern.h"

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t eol = text.find('\n');
  const std::string pattern(text.substr(0, eol));
  std::vector<std::string> names = {"", pattern, std::string(300, 'a')};
  for (size_t start = eol; start != std::string_view::npos && start < text.size();) {
    const size_t end = text.find('\n', start + 1);
    names.emplace_back(
        text.substr(start + 1, end == std::string_view::npos ? end : end - start - 1));
    start = end;
  }
  const std::string key = "policy: overrides[0].units";
  try {
    const plan::UnitPattern p(pattern, key);
    if (p.program_size() > plan::kMaxUnitPatternProgram) std::abort();
    // std::regex backtracks: (a||){140} on a 1-character name and (.*|||.*)*Z
    // on a 6-character one ran past 10 s.
    const bool compare = pattern.size() <= 12 && p.program_size() <= 32;
    std::regex re;
    if (compare) re = std::regex(pattern, std::regex::ECMAScript);  // throws: a divergence
    for (const std::string& n : names) {
      int64_t steps = -1;
      const bool matched = p.matches(n, &steps);
      if (steps < 0 || steps > p.max_steps(n.size())) std::abort();
      if (compare && n.size() <= 4 && matched != std::regex_match(n, re)) std::abort();
    }
  } catch (const plan::Error& e) {
    const std::string what = e.what();
    if (what.rfind(key + ": ", 0) != 0 ||
        what.find(" is not a valid regex: ") == std::string::npos ||
        what.size() > 4 * plan::kMaxQuotedInput + 400)
      std::abort();
  }
  return 0;
}
