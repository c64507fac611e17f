// Bounded reading of untrusted trace files (issue 17 item 5): garbage is
// refused after one chunk, a huge string at the string limit, a gzip bomb at
// the ratio bound, and no error message quotes more than ~200 bytes of input.
// "Bytes read" comes from InputStats, which counts what left the file.
#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <string>

#include "../temp_dir.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/gzip.h"
#include "traces/input.h"
#include "traces/json_format.h"
#include "traces/json_guard.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string gzip_of(const std::string& text) {
  GzipDeflater d;
  std::string out;
  d.write(text.data(), text.size(), out);
  d.finish(out);
  return out;
}

// Deterministic bytes that are not JSON (xorshift), the first one 0xa4.
std::string garbage(size_t n) {
  std::string s(n, '\0');
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x & 0xff);
  }
  s[0] = '\xa4';
  return s;
}

struct LoadResult {
  std::string what;
  std::string position;
  ErrorKind kind = ErrorKind::io;
  InputStats stats;
};

LoadResult load_error(const std::string& path, const InputLimits& limits = {}) {
  LoadResult r;
  try {
    load_trace(path, limits, &r.stats);
    FAIL("loaded " << path);
  } catch (const TraceError& e) {
    r.what = e.what();
    r.position = e.position();
    r.kind = e.kind();
  }
  return r;
}

