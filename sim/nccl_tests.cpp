#include "sim/nccl_tests.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

namespace shardscope::sim {

const char* nccl_collective_name(NcclCollective c) {
  switch (c) {
    case NcclCollective::unknown:
      return "unknown";
    case NcclCollective::all_gather:
      return "all_gather";
    case NcclCollective::reduce_scatter:
      return "reduce_scatter";
    case NcclCollective::all_reduce:
      return "all_reduce";
    case NcclCollective::other:
      return "other";
  }
  return "?";
}

bool parse_nccl_collective(std::string_view name, NcclCollective* out) {
  for (std::string_view suffix : {"_perf_mpi", "_perf"}) {
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
      name = name.substr(0, name.size() - suffix.size());
      break;
    }
  }
  if (name == "all_gather")
    *out = NcclCollective::all_gather;
  else if (name == "reduce_scatter")
    *out = NcclCollective::reduce_scatter;
  else if (name == "all_reduce")
    *out = NcclCollective::all_reduce;
  else
    return false;
  return true;
}

namespace {

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// A whole non-negative decimal integer that fits int64.
bool parse_count(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');  // 19 digits fit in uint64
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// A finite, non-negative decimal number ("12.34", "1.2e+05", "0.00").
bool parse_number(std::string_view s, double* out) {
  if (s.empty() || s.size() > 64 || !(is_digit(s[0]) || s[0] == '.')) return false;
  for (char c : s)
    if (!(is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  const std::string text(s);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) || v < 0)
    return false;
  *out = v;
  return true;
}

// The collective named by a binary or test name anywhere in `s`.
NcclCollective mentioned_collective(std::string_view s) {
  NcclCollective found = NcclCollective::unknown;
  for (const auto& [name, kind] :
       {std::pair<std::string_view, NcclCollective>{"all_gather_perf", NcclCollective::all_gather},
        {"reduce_scatter_perf", NcclCollective::reduce_scatter},
        {"all_reduce_perf", NcclCollective::all_reduce}}) {
    if (s.find(name) == std::string_view::npos) continue;
    if (found != NcclCollective::unknown && found != kind) return NcclCollective::other;
    found = kind;
  }
  return found;
}

struct Section {
  int64_t start_line = 0;
  std::string test;  // from "Collective test starting:"
  NcclCollective collective = NcclCollective::unknown;
  std::map<int64_t, std::string> rank_host;
  int64_t group = -1;  // the Group column of the rank lines (one communicator)
  int64_t header_line = 0;
  size_t columns = 0;
  int size_col = -1, count_col = -1, time_col = -1, algbw_col = -1, busbw_col = -1;
  std::vector<NcclTestsRow> rows;
  bool empty() const { return test.empty() && rank_host.empty() && header_line == 0; }
};

class Parser {
 public:
  Parser(const std::string& file, NcclCollective kind) : file_(file), kind_(kind) {}

  std::vector<NcclTestsTable> run(std::string_view text) {
    int64_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      handle(line, line_no);
    }
    finish();
    if (tables_.empty())
      throw Error(file_ +
                  ": no nccl-tests result table (a '# size count type ... time algbw busbw' "
                  "header line followed by rows)");
    return std::move(tables_);
  }

 private:
  [[noreturn]] void fail(int64_t line, const std::string& message) const {
    throw Error(file_ + ":" + std::to_string(line) + ": " + message);
  }

  void handle(std::string_view line, int64_t no) {
    size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size()) return;
    if (line[i] != '#') {
      // A row's first token is the size, all digits; a line whose first token
      // merely starts with one ("10-0-0-7:4242:4242 [0] NCCL INFO ...", a
      // timestamp) is a log line.
      size_t end = i;
      while (end < line.size() && is_digit(line[end])) ++end;
      if (end > i && (end == line.size() || line[end] == ' ' || line[end] == '\t')) {
        row(line.substr(i), no);
      } else {
        note_mention(line);  // a command line echo, a log line
      }
      return;
    }
    while (i < line.size() && (line[i] == '#' || line[i] == ' ' || line[i] == '\t')) ++i;
    const std::string_view body = line.substr(i);
    const std::vector<std::string_view> tok = split(body);
    if (tok.empty()) return;
    if (starts_with(body, "nccl-tests version") || starts_with(body, "rccl-tests version")) {
      finish();
      return;
    }
    if (starts_with(body, "Collective test starting:")) {
      if (!cur_.empty()) finish();
      if (tok.size() < 4) fail(no, "'Collective test starting:' names no test");
      name_test(tok[3], no);
      return;
    }
    if (starts_with(body, "Collective test concluded:")) {
      if (tok.size() < 4) fail(no, "'Collective test concluded:' names no test");
      std::string_view name = tok[3];
      if (const size_t slash = name.rfind('/'); slash != std::string_view::npos)
        name = name.substr(slash + 1);
      if (!cur_.test.empty() && cur_.test != name)
        fail(no, "test '" + std::string(name) + "' concluded, but '" + cur_.test + "' started");
      if (cur_.test.empty()) name_test(tok[3], no);
      finish();
      return;
    }
    if (tok[0] == "Rank") {
      rank(tok, no);
      return;
    }
    if (tok[0] == "size" && tok.size() >= 2 && tok[1] == "count") {
      header(tok, no);
      return;
    }
    note_mention(body);
  }

