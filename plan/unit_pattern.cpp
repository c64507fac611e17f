#include "plan/unit_pattern.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "plan/error.h"
#include "plan/json_input.h"

namespace shardscope::plan {

namespace {

using ByteClass = std::bitset<256>;

// Parse tree. Nodes are appended children first, so a pass in index order
// sees every child before its parent (sizes are computed that way).
struct Node {
  enum class Kind : uint8_t { empty, byte_class, assert_begin, assert_end, concat, alt, repeat };
  Kind kind = Kind::empty;
  int cls = 0;                // byte_class: index into the class table
  int min = 0, max = 0;       // repeat: {min,max}; max = kUnbounded for * and +
  std::vector<int> children;  // concat, alt: in order; repeat: one
};
constexpr int kUnbounded = -1;

ByteClass class_of(char c) {
  ByteClass b;
  b.set(static_cast<unsigned char>(c));
  return b;
}

// \d \w \s as the "C" locale classifies bytes (std::regex_traits<char>):
// bytes >= 0x80 are none of them, so \D \W \S match them.
ByteClass escape_class(char e) {
  ByteClass b;
  for (int c = 0; c < 128; ++c) {
    const bool in = (e == 'd' || e == 'D')   ? std::isdigit(c) != 0
                    : (e == 'w' || e == 'W') ? (std::isalnum(c) != 0 || c == '_')
                                             : std::isspace(c) != 0;
    b.set(static_cast<size_t>(c), in);
  }
  return std::isupper(static_cast<unsigned char>(e)) ? ~b : b;
}

}  // namespace

// Parses a pattern into a Node tree with an explicit stack of open groups
// (never recursion on the input's nesting), then emits the Thompson NFA.
// Emission recurses over the tree, whose depth is at most 3 per group level
// (alternation, concatenation, repetition) and so bounded by the nesting limit.
class UnitPatternCompiler {
 public:
  UnitPatternCompiler(std::string_view pattern, const std::string& key, UnitPattern& out)
      : p_(pattern), key_(key), out_(out) {}

