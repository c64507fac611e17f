// The JSON pull scanner and exact decimal time conversion used by the
// Kineto importer, and gzip in and out.
#include <catch2/catch.hpp>
#include <string>

#include "../temp_dir.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/gzip.h"
#include "traces/json_scan.h"
#include "traces/kineto_import.h"
#include "traces/metrics.h"

using namespace shardscope::traces;

namespace {

int64_t scaled(const std::string& text, int exp) {
  int64_t v = 0;
  REQUIRE(decimal_to_scaled_int(text, exp, &v));
  return v;
}

ErrorKind scan_error(const std::string& text) {
  try {
    JsonScanner s(text, "t.json");
    s.skip();
    s.finish();
  } catch (const TraceError& e) {
    return e.kind();
  }
  FAIL("accepted " << text);
  return ErrorKind::io;
}

}  // namespace

TEST_CASE("microseconds to nanoseconds exactly, never through a double", "[json_scan]") {
  // Epoch microseconds (16 digits) and fractional microseconds (Kineto's %.3f).
  CHECK(scaled("1669783687389324", 3) == 1669783687389324000);
  CHECK(scaled("4203669604595.407", 3) == 4203669604595407);
  CHECK(scaled("1735632360000123.456", 3) == 1735632360000123456);
  // A double holds 1735632360000123.456 as ...123.4560546875: its ns would
  // differ; the text decides here. More than three decimals round to the
  // nearest nanosecond, halves away from zero.
  CHECK(scaled("1735632360000123.4567", 3) == 1735632360000123457);
  CHECK(scaled("0.0005", 3) == 1);
  CHECK(scaled("0.0004", 3) == 0);
  CHECK(scaled("-0.0005", 3) == -1);
  CHECK(scaled("-12.5", 3) == -12500);
  // Exponents.
  CHECK(scaled("1.5e3", 3) == 1'500'000);
  CHECK(scaled("25E-1", 3) == 2500);
  CHECK(scaled("0", 3) == 0);
  CHECK(scaled("0.000", 3) == 0);
  // Out of int64: refused, not wrapped.
  int64_t v = 0;
  CHECK_FALSE(decimal_to_scaled_int("9223372036854775.808", 3, &v));
  CHECK(decimal_to_scaled_int("9223372036854775.807", 3, &v));
  CHECK(v == INT64_MAX);
  CHECK_FALSE(decimal_to_scaled_int("1e300", 3, &v));
  CHECK(decimal_to_scaled_int("1e-300", 3, &v));
  CHECK(v == 0);
  CHECK_FALSE(decimal_to_scaled_int("12a", 3, &v));
  CHECK_FALSE(decimal_to_scaled_int("", 3, &v));
  // Integers.
  CHECK(parse_json_int("-9223372036854775808", &v));
  CHECK(v == INT64_MIN);
  CHECK_FALSE(parse_json_int("9223372036854775808", &v));
  CHECK_FALSE(parse_json_int("1.0", &v));
}

TEST_CASE("three back-to-back 10 us kernels at epoch microseconds make a 30 us span",
          "[json_scan][kineto]") {
  // Through a double these snapped to multiples of 256 ns (a 29.968 us step).
  const std::string doc = R"({"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 1669783687389324, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 1669783687389334, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "c", "pid": 0, "tid": 7, "ts": 1669783687389344, "dur": 10}]})";
  const Trace t = import_kineto_text(doc, "k.json");
  REQUIRE(t.ranks.at(0).events.size() == 3);
  CHECK(t.ranks[0].events[0].start_ns == 1669783687389324000);
  CHECK(t.ranks[0].events[1].start_ns == 1669783687389334000);
  CHECK(t.ranks[0].events[2].start_ns == 1669783687389344000);
  const Metrics m = compute_metrics(t);
  CHECK(m.total.step_time_ms == 0.030);
  CHECK(m.total.idle_ms == 0);
  CHECK(m.total.device_span_ms == 0.030);
}

