// plan/unit_pattern.h: the pattern language of overrides[i].units. Matches
// are checked against std::regex_match (ECMAScript) on the supported subset;
// the catastrophic patterns that hung or crashed std::regex (issue 34) are
// checked to finish within the matcher's step bound.
#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/error.h"
#include "plan/policy.h"
#include "plan/unit_pattern.h"

using namespace shardscope;
using nlohmann::json;

namespace {

std::string compile_error(const std::string& pattern) {
  try {
    plan::UnitPattern p(pattern, "policy: overrides[0].units");
  } catch (const plan::Error& e) {
    return e.what();
  }
  return "";
}

// Every name in `names` matched by both matchers; returns the disagreements.
std::vector<std::string> disagreements(const std::string& pattern,
                                       const std::vector<std::string>& names) {
  const plan::UnitPattern ours(pattern, "k");
  const std::regex theirs(pattern, std::regex::ECMAScript);
  std::vector<std::string> out;
  for (const std::string& n : names) {
    int64_t steps = 0;
    const bool a = ours.matches(n, &steps);
    if (a != std::regex_match(n, theirs))
      out.push_back(pattern + " on '" + n + "': ours " + (a ? "true" : "false"));
    if (steps > ours.max_steps(n.size())) out.push_back(pattern + " on '" + n + "': steps");
  }
  return out;
}

const std::vector<std::string> kNames = {"",
                                         "a",
                                         "b",
                                         "aa",
                                         "aaa",
                                         "ab",
                                         "abab",
                                         "ba",
                                         "abc",
                                         "aaaa",
                                         "<root>",
                                         "layers.1",
                                         "model.layers.0",
                                         "model.layers.1",
                                         "model.layers.31",
                                         "model.norm",
                                         "transformer.h.0",
                                         "lm_head",
                                         "x_1",
                                         "A.1",
                                         "a-x",
                                         "-x",
                                         "x\xc3\xa9y",  // UTF-8 e-acute
                                         "x\ny",
                                         "x\ry",
                                         "a b\t",
                                         "]a",
                                         "a/b",
                                         "aaaaZ",
                                         "a]",
                                         "{}",
                                         "a{2}",
                                         "$",
                                         "^"};

}  // namespace

TEST_CASE("unit patterns: full-match results equal std::regex_match on a table", "[unit_pattern]") {
  // The existing tests' patterns (test_overrides.cpp, test_cli_plan.cpp), the
  // documented examples, and each construct of the language.
  const std::vector<std::string> patterns = {"model\\.layers\\..*",
                                             "layers\\..*",
                                             "model.layers.0",
                                             "<root>",
                                             ".*",
                                             "model\\.layers\\.(0|31)",
                                             "transformer\\.h\\.\\d+",
                                             "a",
                                             "a*",
                                             "a+",
                                             "a?",
                                             "(a|b)*c",
                                             "[a-z0-9_]+",
                                             "[^a]*",
                                             "[^.]+",
                                             "\\w+\\.\\d",
                                             "\\S\\s\\D\\W",
                                             "\\W+",
                                             "\\D*",
                                             "a{2}",
                                             "a{2,}",
                                             "a{2,3}",
                                             "a{0,1}b?",
                                             "(ab){0,2}",
                                             "(?:ab)+",
                                             "(a*)*",
                                             "(a*)+b",
                                             "(|a)b",
                                             "a|",
                                             "|",
                                             "()",
                                             "^ab$",
                                             "^a",
                                             "a$",
                                             "a^b",
                                             "$a",
                                             "a$|b",
                                             "^$",
                                             "[a-]x",
                                             "[-a]x",
                                             "[\\w-]+",
                                             "[\\]]a",
                                             "\\]a",
                                             "[\\-a]-x",
                                             "[a\\-z]-x",
                                             "a\\/b",
                                             "\\{\\}",
                                             "a\\{2\\}",
                                             "\\$",
                                             "\\^",
                                             "x.y",
                                             "a b\\t",
                                             "[\\s\\d]",
                                             "[^\\w]",
                                             "(a|aa)*",
                                             "(a|ab)(c|bcd)?",
                                             "[ -/]+",
                                             "(((a)))",
                                             "((a|b)(a|b)){2}",
                                             "[.]",
                                             "\\.",
                                             "x[^\\n]y"};
  for (const std::string& p : patterns) {
    INFO(p);
    CHECK(compile_error(p).empty());
    CHECK(disagreements(p, kNames).empty());
  }
  // The catastrophic patterns, against std::regex on names short enough for
  // its backtracking (it did not finish (.*.*)*Z on 15 characters in 60 s).
  std::vector<std::string> short_names;
  for (const std::string& n : kNames)
    if (n.size() <= 6) short_names.push_back(n);
  for (const char* p : {"(.*.*)*Z", "(a+)+$", "(a*)*b"}) {
    INFO(p);
    CHECK(disagreements(p, short_names).empty());
  }
  // A few by hand, so that the table cannot pass by agreeing on wrong answers.
  const plan::UnitPattern blocks("model\\.layers\\..*", "k");
  CHECK(blocks.matches("model.layers.31"));
  CHECK_FALSE(blocks.matches("<root>"));
  CHECK_FALSE(blocks.matches("xmodel.layers.0"));  // full match: no search
  CHECK(plan::UnitPattern("a{2,3}", "k").matches("aaa"));
  CHECK_FALSE(plan::UnitPattern("a{2,3}", "k").matches("aaaa"));
  CHECK(plan::UnitPattern(".", "k").matches("\xc3"));
  CHECK_FALSE(plan::UnitPattern(".", "k").matches("\n"));
}