  void note_mention(std::string_view s) {
    const NcclCollective c = mentioned_collective(s);
    if (c == NcclCollective::unknown) return;
    if (hint_ == NcclCollective::unknown)
      hint_ = c;
    else if (hint_ != c)
      hint_ = NcclCollective::other;  // ambiguous: no hint
  }

  void name_test(std::string_view name, int64_t no) {
    if (const size_t slash = name.rfind('/'); slash != std::string_view::npos)
      name = name.substr(slash + 1);
    if (name.empty()) fail(no, "'Collective test' line names no test");
    cur_.test = std::string(name);
    NcclCollective c = NcclCollective::other;
    if (!parse_nccl_collective(name, &c)) c = NcclCollective::other;
    cur_.collective = c;
  }

  // "Rank <r> [Group <g>] Pid <p> on <host> device <d> [bus] <name>"
  void rank(const std::vector<std::string_view>& tok, int64_t no) {
    if (cur_.header_line != 0) finish();  // a new test without a version line
    const char* what = "malformed rank line (expected 'Rank R Group G Pid P on HOST device D ...')";
    size_t k = 1;
    int64_t r = 0, g = 0, pid = 0, device = 0;
    if (k >= tok.size() || !parse_count(tok[k], &r)) fail(no, what);
    ++k;
    if (k < tok.size() && tok[k] == "Group") {
      if (k + 1 >= tok.size() || !parse_count(tok[k + 1], &g)) fail(no, what);
      k += 2;
    }
    if (k + 1 >= tok.size() || tok[k] != "Pid" || !parse_count(tok[k + 1], &pid)) fail(no, what);
    k += 2;
    if (k + 1 >= tok.size() || tok[k] != "on") fail(no, what);
    const std::string host(tok[k + 1]);
    k += 2;
    if (k + 1 >= tok.size() || tok[k] != "device" || !parse_count(tok[k + 1], &device))
      fail(no, what);
    if (cur_.group >= 0 && cur_.group != g)
      fail(no, "ranks of several communicator groups (Group " + std::to_string(cur_.group) +
                   " and " + std::to_string(g) + "): not supported");
    cur_.group = g;
    if (cur_.rank_host.count(r))
      fail(no, "rank " + std::to_string(r) +
                   " is listed twice (nccl-tests built without MPI runs one single-rank test "
                   "per process: rebuild with MPI=1)");
    cur_.rank_host[r] = host;
  }

  void header(const std::vector<std::string_view>& tok, int64_t no) {
    if (!cur_.rows.empty()) {
      // Another table of the same test: keep its name and ranks.
      Section next;
      next.start_line = no;
      next.test = cur_.test;
      next.collective = cur_.collective;
      next.rank_host = cur_.rank_host;
      next.group = cur_.group;
      finish();
      cur_ = std::move(next);
    }
    cur_.header_line = no;
    cur_.columns = tok.size();
    cur_.size_col = cur_.count_col = cur_.time_col = cur_.algbw_col = cur_.busbw_col = -1;
    for (size_t c = 0; c < tok.size(); ++c) {
      const auto ci = static_cast<int>(c);
      auto first = [&](int* col) {
        if (*col < 0) *col = ci;
      };
      if (tok[c] == "size") first(&cur_.size_col);
      if (tok[c] == "count") first(&cur_.count_col);
      if (tok[c] == "time" || tok[c] == "cputime") first(&cur_.time_col);
      if (tok[c] == "algbw") first(&cur_.algbw_col);
      if (tok[c] == "busbw") first(&cur_.busbw_col);
    }
    if (cur_.time_col < 0) fail(no, "the column header has no 'time' column");
  }