TEST_CASE("the scanner takes strings, escapes and nesting strictly", "[json_scan]") {
  JsonScanner s(R"({"a\u00e9\n": ["x", -1.5e2, true, null, {"b": [] }], "c": "\ud83d\ude00"})",
                "t");
  s.begin_object();
  bool first = true;
  std::string_view key;
  REQUIRE(s.next_member(first, &key));
  CHECK(key == "a\xc3\xa9\n");
  s.begin_array();
  bool f = true;
  REQUIRE(s.next_element(f));
  CHECK(s.string() == "x");
  REQUIRE(s.next_element(f));
  CHECK(s.number() == "-1.5e2");
  REQUIRE(s.next_element(f));
  CHECK(s.boolean());
  REQUIRE(s.next_element(f));
  s.null();
  REQUIRE(s.next_element(f));
  s.skip();
  CHECK_FALSE(s.next_element(f));
  REQUIRE(s.next_member(first, &key));
  CHECK(key == "c");
  CHECK(s.string() == "\xf0\x9f\x98\x80");  // a surrogate pair
  CHECK_FALSE(s.next_member(first, &key));
  s.finish();

  for (const char* bad :
       {"{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\x\"", "\"\x01\"", "\"\xc3\"",
        "\"\xed\xa0\x80\"", "\"\\ud800\"", "[1] 2", "tru", "nul", "{\"a\":1,}", "\"abc"})
    CHECK(scan_error(bad) == ErrorKind::malformed);
  // Nesting beyond the limit.
  CHECK(scan_error(std::string(65, '[') + std::string(65, ']')) == ErrorKind::malformed);
  try {
    JsonScanner s2("[1, 2 3]", "t.json");
    s2.skip();
    FAIL("accepted a missing comma");
  } catch (const TraceError& e) {
    CHECK(e.position() == "byte 6");
  }
}

TEST_CASE("gzip: Kineto traces read compressed, exports write compressed", "[gzip][kineto]") {
  const shardscope::test::TempDir tmp("shardscope_gzip");
  const std::string fixture =
      std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/traces/fixtures/kineto_rank0.json";
  const std::string text = read_file(fixture);
  const std::string gz = (tmp.path / "rank0.json.gz").string();
  {
    OutputFile f(gz);  // ".gz": written compressed
    f.write(text);
    f.commit();
  }
  std::string raw;
  {
    FILE* f = std::fopen(gz.c_str(), "rb");
    REQUIRE(f);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) raw.append(buf, n);
    std::fclose(f);
  }
  CHECK(is_gzip(raw));
  CHECK(raw.size() < text.size());
  CHECK(read_file(gz) == text);
  CHECK(import_kineto({gz}) == import_kineto({fixture}));
  // Two members one after the other read as one stream (gzip -c a b).
  CHECK(gunzip(raw + raw, "two.gz") == text + text);
  // Cut short: truncated; corrupted: malformed; garbage after: malformed.
  try {
    gunzip(raw.substr(0, raw.size() / 2), "cut.gz");
    FAIL("accepted a truncated stream");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::truncated);
  }
  std::string bad = raw;
  bad[raw.size() / 2] = static_cast<char>(bad[raw.size() / 2] ^ 0x55);
  bad[raw.size() / 2 + 1] = static_cast<char>(bad[raw.size() / 2 + 1] ^ 0x55);
  CHECK_THROWS_AS(gunzip(bad, "bad.gz"), TraceError);
  try {
    gunzip(raw + "xyz", "tail.gz");
    FAIL("accepted trailing bytes");
  } catch (const TraceError& e) {
    CHECK(e.kind() == ErrorKind::malformed);
  }
  // A decompression bound.
  try {
    gunzip(raw, "big.gz", 100);
    FAIL("ignored the output bound");
  } catch (const TraceError& e) {
    CHECK(std::string(e.what()).find("more than") != std::string::npos);
  }
}