TEST_CASE("unit patterns: random patterns agree with std::regex_match", "[unit_pattern]") {
  // Patterns of at most 8 atoms over {a, b, ., [ab], [^a]} with groups,
  // alternation and every quantifier; names of up to 4 characters over
  // {a, b, c}: all 121 of them. Short enough for std::regex to finish.
  const std::vector<std::string> atoms = {"a", "b", ".", "[ab]", "[^a]", "\\w", "^", "$"};
  const std::vector<std::string> quants = {"", "", "*", "+", "?", "{2}", "{0,2}", "{1,}"};
  std::vector<std::string> names = {""};
  for (size_t begin = 0, len = 0; len < 4; ++len) {
    const size_t end = names.size();
    for (size_t k = begin; k < end; ++k)
      for (char c : std::string("abc")) names.push_back(names[k] + c);
    begin = end;
  }
  REQUIRE(names.size() == 121);
  std::mt19937 rng(34);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string p;
    int open = 0;
    bool can_quantify = false;
    for (int atom = 0; atom < 8; ++atom) {
      const size_t what = pick(10);
      if (what == 0) {
        p += "(";
        ++open;
        can_quantify = false;
      } else if (what == 1 && open > 0 && can_quantify) {
        p += ")" + quants[pick(quants.size())];
        --open;
      } else if (what == 2) {
        p += "|";
        can_quantify = false;
      } else {
        const std::string a = atoms[pick(atoms.size())];
        p += a;
        can_quantify = a != "^" && a != "$";
        if (can_quantify) p += quants[pick(quants.size())];
      }
    }
    p += std::string(static_cast<size_t>(open), ')');
    INFO(p);
    REQUIRE(compile_error(p).empty());
    const std::vector<std::string> diff = disagreements(p, names);
    CHECK(diff.empty());
    if (!diff.empty()) INFO(diff[0]);
    ++checked;
  }
  CHECK(checked == 400);
}

TEST_CASE("unit patterns: catastrophic patterns finish within the step bound",
          "[unit_pattern][adversarial]") {
  // Under std::regex (backtracking) (a+)+$ takes time exponential in the
  // length of a name it fails on, and (.*.*)*Z did not finish on gpt2-tiny's
  // unit names in 60 s. Here a match costs at most 2 x program size x (name
  // length + 1) steps, and without counted repetition the program has at most
  // 2 x pattern length + 1 instructions.
  struct Case {
    std::string pattern, name;
    bool expected;
  };
  const std::string a5000(5000, 'a');
  const std::vector<Case> cases = {
      {"(a+)+$", a5000, true},
      {"(a+)+$", a5000 + "b", false},
      {"(.*.*)*Z", "transformer.h.0", false},
      {"(.*.*)*Z", std::string(5000, 'x'), false},
      {"(.*.*)*Z", std::string(5000, 'x') + "Z", true},
      {"(a|aa)*b", a5000, false},
      {"(a*)*(a*)*(a*)*c", a5000, false},
  };
  for (const Case& c : cases) {
    INFO(c.pattern << " on a name of " << c.name.size() << " characters");
    const plan::UnitPattern p(c.pattern, "k");
    CHECK(p.program_size() <= 2 * static_cast<int>(c.pattern.size()) + 1);
    int64_t steps = 0;
    CHECK(p.matches(c.name, &steps) == c.expected);
    CHECK(steps > 0);
    CHECK(steps <= p.max_steps(c.name.size()));
    // (2 x |pattern| + 1) instructions, 2 steps each per position.
    CHECK(steps <= 2 * (2 * static_cast<int64_t>(c.pattern.size()) + 1) *
                       (static_cast<int64_t>(c.name.size()) + 1));
  }
  // (a+)+$ compiles to a, split, split, assert_end, match: 5 instructions.
  CHECK(plan::UnitPattern("(a+)+$", "k").program_size() == 5);
}