std::string guard_error(const std::string& text, const InputLimits& limits = {}) {
  try {
    JsonGuard g("t.json", limits);
    g.feed(text.data(), text.size());
    g.finish();
  } catch (const TraceError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("garbage is refused after one chunk, however large the file", "[input]") {
  const shardscope::test::TempDir dir("shardscope_input");
  const std::string path = (dir.path / "garbage.bin").string();
  write_file(path, garbage(16 << 20));
  const LoadResult r = load_error(path);
  CHECK(r.kind == ErrorKind::malformed);
  CHECK_THAT(r.what, Catch::Contains("byte 1: not a shardscope or Kineto trace: it starts with "
                                     "bytes a4"));
  CHECK(r.stats.file_bytes <= kInputChunk + 2);  // of 16 MiB

  // A JSON-looking start, then garbage: the first byte that cannot be JSON.
  write_file(path, "{\"traceEvents\": [" + garbage(16 << 20));
  const LoadResult j = load_error(path);
  CHECK_THAT(j.what, Catch::Contains("byte 17: invalid JSON: unexpected byte a4 outside a string"));
  CHECK(j.stats.file_bytes <= kInputChunk + 2);

  // Valid JSON, then garbage: refused where the document ends.
  write_file(path, "{\"a\": [1, 2]}\n" + garbage(16 << 20));
  CHECK_THAT(load_error(path).what, Catch::Contains("byte 14: invalid JSON: trailing bytes"));

  // gzip of garbage: the decompressed first chunk decides.
  write_file(path, gzip_of(garbage(16 << 20)));
  const LoadResult g = load_error(path);
  CHECK_THAT(g.what, Catch::Contains("not a shardscope or Kineto trace"));
  CHECK(g.stats.text_bytes <= kInputChunk);
  CHECK(g.stats.file_bytes < (size_t{1} << 20));
}

TEST_CASE("a huge string is refused at the string limit, naming its field", "[input]") {
  const shardscope::test::TempDir dir("shardscope_input");
  const std::string path = (dir.path / "huge.json").string();
  // Kineto: one name of 8 MiB (the default limit is 1 MiB).
  const std::string head = "{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"";
  write_file(path, head + std::string(8 << 20, 'A') + "\"}]}");
  const LoadResult r = load_error(path);
  CHECK(r.kind == ErrorKind::malformed);
  CHECK_THAT(r.what, Catch::Contains("the value of \"name\" (starting at byte " +
                                     std::to_string(head.size() - 1) +
                                     ") is longer than the limit of 1048576 bytes"));
  CHECK(r.position == "byte " + std::to_string(head.size() - 1 + (1 << 20)));
  CHECK(r.stats.file_bytes < (size_t{5} << 19));  // 2.5 MiB of 8 MiB
  CHECK(r.what.size() < 1000);

  // Native JSON, a key, a smaller limit: stops within the first chunk.
  InputLimits small;
  small.max_string_bytes = 1000;
  write_file(path, "{\"format\":\"shardscope.trace\",\"version\":1,\"" + std::string(1 << 20, 'k') +
                       "\":1}");
  const LoadResult k = load_error(path, small);
  CHECK_THAT(k.what,
             Catch::Contains("a key (starting at byte 41) is longer than the limit of 1000"));
  CHECK(k.stats.file_bytes <= kInputChunk + 2);

  // Escapes count their written bytes and are not mistaken for the end.
  CHECK(guard_error("[\"" + std::string(600, 'a') + "\\\"" + std::string(600, 'b') + "\"]",
                    small) != "accepted");
  CHECK(guard_error("[\"" + std::string(400, 'a') + "\\\"" + std::string(400, 'b') + "\"]",
                    small) == "accepted");
}

TEST_CASE("a gzip bomb is refused at the ratio bound", "[input][gzip]") {
  const shardscope::test::TempDir dir("shardscope_input");
  const std::string path = (dir.path / "bomb.json.gz").string();
  // Valid JSON: 32 MiB of spaces inside the events array (about 1000:1).
  write_file(path, gzip_of("{\"traceEvents\":[" + std::string(32 << 20, ' ') + "]}"));
  InputLimits limits;
  limits.gzip_ratio_from = 4 << 20;
  const LoadResult r = load_error(path, limits);
  CHECK(r.kind == ErrorKind::io);
  CHECK_THAT(r.what, Catch::Contains("decompresses to more than 256 times its compressed size"));
  CHECK(r.stats.text_bytes < (size_t{6} << 20));  // stopped soon after 4 MiB, of 32

  // The absolute bound.
  limits.gzip_ratio_from = uint64_t{1} << 40;
  limits.max_gzip_bytes = 2 << 20;
  const LoadResult m = load_error(path, limits);
  CHECK_THAT(m.what, Catch::Contains("decompresses to more than 2 MiB"));
  CHECK(m.stats.text_bytes < (size_t{4} << 20));

  // Zeros: refused by the first decompressed chunk, before any bound.
  write_file(path, gzip_of(std::string(32 << 20, '\0')));
  const LoadResult z = load_error(path);
  CHECK_THAT(z.what, Catch::Contains("it starts with bytes 00 00 00 00"));
  CHECK(z.stats.text_bytes <= kInputChunk);
}

TEST_CASE("the JSON guard accepts JSON and fails at the first bad byte", "[input]") {
  // Byte by byte: strings, escapes and keys split across feeds.
  const std::string ok =
      "{\"a\\\"b\": [1, -2.5e+3, true, false, null, {\"x\": \"\\u00e9\\\\\"}], \"\xc3\xa9\": {}}";
  JsonGuard g("t.json", InputLimits{});
  for (char c : ok) g.feed(&c, 1);
  g.finish();
  CHECK(guard_error(" \n[]\n") == "accepted");

  CHECK_THAT(guard_error("  \n"), Catch::Contains("only whitespace"));
  CHECK_THAT(guard_error("{\"a\": \"x\ty\"}"),
             Catch::Contains("byte 8: invalid JSON: control character in a string"));
  CHECK_THAT(guard_error("{\"a\": [1}"),
             Catch::Contains("byte 8: invalid JSON: '}' closes an array"));
  CHECK_THAT(guard_error("[1]]"), Catch::Contains("byte 3: invalid JSON: unexpected ']'"));
  CHECK_THAT(guard_error("[] x"), Catch::Contains("byte 3: invalid JSON: trailing bytes"));
  CHECK_THAT(guard_error("[1, @]"), Catch::Contains("byte 4: invalid JSON: unexpected '@'"));
  CHECK_THAT(guard_error(std::string(65, '[')),
             Catch::Contains("byte 64: invalid JSON: nesting deeper than 64 levels"));
  CHECK(guard_error(std::string(64, '[') + std::string(64, ']')) == "accepted");
}

TEST_CASE("error messages quote at most ~200 bytes of input", "[input]") {
  const std::string big(1000000, 'x');
  CHECK(clip_input("abc") == "abc");
  CHECK(clip_input("a\nb\x01") == "a\\x0ab\\x01");
  CHECK(clip_input(big) == std::string(200, 'x') + "... (1000000 bytes)");
  // Cut at a UTF-8 boundary: 199 ASCII bytes, then a 2-byte character.
  CHECK(clip_input(std::string(199, 'a') + "\xc3\xa9" + "z") ==
        std::string(199, 'a') + "... (202 bytes)");
  CHECK(quote_input("q") == "\"q\"");

  const auto what_of = [](const std::string& text) -> std::string {
    try {
      read_trace_json(text, "t.json");
    } catch (const TraceError& e) {
      return e.what();
    }
    return "accepted";
  };
  const std::string head = "{\"format\":\"shardscope.trace\",\"version\":1,\"metadata\":{";
  // A 1 MB unknown source: quoted, cut.
  const std::string source = what_of(head + "\"source\":\"" + big + "\"},\"ranks\":[]}");
  CHECK_THAT(source, Catch::Contains("unknown source \"xxxx"));
  CHECK_THAT(source, Catch::Contains("... (1000000 bytes)"));
  CHECK(source.size() < 1000);
  // A 1 MB key in a path, and a 1 MB tool_versions key.
  const std::string tools = what_of(head + "\"source\":\"simulator\",\"tool_versions\":{\"" + big +
                                    "\":1}},\"ranks\":[]}");
  CHECK_THAT(tools, Catch::Contains("is not a string"));
  CHECK(tools.size() < 1000);
  // nlohmann's syntax errors echo the token read: a 1 MB string cut by a
  // control character.
  const std::string syntax = what_of(head + "\"source\":\"" + big + "\n\"}}");
  CHECK_THAT(syntax, Catch::Contains("invalid JSON"));
  CHECK(syntax.size() < 1000);
  // Any TraceError: position and detail are cut as a last guard.
  const TraceError e(ErrorKind::schema, "f", "/" + big, big);
  CHECK(std::string(e.what()).size() < 1400);
}

TEST_CASE(
    "Kineto gzip streamed with a reading thread: a lexical error deep in the file is "
    "reported at the byte the whole-text guard gives, after the events before it",
    "[input][gzip]") {
  const shardscope::test::TempDir dir("shardscope_input");
  const std::string path = (dir.path / "deep.json.gz").string();
  // ~3 MiB of valid events (many 256 KiB reading chunks), then a control
  // character inside a name: only the guard refuses it.
  std::string text = "{\"traceEvents\":[";
  const std::string event =
      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::mm\",\"pid\":1,"
      "\"tid\":1,\"ts\":1.0,\"dur\":1.0},";
  while (text.size() < (size_t{3} << 20)) text += event;
  text += "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"a\x01\"}]}";
  const size_t bad = text.find('\x01');  // the control byte inside the last name
  REQUIRE(bad > (size_t{3} << 20));
  write_file(path, gzip_of(text));
  const LoadResult r = load_error(path);
  CHECK(r.kind == ErrorKind::malformed);
  CHECK(r.position == "byte " + std::to_string(bad));
  std::string whole_text_position;
  try {
    (void)read_json_text(path);
    FAIL("the guard accepted a control character in a string");
  } catch (const TraceError& e) {
    whole_text_position = e.position();
  }
  CHECK(r.position == whole_text_position);
  CHECK(r.stats.text_bytes == text.size());  // the reading thread read to the bad byte's chunk
}

TEST_CASE("a native JSON trace followed by NUL bytes is refused by the reader as by the guard",
          "[input]") {
  // Found by fuzz_native_json (2026-11-29): nlohmann's lexer stops at a NUL,
  // so read_trace_json read what the guard refused as trailing bytes. Both
  // name the NUL's offset from the start (0-based, as the guard counts).
  const std::string doc =
      "{\"format\":\"shardscope.trace\",\"version\":1,\"metadata\":{\"source\":\"simulator\"},"
      "\"ranks\":[]}";
  REQUIRE_NOTHROW(read_trace_json(doc, "t.json"));
  const std::string text = doc + std::string(3, '\0') + "garbage";
  try {
    read_trace_json(text, "t.json");
    FAIL("accepted a document followed by NUL bytes");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::malformed);
    CHECK_THAT(e.what(), Catch::Contains("byte " + std::to_string(doc.size()) +
                                         ": invalid JSON: a NUL byte"));
  }
  CHECK_THAT(guard_error(text), Catch::Contains("byte " + std::to_string(doc.size()) +
                                                ": invalid JSON: trailing bytes"));
}
