// The opcodes follow CPython's Lib/pickletools.py (their names and argument
// layouts); what each builds follows Lib/pickle.py's _Unpickler. Nothing is
// copied from either.
#include "traces/pickle_read.h"

#include <cstring>
#include <unordered_map>

#include "traces/error.h"
#include "traces/utf8.h"

namespace shardscope::traces::pickle {

namespace {

struct OpcodeInfo {
  uint8_t code;
  const char* name;
};

// Every opcode of protocols 0-5 (pickletools.opcodes).
constexpr OpcodeInfo kOpcodes[] = {
    {'(', "MARK"},
    {'.', "STOP"},
    {'0', "POP"},
    {'1', "POP_MARK"},
    {'2', "DUP"},
    {'F', "FLOAT"},
    {'I', "INT"},
    {'J', "BININT"},
    {'K', "BININT1"},
    {'L', "LONG"},
    {'M', "BININT2"},
    {'N', "NONE"},
    {'P', "PERSID"},
    {'Q', "BINPERSID"},
    {'R', "REDUCE"},
    {'S', "STRING"},
    {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},
    {'X', "BINUNICODE"},
    {'a', "APPEND"},
    {'b', "BUILD"},
    {'c', "GLOBAL"},
    {'d', "DICT"},
    {'}', "EMPTY_DICT"},
    {'e', "APPENDS"},
    {'g', "GET"},
    {'h', "BINGET"},
    {'i', "INST"},
    {'j', "LONG_BINGET"},
    {'l', "LIST"},
    {']', "EMPTY_LIST"},
    {'o', "OBJ"},
    {'p', "PUT"},
    {'q', "BINPUT"},
    {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},
    {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},
    {'G', "BINFLOAT"},
    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1"},
    {0x83, "EXT2"},
    {0x84, "EXT4"},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1"},
    {0x8b, "LONG4"},
    {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

std::string hex_byte(uint8_t b) {
  static const char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

// "opcode 0x63 'c' (GLOBAL)".
std::string describe_opcode(uint8_t code) {
  std::string s = "opcode " + hex_byte(code);
  if (code >= 0x20 && code < 0x7f) s += std::string(" '") + static_cast<char>(code) + "'";
  const char* name = opcode_name(code);
  s += *name ? std::string(" (") + name + ")" : std::string(" (no pickle opcode)");
  return s;
}

// Why a known opcode is refused.
const char* refusal_reason(uint8_t code) {
  switch (code) {
    case 'c':
    case 0x93:
      return "it imports a Python global";
    case 'R':
    case 'b':
    case 'i':
    case 'o':
    case 0x81:
    case 0x92:
      return "it builds or calls a Python object";
    case 0x82:
    case 0x83:
    case 0x84:
      return "it names an object through the extension registry";
    case 'P':
    case 'Q':
      return "it asks for a persistent object outside the pickle";
    case 0x97:
    case 0x98:
      return "it asks for an out-of-band buffer";
    case 0x8f:
    case 0x90:
    case 0x91:
    case 0x96:
      return "sets and bytearrays are not read";
    case 'I':
    case 'L':
    case 'F':
    case 'S':
    case 'V':
    case 'g':
    case 'p':
    case 'T':
    case 'U':
      return "text opcodes of protocols 0 and 1 are not read (write protocol 2 or higher)";
    case '0':
    case '1':
    case '2':
      return "stack manipulation is not read";
    default:
      return "it is not plain data";
  }
}

constexpr uint32_t kNoNode = 0xffffffffu;

}  // namespace

const char* opcode_name(uint8_t opcode) {
  for (const OpcodeInfo& o : kOpcodes)
    if (o.code == opcode) return o.name;
  return "";
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::real:
      return "float";
    case Kind::str:
      return "str";
    case Kind::bytes:
      return "bytes";
    case Kind::list:
      return "list";
    case Kind::tuple:
      return "tuple";
    case Kind::dict:
      return "dict";
  }
  return "?";
}

const Document::Node* Document::find(const Node& dict, std::string_view key) const {
  if (dict.kind != Kind::dict) return nullptr;
  const Node* found = nullptr;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Node& k = nodes_[dict.items[i]];
    if (k.kind == Kind::str && k.text == key) found = &nodes_[dict.items[i + 1]];
  }
  return found;
}

// One pass over the bytes: a stack of node ids, the MARK positions, the memo.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& file, const PickleLimits& limits)
      : in_(bytes), file_(file), limits_(limits) {
    if (limits_.max_depth > 255) limits_.max_depth = 255;  // Node::depth is 8 bits
  }

