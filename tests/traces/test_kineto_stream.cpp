// Kineto JSON parsed as a stream (issue 35 item 4): whatever the chunking of
// the text, the import equals the import of the whole text, errors included
// (same message, same byte offset), and a file is held a window at a time
// (about one chunk), never whole, plain or gzip.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "traces/chrome_export.h"
#include "traces/error.h"
#include "traces/file_io.h"
#include "traces/kineto_import.h"
#include "traces/trace_io.h"

using namespace shardscope::traces;

namespace {

const std::string kFixtures = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/traces/fixtures/";

// A source handing out `text` (after its first `from` bytes) at most `k`
// bytes per call.
std::function<size_t(std::string&, size_t)> chunks_of(const std::string& text, size_t k,
                                                      size_t from = 0) {
  auto at = std::make_shared<size_t>(from);
  return [&text, k, at](std::string& out, size_t n) {
    const size_t m = std::min({n, k, text.size() - *at});
    out.append(text, *at, m);
    *at += m;
    return m;
  };
}

std::string whole_error(const std::string& text) {
  try {
    import_kineto_text(text, "t.json");
  } catch (const TraceError& e) {
    return e.what();
  }
  return "accepted";
}

std::string stream_error(const std::string& text, size_t k) {
  try {
    import_kineto_source(chunks_of(text, k), {}, "t.json");
  } catch (const TraceError& e) {
    return e.what();
  }
  return "accepted";
}

// About `bytes` of Kineto JSON: per launch a cpu_op, its cudaLaunchKernel
// and the kernel, linked by correlation ids (as bench_kineto_large writes).
std::string generated_trace(size_t bytes, int64_t* launches) {
  std::string s =
      "{\"schemaVersion\": 1, \"distributedInfo\": {\"rank\": 0, \"world_size\": 1},\n"
      "\"traceEvents\": [\n";
  char buf[1024];
  int64_t k = 0;
  for (; s.size() < bytes; ++k) {
    const double ts = 10.0 * static_cast<double>(k);
    std::snprintf(
        buf, sizeof buf,
        "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, "
        "\"tid\": 1, \"ts\": %.3f, \"dur\": 8.0, \"args\": {\"External id\": %" PRId64
        "}},\n"
        "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", "
        "\"pid\": 1, \"tid\": 1, \"ts\": %.3f, \"dur\": 4.0, \"args\": {\"correlation\": "
        "%" PRId64
        "}},\n"
        "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm\", \"pid\": 0, \"tid\": 7, "
        "\"ts\": %.3f, \"dur\": 7.0, \"args\": {\"device\": 0, \"stream\": 7, "
        "\"correlation\": %" PRId64 "}},\n",
        ts, k + 1, ts + 2.0, k + 1, ts + 3.0, k + 1);
    s += buf;
  }
  s +=
      "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"args\": {\"name\": \"py\"}}\n]}\n";
  *launches = k;
  return s;
}

}  // namespace

TEST_CASE("Kineto streamed in chunks of any size imports as the whole text does",
          "[kineto][stream]") {
  std::vector<std::string> texts;
  for (const char* f : {"kineto_rank0.json", "kineto_rank1.json", "gloo_cpu_rank0.json"})
    texts.push_back(read_file(kFixtures + f));
  // shardscope's combined export: one process per rank, invented
  // correlation ids, shardscope_* args, the top-level "shardscope" member.
  texts.push_back(chrome_trace_string(
      import_kineto({kFixtures + "kineto_rank0.json", kFixtures + "kineto_rank1.json"})));
  // The bare array form.
  texts.push_back(R"([{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5,"dur":2.25}])");
  for (const std::string& text : texts) {
    KinetoImportSummary whole_summary;
    const Trace whole = import_kineto_text(text, "t.json", &whole_summary);
    CHECK(whole_summary.text_window_bytes == text.size());
    for (size_t k : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{61}, size_t{4096}}) {
      INFO("chunks of " << k << " bytes, text of " << text.size());
      KinetoImportSummary s;
      CHECK(import_kineto_source(chunks_of(text, k), {}, "t.json", &s) == whole);
      CHECK(s.launch_links == whole_summary.launch_links);
      CHECK(s.kernels_with_flops == whole_summary.kernels_with_flops);
      CHECK(s.skipped == whole_summary.skipped);
      if (4 * k < text.size()) CHECK(s.text_window_bytes < text.size());
    }
    // Bytes already read (load_trace's first chunk) come first.
    const size_t head = std::min<size_t>(100, text.size());
    CHECK(import_kineto_source(chunks_of(text, 5, head), text.substr(0, head), "t.json") == whole);
  }
  // The FLOPs from record_shapes (copied out of the window) survive: the
  // gemm of kineto_rank0.json gets 2 x 4096^3 from its aten::mm's dims.
  KinetoImportSummary rank0;
  const Trace t = import_kineto_source(chunks_of(texts[0], 3), {}, "t.json", &rank0);
  CHECK(rank0.kernels_with_flops == 1);
  bool found = false;
  for (const Event& e : t.ranks.at(0).events) found |= e.flops == 2ull * 4096 * 4096 * 4096;
  CHECK(found);
}

