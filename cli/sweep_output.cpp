#include "cli/sweep_output.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace shardscope::cli {

namespace {

// A record's fixed part; the oom_buffer's bytes follow it.
struct SpillRecord {
  uint64_t config = 0;
  int64_t world = 0;
  int64_t tokens_per_step = 0;
  double tokens_per_s = 0;
  traces::MetricValues metrics;
  uint32_t oom_buffer_bytes = 0;
  uint8_t rejected = 0;
  uint8_t fits = 0;
};

[[noreturn]] void spill_failed(const char* what) {
  throw std::runtime_error(std::string("sweep: the temporary file of results: ") + what +
                           " (it needs about 120 bytes per configuration in /tmp)");
}

// A configuration that does not fit stopped at the failed allocation: its
// times and throughput predict nothing and are written as null (CSV: empty);
// its peaks are those up to the failure. A rejected one was never simulated.
nlohmann::json time_or_null(bool timed, double v) {
  return timed ? nlohmann::json(v) : nlohmann::json();
}

nlohmann::json metrics_json(const sim::SweepPoint& p) {
  if (p.rejected) return nlohmann::json();
  const traces::MetricValues& m = p.metrics;
  return {{"step_time_ms", time_or_null(p.fits, m.step_time_ms)},
          {"peak_allocated_bytes", m.peak_allocated_bytes},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"compute_ms", time_or_null(p.fits, m.compute_ms)},
          {"comm_ms", time_or_null(p.fits, m.comm_ms)},
          {"exposed_comm_ms", time_or_null(p.fits, m.exposed_comm_ms)},
          {"overlap", time_or_null(p.fits, m.overlap)},
          {"idle_ms", time_or_null(p.fits, m.idle_ms)}};
}

// The value at a dotted key of a policy document, null when absent.
nlohmann::json value_at(const nlohmann::json& doc, const std::string& dotted) {
  std::string p = "/" + dotted;
  for (char& c : p)
    if (c == '.') c = '/';
  const nlohmann::json::json_pointer ptr(p);
  return doc.contains(ptr) ? doc.at(ptr) : nlohmann::json();
}

std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// A nested value's dump placed at depth `pad`: every line after the first
// indented by it (dumped strings hold no raw newline: they escape it).
std::string placed(const std::string& dumped, const std::string& pad) {
  std::string out;
  out.reserve(dumped.size());
  for (char c : dumped) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

}  // namespace

SweepSpill::SweepSpill() : file_(std::tmpfile()) {
  if (!file_) spill_failed("cannot create it");
}

SweepSpill::~SweepSpill() {
  std::fclose(file_);
}

void SweepSpill::add(const sim::SweepPoint& p) {
  SpillRecord r;
  r.config = p.config;
  r.world = p.world;
  r.tokens_per_step = p.tokens_per_step;
  r.tokens_per_s = p.tokens_per_s;
  r.metrics = p.metrics;
  r.oom_buffer_bytes = static_cast<uint32_t>(p.oom_buffer.size());
  r.rejected = p.rejected ? 1 : 0;
  r.fits = p.fits ? 1 : 0;
  if (std::fwrite(&r, sizeof r, 1, file_) != 1 ||
      std::fwrite(p.oom_buffer.data(), 1, p.oom_buffer.size(), file_) != p.oom_buffer.size())
    spill_failed("writing failed (disk full?)");
}

void SweepSpill::replay(const sim::SweepGrid& grid, const nlohmann::json& base,
                        const std::set<size_t>& front,
                        const std::function<void(const sim::SweepPoint&)>& each) const {
  if (std::fflush(file_) != 0) spill_failed("writing failed (disk full?)");
  std::rewind(file_);
  const size_t per_world = grid.size();
  SpillRecord r;
  sim::SweepPoint p;
  while (std::fread(&r, sizeof r, 1, file_) == 1) {
    p.oom_buffer.resize(r.oom_buffer_bytes);
    if (std::fread(&p.oom_buffer[0], 1, r.oom_buffer_bytes, file_) != r.oom_buffer_bytes)
      spill_failed("reading it back failed");
    p.config = r.config;
    p.world = r.world;
    p.policy = sim::grid_policy(grid, base, r.config % per_world);
    p.rejected = r.rejected != 0;
    p.fits = r.fits != 0;
    p.metrics = r.metrics;
    p.tokens_per_step = r.tokens_per_step;
    p.tokens_per_s = r.tokens_per_s;
    p.pareto = front.count(r.config) != 0;
    each(p);
  }
  if (std::ferror(file_)) spill_failed("reading it back failed");
}