  // Syntax first (a linear scan that stops at the nesting limit), so that a
  // deeply nested pattern is named as such; then the length and the size.
  void compile() {
    for (size_t i = 0; i < p_.size(); ++i) {
      const auto c = static_cast<unsigned char>(p_[i]);
      if (c < 0x20 || c > 0x7e) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", c);
        fail(std::string("character ") + hex + " at offset " + std::to_string(i) +
             " is not supported (printable ASCII only)");
      }
    }
    const int root = parse();
    if (p_.size() > kMaxUnitPatternLength)
      fail("it is " + std::to_string(p_.size()) + " characters long, over the limit of " +
           std::to_string(kMaxUnitPatternLength) +
           " (name many units with a list of names instead)");
    const int64_t size = sizes(root) + 1;  // + match
    if (size > kMaxUnitPatternProgram)
      fail("its counted repetitions expand it to " +
           (size > kSizeCap ? "more than " + std::to_string(kSizeCap) : std::to_string(size)) +
           " NFA instructions, over the limit of " + std::to_string(kMaxUnitPatternProgram));
    out_.program_.reserve(static_cast<size_t>(size));
    emit(root);
    add(UnitPattern::Op::match);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    // Quoted as JSON, as the policy wrote it (at most kMaxQuotedInput
    // characters); a byte that is not UTF-8 (only from a caller that did not
    // read JSON) is quoted as U+FFFD rather than throwing.
    throw Error(key_ + ": " +
                quote_input(nlohmann::json(std::string(p_))
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) +
                " is not a valid regex: " + what);
  }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    fail(what + " at offset " + std::to_string(at));
  }

  int node(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }
  int class_node(const ByteClass& b) {
    out_.classes_.push_back(b);
    Node n;
    n.kind = Node::Kind::byte_class;
    n.cls = static_cast<int>(out_.classes_.size()) - 1;
    return node(std::move(n));
  }

  // One open group: its alternatives, each a sequence of nodes, and what the
  // last item of the current sequence is (a quantifier needs an atom).
  enum class Last : uint8_t { none, atom, quantified, anchor };
  struct Frame {
    std::vector<std::vector<int>> alternatives{{}};
    size_t open_at = 0;
    Last last = Last::none;
  };

  int close(Frame& f) {
    std::vector<int> alts;
    for (std::vector<int>& seq : f.alternatives) {
      if (seq.size() == 1) {
        alts.push_back(seq[0]);
      } else {
        Node n;
        n.kind = seq.empty() ? Node::Kind::empty : Node::Kind::concat;
        n.children = std::move(seq);
        alts.push_back(node(std::move(n)));
      }
    }
    if (alts.size() == 1) return alts[0];
    Node n;
    n.kind = Node::Kind::alt;
    n.children = std::move(alts);
    return node(std::move(n));
  }

  int parse() {
    std::vector<Frame> stack(1);
    size_t i = 0;
    auto push_item = [&](int id, Last kind) {
      stack.back().alternatives.back().push_back(id);
      stack.back().last = kind;
    };
    while (i < p_.size()) {
      const size_t at = i;
      const char c = p_[i++];
      switch (c) {
        case '(': {
          if (i < p_.size() && p_[i] == '?') {
            const std::string rest(p_.substr(i + 1, 2));
            if (!rest.empty() && rest[0] == ':') {
              i += 2;
            } else if (!rest.empty() && (rest[0] == '=' || rest[0] == '!')) {
              fail_at(at, "lookahead '(?" + rest.substr(0, 1) + "' is not supported");
            } else if (rest == "<=" || rest == "<!") {
              fail_at(at, "lookbehind '(?" + rest + "' is not supported");
            } else if (!rest.empty() && rest[0] == '<') {
              fail_at(at, "named groups '(?<name>' are not supported");
            } else {
              fail_at(at, "'(?' is not supported (only the non-capturing group '(?:')");
            }
          }
          if (static_cast<int>(stack.size()) > kMaxUnitPatternNesting)
            fail_at(at, "groups nest deeper than the limit of " +
                            std::to_string(kMaxUnitPatternNesting));
          stack.emplace_back();
          stack.back().open_at = at;
          break;
        }
        case ')': {
          if (stack.size() == 1) fail_at(at, "unmatched ')'");
          const int group = close(stack.back());
          stack.pop_back();
          push_item(group, Last::atom);
          break;
        }
        case '|':
          stack.back().alternatives.emplace_back();
          stack.back().last = Last::none;
          break;
        case '*':
        case '+':
        case '?':
        case '{':
          quantifier(at, i, stack.back());
          break;
        case '^':
        case '$': {
          Node n;
          n.kind = c == '^' ? Node::Kind::assert_begin : Node::Kind::assert_end;
          push_item(node(std::move(n)), Last::anchor);
          break;
        }
        case '.': {
          // ECMAScript: any character but a line terminator ('\n', '\r').
          ByteClass any;
          any.set();
          any.reset('\n');
          any.reset('\r');
          push_item(class_node(any), Last::atom);
          break;
        }
        case '[':
          push_item(class_node(bracket(at, i)), Last::atom);
          break;
        case '\\':
          push_item(class_node(escape(at, i, false).first), Last::atom);
          break;
        case ']':
        case '}':
          fail_at(at, std::string("unmatched '") + c + "' (write \\" + c + " for the character)");
        default:
          push_item(class_node(class_of(c)), Last::atom);
      }
    }
    if (stack.size() > 1)
      fail("missing ')' for the '(' at offset " + std::to_string(stack.back().open_at));
    return close(stack.back());
  }

  // At p_[at] one of * + ? {; i is past it. Wraps the last item in a repeat.
  void quantifier(size_t at, size_t& i, Frame& f) {
    int min = 0, max = kUnbounded;
    const char c = p_[at];
    if (c == '+') min = 1;
    if (c == '?') max = 1;
    if (c == '{') {
      auto number = [&](int& v) {
        const size_t start = i;
        int64_t n = 0;
        while (i < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i])) && n <= 1000000)
          n = n * 10 + (p_[i++] - '0');
        if (i == start) return false;
        if (n > kMaxUnitPatternRepeat)
          fail_at(at, "the count " + std::string(p_.substr(start, i - start)) +
                          " of a counted repetition is over the limit of " +
                          std::to_string(kMaxUnitPatternRepeat));
        v = static_cast<int>(n);
        return true;
      };
      bool ok = number(min);
      max = min;
      if (ok && i < p_.size() && p_[i] == ',') {
        ++i;
        if (!number(max)) max = kUnbounded;
      }
      if (!ok || i >= p_.size() || p_[i] != '}')
        fail_at(at,
                "'{' must start a counted repetition {m}, {m,} or {m,n} (write \\{ for the "
                "character)");
      ++i;
      if (max != kUnbounded && max < min)
        fail_at(at, "{" + std::to_string(min) + "," + std::to_string(max) +
                        "}: the minimum is above the maximum");
    }
    const std::string written(p_.substr(at, i - at));
    if (i < p_.size() && p_[i] == '?')
      fail_at(at, "the lazy quantifier '" + written + "?' is not supported");
    if (i < p_.size() && p_[i] == '+')
      fail_at(at, "the possessive quantifier '" + written + "+' is not supported");
    if (f.last == Last::none) fail_at(at, "nothing to repeat before '" + written + "'");
    if (f.last == Last::anchor) fail_at(at, "an anchor ('^', '$') cannot be repeated");
    if (f.last == Last::quantified)
      fail_at(at, "'" + written + "' follows another quantifier (group the first: (a*)" + written +
                      ")");
    Node n;
    n.kind = Node::Kind::repeat;
    n.min = min;
    n.max = max;
    n.children = {f.alternatives.back().back()};
    f.alternatives.back().back() = node(std::move(n));
    f.last = Last::quantified;
  }

  // An escape at p_[at] == '\\'; i is past the backslash. Returns the class
  // and whether it is a single character (a range endpoint in brackets).
  std::pair<ByteClass, bool> escape(size_t at, size_t& i, bool in_bracket) {
    if (i >= p_.size()) fail_at(at, "a trailing '\\' escapes nothing");
    const char e = p_[i++];
    const std::string written = std::string("\\") + e;
    switch (e) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S':
        return {escape_class(e), false};
      case 'f':
        return {class_of('\f'), true};
      case 'n':
        return {class_of('\n'), true};
      case 'r':
        return {class_of('\r'), true};
      case 't':
        return {class_of('\t'), true};
      case 'v':
        return {class_of('\v'), true};
      case 'b':
      case 'B':
        fail_at(at, in_bracket ? "the escape \\b (backspace) is not supported"
                               : "the word boundary " + written + " is not supported");
      case 'x':
      case 'u':
      case 'c':
        fail_at(at, "the escape " + written + " is not supported (write the character)");
      default:
        break;
    }
    if (std::isdigit(static_cast<unsigned char>(e)))
      fail_at(at, e == '0' ? std::string("the escape \\0 (NUL) is not supported")
                           : "the backreference " + written + " is not supported");
    if (std::isalpha(static_cast<unsigned char>(e))) fail_at(at, "unknown escape " + written);
    return {class_of(e), true};  // escaped punctuation or space: the character itself
  }

  // A bracket class at p_[at] == '['; i is past it.
  ByteClass bracket(size_t at, size_t& i) {
    ByteClass set;
    const bool negate = i < p_.size() && p_[i] == '^';
    if (negate) ++i;
    if (i < p_.size() && p_[i] == ']')
      fail_at(at, std::string("the empty class '") + (negate ? "[^]" : "[]") +
                      "' is not supported (write \\] for the character)");
    // One item: a character (range endpoint) or an escape class.
    auto item = [&]() -> std::pair<ByteClass, bool> {
      if (i >= p_.size()) fail("missing ']' for the '[' at offset " + std::to_string(at));
      const size_t item_at = i;
      const char c = p_[i++];
      if (c == '[')
        fail_at(item_at,
                "'[' inside a class is not supported (write \\[; POSIX classes such "
                "as [:alpha:] are not supported)");
      if (c == '\\') return escape(item_at, i, true);
      return {class_of(c), true};
    };
    auto single = [](const ByteClass& b) {
      for (size_t c = 0; c < 256; ++c)
        if (b.test(c)) return static_cast<unsigned char>(c);
      return static_cast<unsigned char>(0);
    };
    for (;;) {
      if (i >= p_.size()) fail("missing ']' for the '[' at offset " + std::to_string(at));
      if (p_[i] == ']') {
        ++i;
        break;
      }
      const size_t lo_at = i;
      const auto [lo, lo_single] = item();
      if (i + 1 < p_.size() && p_[i] == '-' && p_[i + 1] != ']') {
        ++i;
        const auto [hi, hi_single] = item();
        if (!lo_single || !hi_single)
          fail_at(lo_at,
                  "a range in a class cannot start or end at a class escape (\\d, \\w, "
                  "\\s; put '-' last for the character)");
        const unsigned char a = single(lo), b = single(hi);
        if (a > b) fail_at(lo_at, "the range is out of order");
        for (unsigned c = a; c <= b; ++c) set.set(c);
      } else {
        set |= lo;
      }
    }
    return negate ? ~set : set;
  }

  // Instructions each node emits, saturating at kSizeCap so that nested
  // counted repetitions cannot overflow: a node is at most 1000 x (cap + 1)
  // (a repeat) or 256 x cap plus 512 (an alternation), far below 2^63.
  static constexpr int64_t kSizeCap = 1'000'000'000'000;
  int64_t sizes(int root) {
    constexpr int64_t cap = kSizeCap;
    std::vector<int64_t> s(nodes_.size(), 0);
    for (size_t k = 0; k <= static_cast<size_t>(root); ++k) {
      const Node& n = nodes_[k];
      int64_t v = 0;
      switch (n.kind) {
        case Node::Kind::empty:
          break;
        case Node::Kind::byte_class:
        case Node::Kind::assert_begin:
        case Node::Kind::assert_end:
          v = 1;
          break;
        case Node::Kind::concat:
        case Node::Kind::alt:
          for (int c : n.children) v += s[static_cast<size_t>(c)];
          if (n.kind == Node::Kind::alt) v += 2 * (static_cast<int64_t>(n.children.size()) - 1);
          break;
        case Node::Kind::repeat: {
          const int64_t e = s[static_cast<size_t>(n.children[0])];
          if (n.max == kUnbounded)
            v = n.min == 0 ? e + 2 : n.min * e + 1;
          else
            v = n.min * e + (n.max - n.min) * (e + 1);
          break;
        }
      }
      s[k] = std::min(v, cap);
    }
    return s[static_cast<size_t>(root)];
  }

  int pc() const { return static_cast<int>(out_.program_.size()); }
  int add(UnitPattern::Op op, int x = 0, int y = 0) {
    out_.program_.push_back({op, x, y});
    return pc() - 1;
  }

  void emit(int id) {
    using Op = UnitPattern::Op;
    const Node& n = nodes_[static_cast<size_t>(id)];
    switch (n.kind) {
      case Node::Kind::empty:
        return;
      case Node::Kind::byte_class:
        add(Op::byte_class, n.cls);
        return;
      case Node::Kind::assert_begin:
        add(Op::assert_begin);
        return;
      case Node::Kind::assert_end:
        add(Op::assert_end);
        return;
      case Node::Kind::concat:
        for (int c : n.children) emit(c);
        return;
      case Node::Kind::alt: {
        std::vector<int> jumps;
        for (size_t b = 0; b + 1 < n.children.size(); ++b) {
          const int split = add(Op::split, pc() + 1);
          emit(n.children[b]);
          jumps.push_back(add(Op::jump));
          out_.program_[static_cast<size_t>(split)].y = pc();
        }
        emit(n.children.back());
        for (int j : jumps) out_.program_[static_cast<size_t>(j)].x = pc();
        return;
      }
      case Node::Kind::repeat: {
        const int body = n.children[0];
        if (n.max == kUnbounded && n.min == 0) {  // L: split body, out; body; jump L
          const int loop = add(Op::split, pc() + 1);
          emit(body);
          add(Op::jump, loop);
          out_.program_[static_cast<size_t>(loop)].y = pc();
          return;
        }
        if (n.max == kUnbounded) {  // min - 1 copies, then L: body; split L, out
          for (int k = 0; k + 1 < n.min; ++k) emit(body);
          const int loop = pc();
          emit(body);
          add(Op::split, loop, pc() + 1);
          return;
        }
        for (int k = 0; k < n.min; ++k) emit(body);
        std::vector<int> optional;  // each: split next copy, out
        for (int k = n.min; k < n.max; ++k) {
          optional.push_back(add(Op::split, pc() + 1));
          emit(body);
        }
        for (int s : optional) out_.program_[static_cast<size_t>(s)].y = pc();
        return;
      }
    }
  }

  std::string_view p_;
  const std::string& key_;
  UnitPattern& out_;
  std::vector<Node> nodes_;
};