  void row(std::string_view line, int64_t no) {
    if (cur_.header_line == 0)
      fail(no, "a result row before any column header ('# size count type ... time ...')");
    const std::vector<std::string_view> tok = split(line);
    if (tok.size() != cur_.columns)
      fail(no, "expected " + std::to_string(cur_.columns) + " columns as in the header at line " +
                   std::to_string(cur_.header_line) + ", found " + std::to_string(tok.size()) +
                   " (truncated row?)");
    NcclTestsRow r;
    r.line = no;
    auto column = [&](int col, const char* name, double* out) {
      if (col < 0) return;
      if (!parse_number(tok[static_cast<size_t>(col)], out))
        fail(no, std::string("column '") + name + "' is not a number: '" +
                     std::string(tok[static_cast<size_t>(col)]) + "'");
    };
    if (!parse_count(tok[static_cast<size_t>(cur_.size_col)], &r.bytes))
      fail(no, "column 'size' is not a byte count: '" +
                   std::string(tok[static_cast<size_t>(cur_.size_col)]) + "'");
    if (cur_.count_col >= 0 && !parse_count(tok[static_cast<size_t>(cur_.count_col)], &r.count))
      fail(no, "column 'count' is not an element count: '" +
                   std::string(tok[static_cast<size_t>(cur_.count_col)]) + "'");
    column(cur_.time_col, "time", &r.time_us);
    column(cur_.algbw_col, "algbw", &r.algbw_gbps);
    column(cur_.busbw_col, "busbw", &r.busbw_gbps);
    cur_.rows.push_back(r);
  }

  void finish() {
    Section s = std::move(cur_);
    cur_ = Section{};
    const NcclCollective hint = hint_;
    if (s.rows.empty()) return;
    hint_ = NcclCollective::unknown;
    NcclTestsTable t;
    t.file = file_;
    t.line = s.header_line;
    t.test = s.test;
    t.collective = s.collective;
    if (t.collective == NcclCollective::unknown && hint != NcclCollective::other)
      t.collective = hint;
    if (kind_ != NcclCollective::unknown) {
      if (t.collective == NcclCollective::unknown)
        t.collective = kind_;
      else if (t.collective != kind_)
        fail(s.header_line, std::string("this table measures ") +
                                (t.test.empty() ? nccl_collective_name(t.collective) : t.test) +
                                ", but the file was given as " + nccl_collective_name(kind_));
    }
    if (t.collective == NcclCollective::unknown)
      fail(s.header_line,
           "cannot tell which collective this table measures (no '# Collective test starting:' "
           "line): name it as KIND=FILE (all_gather, reduce_scatter, all_reduce)");
    if (s.rank_host.empty())
      fail(s.header_line,
           "no '#  Rank R Group G Pid P on HOST device D' lines before the table: cannot tell "
           "the number of ranks");
    std::map<std::string, int64_t> per_host;
    for (const auto& [r, host] : s.rank_host) ++per_host[host];
    t.ranks = static_cast<int64_t>(s.rank_host.size());
    t.nodes = static_cast<int64_t>(per_host.size());
    t.min_per_node = t.ranks;
    for (const auto& [host, n] : per_host) {
      t.min_per_node = std::min(t.min_per_node, n);
      t.max_per_node = std::max(t.max_per_node, n);
    }
    t.rows = std::move(s.rows);
    tables_.push_back(std::move(t));
  }

  std::string file_;
  NcclCollective kind_;
  Section cur_;
  NcclCollective hint_ = NcclCollective::unknown;  // a binary named outside a test's lines
  std::vector<NcclTestsTable> tables_;
};

}  // namespace

std::vector<NcclTestsTable> parse_nccl_tests(std::string_view text, const std::string& file,
                                             NcclCollective kind) {
  return Parser(file, kind).run(text);
}

std::vector<NcclTestsTable> load_nccl_tests(const std::string& path, NcclCollective kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the nccl-tests file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path + ": error while reading the nccl-tests file");
  return parse_nccl_tests(text.str(), path, kind);
}

}  // namespace shardscope::sim
