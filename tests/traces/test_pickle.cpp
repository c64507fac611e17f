// The plain-data pickle reader and the protocol 2 writer
// (traces/pickle_read.h, traces/pickle_write.h): exact values of pickles
// CPython made, refusals naming the opcode and its byte, the bounds, and the
// writer's output read back.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>

#include "traces/error.h"
#include "traces/pickle_read.h"
#include "traces/pickle_write.h"

using namespace shardscope::traces;
using namespace shardscope::traces::pickle;

namespace {

// A string literal with its NUL bytes (without the terminating one).
template <size_t N>
std::string raw(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const Document::Node& at(const Document& d, const Document::Node& n, size_t i) {
  REQUIRE(i < n.items.size());
  return d.node(n.items[i]);
}

// The message of the TraceError read_pickle throws on `bytes`.
std::string refusal(const std::string& bytes, const PickleLimits& limits = {}) {
  try {
    read_pickle(bytes, "x.pickle", limits);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "(accepted)";
}

// pickle.dumps({'a': [1, -2, 3.5, None, True, False, 'é', b'xy', (1, 2), (), (7,)],
//   'big': 2**40, 'neg': -2**40, 'i32': -70000, 'max': 2**63 - 1, 'min': -2**63}, 4)
// (CPython 3.11): FRAME, MEMOIZE, SHORT_BINUNICODE, BININT1, BININT, BINFLOAT,
// NONE, NEWTRUE/NEWFALSE, SHORT_BINBYTES, TUPLE2, EMPTY_TUPLE, TUPLE1, LONG1,
// APPENDS, SETITEMS.
const char* kValues =
    "8004957c000000000000007d94288c0161945d94284b014afeffffff47400c0000000000004e88898c02c3a99443"
    "027879944b014b028694294b078594658c03626967948a060000000000018c036e6567948a060000000000ff8c03"
    "693332944a90eefeff8c036d6178948a08ffffffffffffff7f8c036d696e948a080000000000000080752e";

}  // namespace

TEST_CASE("pickle: every plain type CPython writes at protocol 4 reads back exactly") {
  const Document d = read_pickle(unhex(kValues));
  const Document::Node& root = d.node(d.root());
  REQUIRE(root.kind == Kind::dict);
  CHECK(root.items.size() == 12);
  const Document::Node* a = d.find(root, "a");
  REQUIRE(a);
  REQUIRE(a->kind == Kind::list);
  REQUIRE(a->items.size() == 11);
  CHECK(at(d, *a, 0).integer == 1);
  CHECK(at(d, *a, 1).integer == -2);
  CHECK(at(d, *a, 2).kind == Kind::real);
  CHECK(at(d, *a, 2).real == 3.5);
  CHECK(at(d, *a, 3).kind == Kind::none);
  CHECK(at(d, *a, 4).kind == Kind::boolean);
  CHECK(at(d, *a, 4).integer == 1);
  CHECK(at(d, *a, 5).integer == 0);
  CHECK(at(d, *a, 6).kind == Kind::str);
  CHECK(at(d, *a, 6).text == "\xc3\xa9");
  CHECK(at(d, *a, 7).kind == Kind::bytes);
  CHECK(at(d, *a, 7).text == "xy");
  CHECK(at(d, *a, 8).kind == Kind::tuple);
  CHECK(at(d, at(d, *a, 8), 1).integer == 2);
  CHECK(at(d, *a, 9).items.empty());
  CHECK(at(d, at(d, *a, 10), 0).integer == 7);
  CHECK(d.find(root, "big")->integer == (int64_t{1} << 40));
  CHECK(d.find(root, "neg")->integer == -(int64_t{1} << 40));
  CHECK(d.find(root, "i32")->integer == -70000);
  CHECK(d.find(root, "max")->integer == INT64_MAX);
  CHECK(d.find(root, "min")->integer == INT64_MIN);
  CHECK(root.depth == 3);  // dict > list > tuple > int
  CHECK(d.find(root, "absent") == nullptr);
}

TEST_CASE("pickle: a memo reference (BINGET) shares the value memoized") {
  // s = 'shared'; l = [s, 5]; pickle.dumps([l, l, s], 4)
  const Document d =
      read_pickle(unhex("80049518000000000000005d94285d94288c06736861726564944b056568016802652e"));
  const Document::Node& root = d.node(d.root());
  REQUIRE(root.items.size() == 3);
  for (size_t i = 0; i < 2; ++i) {
    const Document::Node& l = at(d, root, i);
    REQUIRE(l.items.size() == 2);
    CHECK(at(d, l, 0).text == "shared");
    CHECK(at(d, l, 1).integer == 5);
  }
  CHECK(at(d, root, 2).text == "shared");
  CHECK(root.items[0] == root.items[1]);  // one node, as Python has one object
  CHECK(d.size() == 4);                   // the outer list, l, "shared" and 5
}

TEST_CASE(
    "pickle: opcodes that import, call or build objects are refused, naming opcode and byte") {
  struct Case {
    std::string bytes;
    const char* names;
  };
  const Case cases[] = {
      {raw("\x80\x02") + "cos\nsystem\n.", "opcode 0x63 'c' (GLOBAL)"},
      {raw("\x80\x04\x8c\x02os\x8c\x06system\x93."), "opcode 0x93 (STACK_GLOBAL)"},
      {raw("\x80\x02N)R."), "opcode 0x52 'R' (REDUCE)"},
      {raw("\x80\x02N}b."), "opcode 0x62 'b' (BUILD)"},
      {raw("\x80\x02(ios\nsystem\n."), "opcode 0x69 'i' (INST)"},
      {raw("\x80\x02(No."), "opcode 0x6f 'o' (OBJ)"},
      {raw("\x80\x02N)\x81."), "opcode 0x81 (NEWOBJ)"},
      {raw("\x80\x04N)}\x92."), "opcode 0x92 (NEWOBJ_EX)"},
      {raw("\x80\x02\x82\x01."), "opcode 0x82 (EXT1)"},
      {raw("\x80\x02\x83\x01\x00."), "opcode 0x83 (EXT2)"},
      {raw("\x80\x02\x84\x01\x00\x00\x00."), "opcode 0x84 (EXT4)"},
      {raw("\x80\x02Pid\n."), "opcode 0x50 'P' (PERSID)"},
      {raw("\x80\x02NQ."), "opcode 0x51 'Q' (BINPERSID)"},
      {raw("\x80\x05\x97."), "opcode 0x97 (NEXT_BUFFER)"},
      {raw("\x80\x04\x8f."), "opcode 0x8f (EMPTY_SET)"},
      {raw("\x80\x02I1\n."), "opcode 0x49 'I' (INT)"},
  };
  for (const Case& c : cases) {
    INFO(c.names);
    const std::string what = refusal(c.bytes);
    CHECK_THAT(what, Catch::Contains(c.names));
    CHECK_THAT(what, Catch::StartsWith("x.pickle: byte "));
    CHECK_THAT(what, Catch::Contains("refused"));
  }
  // The offset is the opcode's: REDUCE is the fourth byte.
  CHECK_THAT(refusal(raw("\x80\x02N)R.")),
             Catch::StartsWith("x.pickle: byte 4: opcode 0x52 'R' (REDUCE): refused: it builds or "
                               "calls a Python object"));
  CHECK_THAT(refusal(raw("\x80\x02\xff.")),
             Catch::Contains("byte 2: opcode 0xff (no pickle opcode): not a pickle opcode"));
}

TEST_CASE("pickle: truncated and malformed pickles are typed errors at every cut") {
  const std::string good = unhex(kValues);
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("cut at " << n);
    CHECK_THROWS_AS(read_pickle(good.substr(0, n)), TraceError);
  }
  CHECK_THAT(refusal(good.substr(0, 40)),
             Catch::StartsWith("x.pickle: byte 2: FRAME of 124 bytes; 29 are left"));
  CHECK_THAT(refusal(raw("\x80\x02N")), Catch::Contains("byte 3: the pickle ends without a STOP"));
  CHECK_THAT(refusal(raw("\x80\x02X\x10\x00\x00\x00"
                         "ab")),
             Catch::Contains("byte 2: opcode 0x58 'X' (BINUNICODE) needs 16 byte(s) of argument"));
  CHECK_THAT(refusal(raw("\x80\x06N.")), Catch::Contains("pickle protocol 6"));
  CHECK_THAT(refusal(raw("\x80\x02NN.")), Catch::Contains("the stack holds 2 values"));
  CHECK_THAT(refusal(raw("\x80\x02N.N")), Catch::Contains("1 byte(s) after the end"));
  CHECK_THAT(refusal(raw("\x80\x02X\x01\x00\x00\x00\xff.")),
             Catch::Contains("a str that is not UTF-8"));
  CHECK_THAT(refusal(raw("\x80\x02}]K\x01s.")),
             Catch::Contains("a dict key of type list (unhashable in Python)"));
  CHECK_THAT(refusal(raw("\x80\x02h\x07.")), Catch::Contains("memo entry 7 was never stored"));
  CHECK_THAT(refusal(raw("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.")),
             Catch::Contains("an integer of 9 bytes"));
}

TEST_CASE("pickle: a list that contains itself is refused, one referenced twice is not") {
  // L = []; L.append(L); pickle.dumps(L, 4) without the frame:
  // EMPTY_LIST MEMOIZE BINGET 0 APPEND STOP.
  CHECK_THAT(refusal(raw("\x80\x04]\x94h\x00\x61.")),
             Catch::Contains("byte 6: opcode 0x61 'a' (APPEND): adds to a container after a memo "
                             "reference to it"));
  // L = [[L]]: the inner list takes a copy of L, then L takes the inner list.
  CHECK_THAT(refusal(raw("\x80\x04]\x94]\x94h\x00\x61\x61.")),
             Catch::Contains("byte 9: opcode 0x61"));
  // l = [1]; pickle.dumps((l, [l]), 4): l is still on the stack when the
  // inner list references it; nothing changes l afterwards.
  const std::string shared = raw("\x80\x04]\x94K\x01\x61]\x94h\x00\x61\x86\x94.");
  const Document d = read_pickle(shared);
  const Document::Node& root = d.node(d.root());
  REQUIRE(root.kind == Kind::tuple);
  CHECK(at(d, at(d, root, 0), 0).integer == 1);
  CHECK(at(d, at(d, at(d, root, 1), 0), 0).integer == 1);
  CHECK(at(d, root, 1).items[0] == root.items[0]);  // the inner list holds l itself
}

TEST_CASE("pickle: depth, value, text, mark and file-size limits are enforced") {
  // 70 nested lists: ]( ]( ... e e.
  std::string deep = "\x80\x02";
  for (int i = 0; i < 70; ++i) deep += "](";
  for (int i = 0; i < 70; ++i) deep += "e";
  deep += ".";
  CHECK_THAT(refusal(deep), Catch::Contains("nesting deeper than 64 levels"));
  PickleLimits loose;
  loose.max_depth = 80;
  loose.max_marks = 100;
  CHECK(read_pickle(deep, "deep", loose).node(0).depth == 69);  // the innermost list is empty

  // A memo bomb: each level is a list of 8 references to the one before
  // (8^8 values if they were copies), all in one tuple. Shared, it stays
  // 1 int + 8 lists + the tuple.
  std::string bomb = "\x80\x02(K\x01\x94";  // memo 0 = 1
  for (int level = 0; level < 8; ++level) {
    bomb += "](";
    for (int k = 0; k < 8; ++k) bomb += std::string("h") + static_cast<char>(level);
    bomb += "e\x94";  // memo level+1
  }
  bomb += "t.";
  const Document shared = read_pickle(bomb);
  CHECK(shared.size() == 10);
  CHECK(shared.node(shared.root()).depth == 9);
  // The value budget: a list of 20 ints is 21 values.
  std::string ints = "\x80\x02](";
  for (int i = 0; i < 20; ++i) ints += "K\x07";
  ints += "e.";
  PickleLimits small;
  small.max_values = 20;
  CHECK_THAT(refusal(ints, small), Catch::Contains("more than 20 values (the limit)"));
  small.max_values = 21;
  CHECK(read_pickle(ints, "ints", small).size() == 21);
  PickleLimits text;
  text.max_text_bytes = 3;
  CHECK_THAT(refusal(raw("\x80\x02X\x04\x00\x00\x00"
                         "abcd."),
                     text),
             Catch::Contains("more than 3 bytes of str and bytes"));
  std::string marks = "\x80\x02";
  for (int i = 0; i < 2000; ++i) marks += "(";
  CHECK_THAT(refusal(marks), Catch::Contains("more than 1024 open MARKs"));
  PickleLimits file;
  file.max_file_bytes = 3;
  CHECK_THAT(refusal(raw("\x80\x02N."), file),
             Catch::Contains("a pickle of 4 bytes: more than the limit of 3"));
}

TEST_CASE("pickle: the writer's output reads back exactly, integers at every width boundary") {
  const int64_t ints[] = {
      0,         1,           127,           128,           255,       256,
      65535,     65536,       2147483647,    2147483648LL,  -1,        -128,
      -129,      -32768,      -2147483648LL, -2147483649LL, INT64_MAX, INT64_MIN,
      1LL << 40, -(1LL << 40)};
  Writer w;
  w.begin_dict();
  w.key("ints");
  w.begin_list();
  for (int64_t v : ints) w.integer(v);
  w.end_list();
  w.key("real");
  w.real(-0.125);
  w.key("flags");
  w.begin_list();
  w.boolean(true);
  w.boolean(false);
  w.none();
  w.end_list();
  w.key("bad utf8");
  w.str(
      raw("a\xff"
          "b"));
  w.key("empty");
  w.begin_dict();
  w.end_dict();
  w.end_dict();
  const std::string bytes = w.finish();
  CHECK(bytes.substr(0, 2) == raw("\x80\x02"));
  CHECK(bytes.back() == '.');

  const Document d = read_pickle(bytes);
  const Document::Node& root = d.node(d.root());
  const Document::Node* list = d.find(root, "ints");
  REQUIRE(list);
  REQUIRE(list->items.size() == std::size(ints));
  for (size_t i = 0; i < std::size(ints); ++i) {
    INFO(ints[i]);
    CHECK(at(d, *list, i).kind == Kind::integer);
    CHECK(at(d, *list, i).integer == ints[i]);
  }
  CHECK(d.find(root, "real")->real == -0.125);
  const Document::Node* flags = d.find(root, "flags");
  CHECK(at(d, *flags, 0).kind == Kind::boolean);
  CHECK(at(d, *flags, 0).integer == 1);
  CHECK(at(d, *flags, 1).integer == 0);
  CHECK(at(d, *flags, 2).kind == Kind::none);
  CHECK(d.find(root, "bad utf8")->text ==
        "a\xef\xbf\xbd"
        "b");
  CHECK(d.find(root, "empty")->kind == Kind::dict);
  CHECK(d.find(root, "empty")->items.empty());

  Writer unbalanced;
  unbalanced.begin_list();
  CHECK_THROWS_AS(unbalanced.finish(), std::logic_error);
}