  Document run();

 private:
  [[noreturn]] void fail(ErrorKind kind, const std::string& detail) const {
    throw TraceError(kind, file_, "byte " + std::to_string(op_at_), detail);
  }
  [[noreturn]] void fail_here(const std::string& detail) const {
    fail(ErrorKind::malformed, describe_opcode(code_) + ": " + detail);
  }
  // The next n argument bytes of the current opcode.
  const char* take(uint64_t n) {
    if (n > in_.size() - pos_)
      fail(ErrorKind::truncated, describe_opcode(code_) + " needs " + std::to_string(n) +
                                     " byte(s) of argument; the pickle ends at byte " +
                                     std::to_string(in_.size()));
    const char* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint64_t take_le(int n) {
    const auto* p = reinterpret_cast<const unsigned char*>(take(static_cast<uint64_t>(n)));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }

  uint32_t make(Kind kind) {
    if (doc_.nodes_.size() >= limits_.max_values)
      fail(ErrorKind::malformed,
           "more than " + std::to_string(limits_.max_values) + " values (the limit)");
    Document::Node n;
    n.kind = kind;
    doc_.nodes_.push_back(std::move(n));
    referenced_.push_back(false);
    return static_cast<uint32_t>(doc_.nodes_.size() - 1);
  }
  void count_text(uint64_t n) {
    if (n > limits_.max_text_bytes - text_bytes_)
      fail(ErrorKind::malformed, "more than " + std::to_string(limits_.max_text_bytes) +
                                     " bytes of str and bytes (the limit)");
    text_bytes_ += n;
  }
  void push(uint32_t id) { stack_.push_back(id); }
  uint32_t pop() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail_here("needs a value and the stack is empty");
    const uint32_t id = stack_.back();
    stack_.pop_back();
    return id;
  }
  uint32_t top() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail_here("needs a value and the stack is empty");
    return stack_.back();
  }
  // The ids pushed since the last MARK, which is removed.
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) fail_here("needs a MARK and there is none");
    const size_t from = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return items;
  }
  // Puts `child` into container `parent`.
  void adopt(uint32_t parent, uint32_t child) {
    if (referenced_[parent])
      fail_here(
          "adds to a container after a memo reference to it: a structure that contains "
          "itself is not plain data");
    const uint32_t depth = static_cast<uint32_t>(doc_.nodes_[child].depth) + 1;
    Document::Node& p = doc_.nodes_[parent];
    if (depth > limits_.max_depth)
      fail_here("nesting deeper than " + std::to_string(limits_.max_depth) + " levels (the limit)");
    if (depth > p.depth) p.depth = static_cast<uint8_t>(depth);
    p.items.push_back(child);
  }
  void check_key(uint32_t key) {
    const Kind k = doc_.nodes_[key].kind;
    if (k == Kind::list || k == Kind::dict)
      fail_here(std::string("a dict key of type ") + kind_name(k) + " (unhashable in Python)");
  }
  uint32_t target(Kind want) {
    const uint32_t id = top();
    if (doc_.nodes_[id].kind != want)
      fail_here(std::string("needs a ") + kind_name(want) + " below its items, found a " +
                kind_name(doc_.nodes_[id].kind));
    return id;
  }
  void memo_put(uint64_t key) {
    const uint32_t id = top();
    if (memo_.size() >= limits_.max_values && memo_.count(key) == 0)
      fail_here("more memo entries than the value limit");
    memo_[key] = id;
  }
  void memo_get(uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail_here("memo entry " + std::to_string(key) + " was never stored");
    // Shared, not copied: the value cannot change any more (adopt() refuses
    // a referenced container), so sharing is what Python's memo gives.
    referenced_[it->second] = true;
    push(it->second);
  }
  void read_text(Kind kind, uint64_t n) {
    if (n > in_.size() - pos_) take(n);  // throws truncated
    count_text(n);
    const char* p = take(n);
    const std::string_view s(p, static_cast<size_t>(n));
    if (kind == Kind::str) {
      for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
          ++i;
          continue;
        }
        const size_t len = utf8_sequence_length(s, i);
        if (len == 0)
          fail_here("a str that is not UTF-8 (byte " + std::to_string(pos_ - n + i) + ")");
        i += len;
      }
    }
    const uint32_t id = make(kind);
    doc_.nodes_[id].text.assign(s.data(), s.size());
    push(id);
  }
  void push_int(int64_t v, Kind kind = Kind::integer) {
    const uint32_t id = make(kind);
    doc_.nodes_[id].integer = v;
    push(id);
  }
  void read_long(uint64_t n);

  std::string_view in_;
  const std::string& file_;
  PickleLimits limits_;
  Document doc_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::vector<bool> referenced_;  // per node: a memo reference copied it
  std::unordered_map<uint64_t, uint32_t> memo_;
  uint64_t text_bytes_ = 0;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  uint8_t code_ = 0;
};

