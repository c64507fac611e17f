#include "traces/chrome_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "traces/error.h"

namespace shardscope::traces {

using nlohmann::json;

namespace {

struct Checker {
  size_t max_issues;
  std::vector<ChromeIssue> issues;

  bool full() const { return issues.size() >= max_issues; }
  void add(const char* rule, std::string where, std::string message) {
    if (!full()) issues.push_back(ChromeIssue{rule, std::move(where), std::move(message)});
  }
};

std::string where_of(size_t i) {
  return "/traceEvents/" + std::to_string(i);
}

bool has_control(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

// Every string in `root`, keys included (iterative: no recursion on depth).
void check_strings(const json& root, const std::string& where, Checker& c) {
  std::vector<const json*> stack{&root};
  while (!stack.empty() && !c.full()) {
    const json* v = stack.back();
    stack.pop_back();
    if (v->is_string()) {
      if (has_control(v->get_ref<const std::string&>()))
        c.add("control", where, "control character in a string value");
    } else if (v->is_object()) {
      for (auto it = v->begin(); it != v->end(); ++it) {
        if (has_control(it.key())) c.add("control", where, "control character in a key");
        stack.push_back(&it.value());
      }
    } else if (v->is_array()) {
      for (const json& x : *v) stack.push_back(&x);
    }
  }
}

bool ns_of(const json& v, int64_t* out) {
  if (!v.is_number()) return false;
  const double us = v.get<double>();
  if (!std::isfinite(us) || std::fabs(us) > 9.0e15) return false;
  *out = std::llround(us * 1000.0);
  return true;
}

struct Span {
  int64_t start;
  int64_t end;
  size_t index;
};

struct Mark {
  int64_t ts;
  size_t index;
  bool begin;
  std::string name;
};

}  // namespace

std::vector<ChromeIssue> check_chrome_trace(std::string_view text, size_t max_issues) {
  Checker c{max_issues, {}};
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    c.add("json", "byte " + std::to_string(e.byte), clip_input(e.what()));
    return c.issues;
  } catch (const json::exception& e) {  // out_of_range: a number too large for a double
    c.add("json", "/", clip_input(e.what()));
    return c.issues;
  }
  const json* events = nullptr;
  if (root.is_array()) {
    events = &root;
  } else if (root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array()) {
    events = &root["traceEvents"];
    for (auto it = root.begin(); it != root.end(); ++it)
      if (it.key() != "traceEvents") check_strings(it.value(), "/" + it.key(), c);
  } else {
    c.add("json", "/", "expected an object with a \"traceEvents\" array, or an array");
    return c.issues;
  }

  std::map<std::string, std::vector<Span>> complete;  // per pid/tid
  std::map<std::string, std::vector<Mark>> marks;     // B/E per pid/tid
  struct FlowEnds {
    int starts = 0;
    int ends = 0;
    size_t first = 0;
  };
  std::map<std::string, FlowEnds> flows;

  for (size_t i = 0; i < events->size() && !c.full(); ++i) {
    const json& e = (*events)[i];
    const std::string where = where_of(i);
    if (!e.is_object()) {
      c.add("event", where, "an event must be an object");
      continue;
    }
    check_strings(e, where, c);
    if (!e.contains("ph") || !e["ph"].is_string()) {
      c.add("event", where, "missing string \"ph\"");
      continue;
    }
    const std::string ph = e["ph"].get<std::string>();
    auto id_ok = [&](const char* k) {
      return e.contains(k) && (e[k].is_number() || e[k].is_string());
    };
    if (!id_ok("pid") || !id_ok("tid")) {
      // Kineto writes global instants with pid/tid ""; strings are fine, absence is not.
      c.add("event", where, "missing pid or tid");
      continue;
    }
    const std::string thread = e["pid"].dump() + "/" + e["tid"].dump();
    const std::string name =
        e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    if (ph == "M") continue;
    int64_t ts = 0;
    if (!e.contains("ts") || !ns_of(e["ts"], &ts)) {
      c.add("ts", where, "missing or non-numeric ts");
      continue;
    }
    if (ph == "X") {
      int64_t dur = 0;
      if (!e.contains("dur") || !ns_of(e["dur"], &dur) || dur < 0) {
        c.add("dur", where, "X event without a numeric dur >= 0");
        continue;
      }
      complete[thread].push_back(Span{ts, ts + dur, i});
    } else if (ph == "B" || ph == "E") {
      marks[thread].push_back(Mark{ts, i, ph == "B", name});
    } else if (ph == "s" || ph == "t" || ph == "f") {
      if (!e.contains("id") || !(e["id"].is_number() || e["id"].is_string())) {
        c.add("flow", where, "flow event without an id");
        continue;
      }
      const std::string cat =
          e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
      FlowEnds& f = flows[e["id"].dump() + "|" + cat + "|" + name];
      if (f.starts == 0 && f.ends == 0) f.first = i;
      if (ph == "s") ++f.starts;
      if (ph == "f") ++f.ends;
    } else if (ph == "C") {
      if (!e.contains("args") || !e["args"].is_object() || e["args"].empty()) {
        c.add("counter", where, "counter event without args");
        continue;
      }
      for (auto it = e["args"].begin(); it != e["args"].end(); ++it)
        if (!it.value().is_number())
          c.add("counter", where, "counter value " + quote_input(it.key()) + " is not a number");
    }
  }

  for (auto& [thread, spans] : complete) {
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back()->end <= s.start) open.pop_back();
      if (!open.empty() && s.end > open.back()->end) {
        c.add("overlap", where_of(s.index),
              "partially overlaps " + where_of(open.back()->index) + " on thread " +
                  clip_input(thread));
        continue;
      }
      open.push_back(&s);
    }
  }
  for (auto& [thread, list] : marks) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Mark& a, const Mark& b) { return a.ts < b.ts; });
    std::vector<const Mark*> open;
    for (const Mark& m : list) {
      if (m.begin) {
        open.push_back(&m);
        continue;
      }
      if (open.empty()) {
        c.add("begin_end", where_of(m.index), "E without an open B on thread " + thread);
        continue;
      }
      if (!m.name.empty() && !open.back()->name.empty() && m.name != open.back()->name)
        c.add("begin_end", where_of(m.index),
              "E " + quote_input(m.name) + " closes B " + quote_input(open.back()->name) +
                  " (not nested)");
      open.pop_back();
    }
    for (const Mark* m : open)
      c.add("begin_end", where_of(m->index), "B never closed on thread " + thread);
  }
  for (const auto& [key, f] : flows) {
    if (f.starts != 1 || f.ends != 1)
      c.add("flow", where_of(f.first),
            "flow " + clip_input(key) + " has " + std::to_string(f.starts) + " start(s) and " +
                std::to_string(f.ends) + " end(s)");
  }
  return c.issues;
}

std::string format_chrome_issues(const std::vector<ChromeIssue>& issues) {
  std::string s;
  for (const ChromeIssue& i : issues) s += i.rule + " at " + i.where + ": " + i.message + "\n";
  return s;
}

}  // namespace shardscope::traces
