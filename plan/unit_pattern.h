// The pattern language of a policy's `overrides[i].units` (docs/policy.md,
// "Unit patterns"): a regular-expression subset matched in full against a
// unit name, as std::regex_match with ECMAScript syntax does, but compiled to
// a Thompson NFA and run as a state-set simulation. Matching a name of length
// L costs at most 2 x program_size() x (L + 1) steps whatever the pattern
// (no backtracking, no recursion), and compiling is linear in the pattern.
//
// Supported: literal characters (printable ASCII), `.`, classes `[a-z0-9_]`
// and `[^...]`, the escapes \d \D \w \W \s \S \f \n \r \t \v and escaped
// punctuation (`\.`), groups `(...)` and `(?:...)`, alternation `|`, the
// quantifiers `*` `+` `?` `{m}` `{m,}` `{m,n}`, and the anchors `^` `$`
// (which a full match makes redundant at the ends). Everything else
// (backreferences, lookaround, lazy or possessive quantifiers, named groups,
// word boundaries, \x/\u/\c escapes, POSIX bracket classes, non-ASCII
// characters) is an error naming the construct, never a different meaning.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::plan {

// Limits, each named with the key in its error message. A pattern names a few
// units of one model: the longest real ones are alternations of layer indices
// (`model\.layers\.(0|1|...|39)`, 130 characters); a list of names
// (`"units": [...]`) has no limit and names any set of units exactly.
constexpr size_t kMaxUnitPatternLength = 256;  // characters
constexpr int kMaxUnitPatternNesting = 16;     // open groups at once
// Instructions after expanding counted repetition (`(a|b){100}` repeats its
// body 100 times). Without {m,n} a pattern compiles to at most 2 x length + 1
// instructions (513 at the length limit); this leaves room for counted
// repetition while a match of a 100-character name stays under 2 x 2048 x 101
// = 413,696 steps.
constexpr int kMaxUnitPatternProgram = 2048;
constexpr int kMaxUnitPatternRepeat = 1000;  // m and n of {m,n}

class UnitPattern {
 public:
  // Throws plan::Error "<key>: <pattern quoted>: <what is wrong> at offset i"
  // when the pattern is malformed, unsupported or over a limit (the limit
  // and the value named).
  UnitPattern(std::string_view pattern, const std::string& key);

  // True when the pattern matches the whole name (std::regex_match). `steps`
  // (optional) receives the simulation steps taken: NFA states visited plus
  // threads advanced, at most max_steps(name.size()).
  bool matches(std::string_view name, int64_t* steps = nullptr) const;

  const std::string& text() const { return text_; }
  int program_size() const { return static_cast<int>(program_.size()); }
  int64_t max_steps(size_t name_length) const {
    return 2 * static_cast<int64_t>(program_.size()) * (static_cast<int64_t>(name_length) + 1);
  }

 private:
  enum class Op : uint8_t { byte_class, split, jump, assert_begin, assert_end, match };
  struct Inst {
    Op op = Op::match;
    int x = 0;  // split: first target; jump: target; byte_class: class index
    int y = 0;  // split: second target
  };
  friend class UnitPatternCompiler;
  std::string text_;
  std::vector<Inst> program_;
  std::vector<std::bitset<256>> classes_;  // byte_class operands, indexed by Inst::x
};

}  // namespace shardscope::plan
