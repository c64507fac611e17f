#include "gui/sweep_file.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace shardscope::gui {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("sweep file '" + path + "': " + what);
}

template <typename T>
T field(const nlohmann::json& obj, const char* key, const std::string& path,
        const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(path, where + "/" + key + " is missing");
  try {
    return obj.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(path, where + "/" + key + " has the wrong type");
  }
}

// One CSV record (RFC 4180 quoting, as cmd_sweep writes it).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

SweepFile parse_sweep_json(const nlohmann::json& doc, const std::string& path) {
  SweepFile f;
  f.path = path;
  f.from_json = true;
  if (!doc.is_object()) fail(path, "the document is not an object");
  f.model = field<std::string>(doc, "model", path, "");
  f.hw = field<std::string>(doc, "hw", path, "");
  f.memory_limit_bytes = field<int64_t>(doc, "memory_limit_bytes", path, "");
  if (!doc.contains("configs") || !doc["configs"].is_array())
    fail(path, "/configs is not an array");
  const nlohmann::json& configs = doc["configs"];
  for (size_t i = 0; i < configs.size(); ++i) {
    const nlohmann::json& c = configs[i];
    const std::string where = "/configs/" + std::to_string(i);
    SweepFilePoint p;
    p.config = i;
    p.world = field<int64_t>(c, "world", path, where);
    if (!c.contains("policy") || !c["policy"].is_object()) fail(path, where + "/policy is missing");
    p.policy = c["policy"];
    p.fits = field<bool>(c, "fits", path, where);
    p.pareto = field<bool>(c, "pareto", path, where);
    if (!c.contains("metrics")) fail(path, where + "/metrics is missing");
    const nlohmann::json& m = c["metrics"];
    if (p.fits) {  // else null: no time is predicted for a step that ran out of memory
      p.tokens_per_s = field<double>(c, "tokens_per_s", path, where);
      p.step_time_ms = field<double>(m, "step_time_ms", path, where + "/metrics");
      p.exposed_comm_ms = field<double>(m, "exposed_comm_ms", path, where + "/metrics");
      p.overlap = field<double>(m, "overlap", path, where + "/metrics");
    }
    p.peak_allocated_bytes = field<int64_t>(m, "peak_allocated_bytes", path, where + "/metrics");
    p.peak_reserved_bytes = field<int64_t>(m, "peak_reserved_bytes", path, where + "/metrics");
    if (c.contains("oom_buffer") && c["oom_buffer"].is_string()) p.oom_buffer = c["oom_buffer"];
    f.points.push_back(std::move(p));
  }
  if (doc.contains("best") && doc["best"].is_number_integer()) {
    f.best = doc["best"].get<int64_t>();
    if (f.best < 0 || f.best >= static_cast<int64_t>(f.points.size()))
      fail(path, "/best is out of range");
  }
  return f;
}

SweepFile parse_sweep_csv(const std::string& text, const std::string& path) {
  SweepFile f;
  f.path = path;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) fail(path, "empty CSV");
  const std::vector<std::string> header = csv_fields(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* need :
       {"world", "rejected", "fits", "pareto", "tokens_per_s", "step_time_ms",
        "peak_allocated_bytes", "peak_reserved_bytes", "exposed_comm_ms", "overlap", "policy"})
    if (!col.count(need)) fail(path, std::string("CSV header has no column '") + need + "'");
  size_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    const std::vector<std::string> v = csv_fields(line);
    if (v.size() != header.size())
      fail(path, "line " + std::to_string(line_no) + " has " + std::to_string(v.size()) +
                     " fields, the header " + std::to_string(header.size()));
    auto get = [&](const char* name) -> const std::string& { return v[col.at(name)]; };
    auto num = [&](const char* name) {
      try {
        size_t used = 0;
        const double d = std::stod(get(name), &used);
        if (used != get(name).size()) throw std::invalid_argument(name);
        return d;
      } catch (const std::exception&) {
        fail(path, "line " + std::to_string(line_no) + " column '" + name + "' is not a number");
      }
    };
    if (num("rejected") != 0) continue;
    SweepFilePoint p;
    p.config = f.points.size();
    p.world = static_cast<int64_t>(num("world"));
    p.fits = num("fits") != 0;
    p.pareto = num("pareto") != 0;
    if (p.fits) {  // else empty: no time is predicted for a step that ran out of memory
      p.tokens_per_s = num("tokens_per_s");
      p.step_time_ms = num("step_time_ms");
      p.exposed_comm_ms = num("exposed_comm_ms");
      p.overlap = num("overlap");
    }
    p.peak_allocated_bytes = static_cast<int64_t>(num("peak_allocated_bytes"));
    p.peak_reserved_bytes = static_cast<int64_t>(num("peak_reserved_bytes"));
    if (col.count("oom_buffer")) p.oom_buffer = get("oom_buffer");
    try {
      p.policy = nlohmann::json::parse(get("policy"));
    } catch (const nlohmann::json::exception&) {
      fail(path, "line " + std::to_string(line_no) + " column 'policy' is not JSON");
    }
    f.points.push_back(std::move(p));
  }
  return f;
}

SweepFile load_sweep_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      fail(path, std::string("not valid JSON: ") + e.what());
    }
    return parse_sweep_json(doc, path);
  }
  return parse_sweep_csv(text, path);
}

std::vector<size_t> pareto_order(const SweepFile& file) {
  std::vector<size_t> v;
  for (size_t i = 0; i < file.points.size(); ++i)
    if (file.points[i].pareto) v.push_back(i);
  std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) {
    return file.points[a].peak_reserved_bytes < file.points[b].peak_reserved_bytes;
  });
  return v;
}

}  // namespace shardscope::gui