void Reader::read_long(uint64_t n) {
  if (n > 8)
    fail_here("an integer of " + std::to_string(n) + " bytes: only 64-bit integers are read");
  const auto* p = reinterpret_cast<const unsigned char*>(take(n));
  uint64_t v = 0;
  for (uint64_t i = n; i-- > 0;) v = (v << 8) | p[i];
  if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
  int64_t s = 0;
  std::memcpy(&s, &v, sizeof s);
  push_int(s);
}

Document Reader::run() {
  if (in_.size() > limits_.max_file_bytes)
    throw TraceError(ErrorKind::malformed, file_, "",
                     "a pickle of " + std::to_string(in_.size()) +
                         " bytes: more than the limit of " +
                         std::to_string(limits_.max_file_bytes));
  if (in_.empty()) throw TraceError(ErrorKind::truncated, file_, "byte 0", "an empty file");
  for (;;) {
    if (pos_ >= in_.size())
      throw TraceError(ErrorKind::truncated, file_, "byte " + std::to_string(pos_),
                       "the pickle ends without a STOP opcode");
    op_at_ = pos_;
    code_ = static_cast<uint8_t>(in_[pos_++]);
    switch (code_) {
      case 0x80: {  // PROTO
        const uint64_t v = take_le(1);
        if (v > 5)
          fail(ErrorKind::unsupported_version,
               "pickle protocol " + std::to_string(v) + " (this reader knows 0 to 5)");
        break;
      }
      case 0x95: {  // FRAME: a length prefix only; the opcodes inside are read as usual
        const uint64_t n = take_le(8);
        if (n > in_.size() - pos_)
          fail(ErrorKind::truncated, "FRAME of " + std::to_string(n) + " bytes; " +
                                         std::to_string(in_.size() - pos_) + " are left");
        break;
      }
      case '.': {  // STOP
        if (!marks_.empty()) fail_here("a MARK is still open");
        if (stack_.size() != 1)
          fail_here("the stack holds " + std::to_string(stack_.size()) +
                    " values; a pickle ends with one");
        if (pos_ != in_.size())
          fail_here(std::to_string(in_.size() - pos_) + " byte(s) after the end of the pickle");
        doc_.root_ = stack_.back();
        return std::move(doc_);
      }
      case '(':  // MARK
        if (marks_.size() >= limits_.max_marks)
          fail_here("more than " + std::to_string(limits_.max_marks) + " open MARKs (the limit)");
        marks_.push_back(stack_.size());
        break;
      case '}':
        push(make(Kind::dict));
        break;
      case ']':
        push(make(Kind::list));
        break;
      case ')':
        push(make(Kind::tuple));
        break;
      case 'd': {  // DICT
        const std::vector<uint32_t> items = pop_mark();
        if (items.size() % 2) fail_here("an odd number of items (keys and values)");
        const uint32_t d = make(Kind::dict);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i % 2 == 0) check_key(items[i]);
          adopt(d, items[i]);
        }
        push(d);
        break;
      }
      case 'l':
      case 't': {  // LIST, TUPLE
        const std::vector<uint32_t> items = pop_mark();
        const uint32_t c = make(code_ == 'l' ? Kind::list : Kind::tuple);
        for (uint32_t item : items) adopt(c, item);
        push(c);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1-3
        const size_t n = static_cast<size_t>(code_ - 0x84);
        uint32_t items[3] = {kNoNode, kNoNode, kNoNode};
        for (size_t i = n; i-- > 0;) items[i] = pop();
        const uint32_t c = make(Kind::tuple);
        for (size_t i = 0; i < n; ++i) adopt(c, items[i]);
        push(c);
        break;
      }
      case 'a': {  // APPEND
        const uint32_t v = pop();
        adopt(target(Kind::list), v);
        break;
      }
      case 'e': {  // APPENDS
        const std::vector<uint32_t> items = pop_mark();
        const uint32_t list = target(Kind::list);
        for (uint32_t item : items) adopt(list, item);
        break;
      }
      case 's': {  // SETITEM
        const uint32_t v = pop();
        const uint32_t k = pop();
        const uint32_t d = target(Kind::dict);
        check_key(k);
        adopt(d, k);
        adopt(d, v);
        break;
      }
      case 'u': {  // SETITEMS
        const std::vector<uint32_t> items = pop_mark();
        if (items.size() % 2) fail_here("an odd number of items (keys and values)");
        const uint32_t d = target(Kind::dict);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i % 2 == 0) check_key(items[i]);
          adopt(d, items[i]);
        }
        break;
      }
      case 'N':
        push(make(Kind::none));
        break;
      case 0x88:
      case 0x89:
        push_int(code_ == 0x88 ? 1 : 0, Kind::boolean);
        break;
      case 'K':
        push_int(static_cast<int64_t>(take_le(1)));
        break;
      case 'M':
        push_int(static_cast<int64_t>(take_le(2)));
        break;
      case 'J': {
        const auto u = static_cast<uint32_t>(take_le(4));
        int32_t s = 0;
        std::memcpy(&s, &u, sizeof s);
        push_int(s);
        break;
      }
      case 0x8a:  // LONG1
        read_long(take_le(1));
        break;
      case 0x8b: {  // LONG4: the length is signed
        const auto n = static_cast<uint32_t>(take_le(4));
        if (n & 0x80000000u) fail_here("a negative length");
        read_long(n);
        break;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE 754 double
        const auto* p = reinterpret_cast<const unsigned char*>(take(8));
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        double d = 0;
        std::memcpy(&d, &bits, sizeof d);
        const uint32_t id = make(Kind::real);
        doc_.nodes_[id].real = d;
        push(id);
        break;
      }
      case 0x8c:
        read_text(Kind::str, take_le(1));
        break;
      case 'X':
        read_text(Kind::str, take_le(4));
        break;
      case 0x8d:
        read_text(Kind::str, take_le(8));
        break;
      case 'C':
        read_text(Kind::bytes, take_le(1));
        break;
      case 'B':
        read_text(Kind::bytes, take_le(4));
        break;
      case 0x8e:
        read_text(Kind::bytes, take_le(8));
        break;
      case 'q':
        memo_put(take_le(1));
        break;
      case 'r':
        memo_put(take_le(4));
        break;
      case 0x94:
        memo_put(memo_.size());
        break;
      case 'h':
        memo_get(take_le(1));
        break;
      case 'j':
        memo_get(take_le(4));
        break;
      default:
        if (*opcode_name(code_))
          fail_here(std::string("refused: ") + refusal_reason(code_) +
                    "; this reader takes plain data only (dict, list, tuple, str, bytes, int, "
                    "float, bool, None)");
        fail_here("not a pickle opcode");
    }
  }
}

Document read_pickle(std::string_view bytes, const std::string& file, const PickleLimits& limits) {
  Reader r(bytes, file, limits);
  return r.run();
}

}  // namespace shardscope::traces::pickle
