#include "cli/args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace shardscope::cli {

Args::Args(int argc, char** argv, const std::vector<FlagSpec>& specs, bool allow_positionals) {
  std::map<std::string, const FlagSpec*> by_name;
  for (const FlagSpec& s : specs) by_name[s.name] = &s;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (int j = i + 1; j < argc; ++j) rest_.emplace_back(argv[j]);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2);
      std::string value;
      bool inline_value = false;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      auto it = by_name.find(name);
      if (it == by_name.end()) throw UsageError("unknown option --" + name);
      const FlagSpec& spec = *it->second;
      if (spec.takes_value) {
        if (!inline_value) {
          if (i + 1 >= argc) throw UsageError("option --" + name + " needs a value");
          value = argv[++i];
        }
      } else if (inline_value) {
        throw UsageError("option --" + name + " takes no value");
      }
      auto& slot = values_[name];
      if (!slot.empty() && !spec.repeatable) throw UsageError("option --" + name + " given twice");
      slot.push_back(value);
      continue;
    }
    if (!allow_positionals) throw UsageError("unexpected argument '" + arg + "'");
    positionals_.push_back(arg);
  }
}

bool Args::has(const std::string& name) const {
  return values_.count(name) != 0;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

std::string Args::require(const std::string& name) const {
  if (!has(name)) throw UsageError("missing --" + name);
  return get(name);
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  if (!has(name)) return fallback;
  const std::string text = get(name);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0)
    throw UsageError("--" + name + ": '" + text + "' is not a whole number");
  if (v < lo || v > hi)
    throw UsageError("--" + name + ": " + text + " is outside [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v;
}

int64_t parse_size(const std::string& text, const std::string& field) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' || text[i] == '+'))
    ++i;
  const std::string number = text.substr(0, i);
  std::string suffix = text.substr(i);
  char* end = nullptr;
  double v = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
    throw UsageError(field + ": '" + text + "' is not a size (e.g. 80GiB, 512MB, 4096)");
  static const std::map<std::string, double> kScale = {{"", 1},
                                                       {"B", 1},
                                                       {"KiB", 1024.0},
                                                       {"MiB", 1048576.0},
                                                       {"GiB", 1073741824.0},
                                                       {"TiB", 1099511627776.0},
                                                       {"KB", 1e3},
                                                       {"MB", 1e6},
                                                       {"GB", 1e9},
                                                       {"TB", 1e12}};
  auto it = kScale.find(suffix);
  if (it == kScale.end())
    throw UsageError(field + ": unknown size suffix '" + suffix +
                     "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double bytes = v * it->second;
  if (bytes > 9.0e18) throw UsageError(field + ": '" + text + "' is too large");
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace shardscope::cli