UnitPattern::UnitPattern(std::string_view pattern, const std::string& key) : text_(pattern) {
  UnitPatternCompiler(pattern, key, *this).compile();
}

bool UnitPattern::matches(std::string_view name, int64_t* steps) const {
  const size_t states = program_.size();
  // mark[pc] == g: pc was visited in the closure of position g (each state at
  // most once per position, which bounds the steps).
  std::vector<int64_t> mark(states, -1);
  std::vector<int> current, next, stack;
  current.reserve(states);
  next.reserve(states);
  int64_t taken = 0;
  auto closure = [&](std::vector<int>& list, int start, size_t pos) {
    stack.push_back(start);
    while (!stack.empty()) {
      const int at = stack.back();
      stack.pop_back();
      const auto k = static_cast<size_t>(at);
      if (mark[k] == static_cast<int64_t>(pos)) continue;
      mark[k] = static_cast<int64_t>(pos);
      ++taken;
      const Inst& in = program_[k];
      switch (in.op) {
        case Op::jump:
          stack.push_back(in.x);
          break;
        case Op::split:
          stack.push_back(in.y);
          stack.push_back(in.x);
          break;
        case Op::assert_begin:
          if (pos == 0) stack.push_back(at + 1);
          break;
        case Op::assert_end:
          if (pos == name.size()) stack.push_back(at + 1);
          break;
        case Op::byte_class:
        case Op::match:
          list.push_back(at);
          break;
      }
    }
  };
  closure(current, 0, 0);
  for (size_t pos = 0; pos < name.size() && !current.empty(); ++pos) {
    const auto byte = static_cast<unsigned char>(name[pos]);
    next.clear();
    for (int at : current) {
      ++taken;
      const Inst& in = program_[static_cast<size_t>(at)];
      if (in.op == Op::byte_class && classes_[static_cast<size_t>(in.x)].test(byte))
        closure(next, at + 1, pos + 1);
    }
    std::swap(current, next);
  }
  // After the loop `current` holds the states after the whole name, or is
  // empty when some prefix left no thread alive.
  bool matched = false;
  for (int at : current) matched = matched || program_[static_cast<size_t>(at)].op == Op::match;
  if (steps) *steps = taken;
  return matched;
}

}  // namespace shardscope::plan