TEST_CASE("Kineto streamed fails where the whole text fails, at the same byte",
          "[kineto][stream]") {
  const std::string text = read_file(kFixtures + "kineto_rank1.json");
  // Cut anywhere: the error names the same byte and the same reason.
  for (size_t cut = 0; cut < text.size(); cut += 13) {
    const std::string part = text.substr(0, cut);
    const std::string expected = whole_error(part);
    INFO("cut at " << cut << ": " << expected);
    CHECK(expected != "accepted");
    CHECK(stream_error(part, 1) == expected);
    CHECK(stream_error(part, 7) == expected);
    CHECK(stream_error(part, 4096) == expected);
  }
  // Worked out by hand: cut right after the first event's '}', the reader
  // wants a ',' or ']' at the byte where the text ends.
  const size_t first_end = text.find("}},") + 2;
  CHECK(stream_error(text.substr(0, first_end), 3) ==
        "t.json: byte " + std::to_string(first_end) +
            ": invalid JSON: unexpected end of input in an array");

  // Wrong types, bad syntax, bad escapes, trailing bytes: one each.
  auto mutate = [&](const std::string& from, const std::string& to) {
    std::string m = text;
    const size_t at = m.find(from);
    REQUIRE(at != std::string::npos);
    m.replace(at, from.size(), to);
    return m;
  };
  const std::vector<std::string> bad = {
      mutate("\"ts\": 1010.000", "\"ts\": \"soon\""),  // /traceEvents/1/ts
      mutate("\"dur\": ", "\"dur\" "),                 // a missing ':'
      mutate("\"name\": \"", "\"name\": \"\\q"),       // an invalid escape
      mutate("\"ts\": 1010.000", "\"ts\": 1010."),     // a number cut short
      mutate("\"ts\": 1010.000", "\"ts\": 31e308"),    // out of range
      text + "x",                                      // trailing bytes
  };
  for (const std::string& b : bad) {
    const std::string expected = whole_error(b);
    INFO(expected);
    CHECK(expected != "accepted");
    for (size_t k : {size_t{1}, size_t{7}, size_t{4096}}) CHECK(stream_error(b, k) == expected);
  }
  CHECK_THAT(stream_error(bad[0], 2), Catch::StartsWith("t.json: /traceEvents/1/ts: "));
}

TEST_CASE("a Kineto file is read a window at a time, plain or gzip, not held whole",
          "[kineto][stream]") {
  const shardscope::test::TempDir dir("shardscope_kineto_stream");
  int64_t launches = 0;
  const std::string text = generated_trace(size_t{6} << 20, &launches);
  const std::string plain = (dir.path / "rank0.json").string();
  const std::string gz = (dir.path / "rank0.json.gz").string();
  for (const std::string& path : {plain, gz}) {
    OutputFile f(path);  // ".gz": written compressed
    f.write(text);
    f.commit();
  }
  const Trace whole = import_kineto_text(text, plain);
  REQUIRE(whole.ranks.size() == 1);
  CHECK(static_cast<int64_t>(whole.ranks[0].events.size()) == 3 * launches);
  CHECK(static_cast<int64_t>(whole.ranks[0].flows.size()) == launches);
  // A window is one chunk of 1 MiB and the unread tail of the event it cut
  // (here under 1 KiB): not the 6 MiB text.
  for (const std::string& path : {plain, gz}) {
    INFO(path);
    KinetoImportSummary s;
    const Trace t = import_kineto({path}, &s);
    CHECK(t == whole);
    CHECK(s.launch_links == launches);
    CHECK(s.text_window_bytes > (size_t{1} << 20));
    CHECK(s.text_window_bytes <= (size_t{1} << 20) + 1024);
    CHECK(load_trace(path) == t);  // `report` and the other commands stream too
  }
}

TEST_CASE("a wrong type early in a large Kineto file stops the read there", "[kineto][stream]") {
  // The old reader read (and held) the whole 8 MiB before parsing; the
  // stream fails within its first chunks.
  const shardscope::test::TempDir dir("shardscope_kineto_stream");
  int64_t launches = 0;
  std::string text = generated_trace(size_t{8} << 20, &launches);
  const size_t at = text.find("\"ts\": 0.000");
  REQUIRE(at != std::string::npos);
  text.replace(at, 11, "\"ts\": \"0.0\"");
  const std::string path = (dir.path / "bad.json").string();
  {
    OutputFile f(path);
    f.write(text);
    f.commit();
  }
  InputStats stats;
  try {
    load_trace(path, InputLimits(), &stats);
    FAIL("accepted a string ts");
  } catch (const TraceError& e) {
    CHECK(e.position() == "/traceEvents/0/ts");
  }
  CHECK(stats.file_bytes < (size_t{3} << 20));  // of 8 MiB
}