TEST_CASE("unit patterns: limits and unsupported constructs are errors naming the construct",
          "[unit_pattern][errors]") {
  const std::string key = "policy: overrides[0].units: ";
  struct Case {
    std::string pattern, fragment;
  };
  const std::vector<Case> cases = {
      {std::string(257, 'a'), "it is 257 characters long, over the limit of 256"},
      {std::string(17, '(') + "a" + std::string(17, ')'),
       "groups nest deeper than the limit of 16 at offset 16"},
      {"(a|b){1000}", "expand it to 4001 NFA instructions, over the limit of 2048"},
      {"((((a{1000}){1000}){1000}){1000})",
       "expand it to more than 1000000000000 NFA instructions, over the limit of 2048"},
      {"((a{50}){50})", "expand it to 2501 NFA instructions, over the limit of 2048"},
      {"a{1001}", "the count 1001 of a counted repetition is over the limit of 1000"},
      {"a{99999999999999999999}", "over the limit of 1000"},
      {"a{3,2}", "{3,2}: the minimum is above the maximum"},
      {"a{", "'{' must start a counted repetition"},
      {"a{,2}", "'{' must start a counted repetition"},
      {"(a)\\1", "the backreference \\1 is not supported"},
      {"a\\0", "the escape \\0 (NUL) is not supported"},
      {"(?=a)a", "lookahead '(?=' is not supported"},
      {"(?!a)b", "lookahead '(?!' is not supported"},
      {"(?<=a)b", "lookbehind '(?<=' is not supported"},
      {"(?<!a)b", "lookbehind '(?<!' is not supported"},
      {"(?<n>a)", "named groups '(?<name>' are not supported"},
      {"(?i)a", "'(?' is not supported"},
      {"a*?", "the lazy quantifier '*?' is not supported"},
      {"a{2}?", "the lazy quantifier '{2}?' is not supported"},
      {"a++", "the possessive quantifier '++' is not supported"},
      {"a**", "'*' follows another quantifier"},
      {"*a", "nothing to repeat before '*' at offset 0"},
      {"(|+)", "nothing to repeat before '+'"},
      {"^*", "an anchor ('^', '$') cannot be repeated"},
      {"\\ba", "the word boundary \\b is not supported"},
      {"[\\b]", "the escape \\b (backspace) is not supported"},
      {"\\x41", "the escape \\x is not supported"},
      {"\\q", "unknown escape \\q"},
      {"a\\", "a trailing '\\' escapes nothing"},
      {"[[:alpha:]]", "'[' inside a class is not supported"},
      {"[]a]", "the empty class '[]' is not supported"},
      {"[^]", "the empty class '[^]' is not supported"},
      {"[z-a]", "the range is out of order at offset 1"},
      {"[\\w-z]", "a range in a class cannot start or end at a class escape"},
      {"[ab", "missing ']' for the '[' at offset 0"},
      {"((", "missing ')' for the '(' at offset 1"},
      {"a)", "unmatched ')' at offset 1"},
      {"a]", "unmatched ']'"},
      {"a}", "unmatched '}'"},
      {"caf\xc3\xa9", "character 0xc3 at offset 3 is not supported (printable ASCII only)"},
      {"a\tb", "character 0x09 at offset 1"},
      // Not UTF-8 (found by fuzz_unit_pattern: quoting it threw json type_error 316).
      {"(a|b){100\xb2\xb2}", "character 0xb2 at offset 9"},
  };
  for (const Case& c : cases) {
    INFO(c.pattern);
    const std::string e = compile_error(c.pattern);
    CHECK_THAT(e, Catch::StartsWith(key) && Catch::Contains(" is not a valid regex: ") &&
                      Catch::Contains(c.fragment));
  }
  // At the limits: accepted.
  CHECK(compile_error(std::string(256, 'a')).empty());
  CHECK(compile_error(std::string(16, '(') + "a" + std::string(16, ')')).empty());
  CHECK(compile_error("a{1000}").empty());
  CHECK(plan::UnitPattern("a{1000}", "k").program_size() == 1001);
  CHECK(plan::UnitPattern("a{1000}", "k").matches(std::string(1000, 'a')));
}

TEST_CASE("overrides: a regex nested 20,000 deep is refused when the policy is read",
          "[unit_pattern][overrides][adversarial]") {
  // std::regex recursed once per level and overflowed the stack (exit 139).
  const std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  const json doc = {{"overrides", {{{"units", deep}, {"reshard_after_forward", false}}}}};
  std::string e;
  try {
    (void)plan::policy_from_json(doc);
  } catch (const plan::Error& err) {
    e = err.what();
  }
  CHECK_THAT(e, Catch::StartsWith("policy: overrides[0].units: \"((((") &&
                    Catch::Contains("groups nest deeper than the limit of 16 at offset 16"));
  // A long pattern without nesting: the length limit is named.
  try {
    (void)plan::policy_from_json(
        {{"overrides", {{{"units", std::string(40000, 'a')}, {"reshard_after_forward", false}}}}});
    FAIL("accepted");
  } catch (const plan::Error& err) {
    CHECK_THAT(err.what(), Catch::Contains("policy: overrides[0].units: ") &&
                               Catch::Contains("40000 characters long, over the limit of 256"));
  }
}