std::string grid_value(const sim::SweepPoint& p, const std::string& dotted_key) {
  const nlohmann::json v = value_at(p.policy, dotted_key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void write_csv_header(const sim::SweepGrid& grid, std::ostream& out) {
  out << "config,world";
  for (const sim::SweepAxis& a : grid.axes) out << ',' << csv_quote(a.key);
  out << ",rejected,fits,pareto,tokens_per_step,tokens_per_s,step_time_ms,peak_allocated_bytes,"
         "peak_reserved_bytes,compute_ms,comm_ms,exposed_comm_ms,overlap,idle_ms,oom_buffer,"
         "policy\n";
}

void write_csv_row(const sim::SweepPoint& p, const sim::SweepGrid& grid, std::ostream& out) {
  // Empty fields: a rejected configuration has no metrics; one that does not
  // fit has its peaks (up to the failure) and no time or throughput.
  auto field = [&](bool present, const char* format, double v) {
    char buf[64] = "";
    if (present) std::snprintf(buf, sizeof buf, format, v);
    out << ',' << buf;
  };
  out << p.config << ',' << p.world;
  for (const sim::SweepAxis& a : grid.axes) out << ',' << csv_quote(grid_value(p, a.key));
  const traces::MetricValues& m = p.metrics;
  const bool simulated = !p.rejected;
  const bool timed = simulated && p.fits;
  out << ',' << (p.rejected ? 1 : 0) << ',' << (p.fits ? 1 : 0) << ',' << (p.pareto ? 1 : 0);
  out << ',';
  if (simulated) out << p.tokens_per_step;
  field(timed, "%.3f", p.tokens_per_s);
  field(timed, "%.6f", m.step_time_ms);
  out << ',';
  if (simulated) out << m.peak_allocated_bytes;
  out << ',';
  if (simulated) out << m.peak_reserved_bytes;
  field(timed, "%.6f", m.compute_ms);
  field(timed, "%.6f", m.comm_ms);
  field(timed, "%.6f", m.exposed_comm_ms);
  field(timed, "%.6f", m.overlap);
  field(timed, "%.6f", m.idle_ms);
  out << ',';
  if (simulated && !p.fits) out << csv_quote(p.oom_buffer);
  out << ',' << csv_quote(p.policy.dump()) << '\n';
}

nlohmann::json config_json(const sim::SweepPoint& p) {
  nlohmann::json c = {{"world", p.world},
                      {"policy", p.policy},
                      {"metrics", metrics_json(p)},
                      {"fits", p.fits},
                      {"pareto", p.pareto},
                      {"tokens_per_step", p.tokens_per_step},
                      {"tokens_per_s", time_or_null(p.fits, p.tokens_per_s)}};
  if (!p.fits) c["oom_buffer"] = p.oom_buffer;
  return c;
}

nlohmann::json baseline_json(const sim::SweepPoint& b) {
  nlohmann::json j = {{"world", b.world},
                      {"policy", b.policy},
                      {"rejected", b.rejected},
                      {"fits", b.fits},
                      {"tokens_per_step", b.tokens_per_step},
                      {"tokens_per_s", time_or_null(b.fits, b.tokens_per_s)},
                      {"metrics", metrics_json(b)}};
  if (!b.rejected && !b.fits) j["oom_buffer"] = b.oom_buffer;
  return j;
}

void write_json_streamed(
    const nlohmann::json& head, int indent,
    const std::function<void(const std::function<void(const nlohmann::json&)>&)>& configs,
    std::ostream& out) {
  // nlohmann's pretty printing: "{\n", members at one indent joined by
  // ",\n", "\n}"; an array likewise with "[" "]", and "[]" when empty.
  const std::string pad1(static_cast<size_t>(indent), ' ');
  const std::string pad2 = pad1 + pad1;
  out << "{\n";
  bool first_member = true;
  for (const auto& [key, value] : head.items()) {
    if (!first_member) out << ",\n";
    first_member = false;
    out << pad1 << nlohmann::json(key).dump() << ": ";
    if (key != "configs") {
      out << placed(value.dump(indent), pad1);
      continue;
    }
    bool empty = true;
    configs([&](const nlohmann::json& c) {
      out << (empty ? "[\n" : ",\n") << pad2 << placed(c.dump(indent), pad2);
      empty = false;
    });
    out << (empty ? "[]" : "\n" + pad1 + "]");
  }
  out << "\n}";
}

}  // namespace shardscope::cli
