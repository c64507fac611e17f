// Command-line parsing shared by every subcommand: `--flag VALUE`, `--flag=VALUE`,
// boolean `--flag`, repeatable flags (--set), positionals, and everything after
// `--` kept verbatim (for `profile -- COMMAND ...`). Unknown flags are errors.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardscope::cli {

// A usage error: printed with the subcommand's usage, exit status 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

struct FlagSpec {
  std::string name;         // without dashes: "model"
  bool takes_value = true;  // false: a switch such as --json
  bool repeatable = false;  // --set may be given many times
};

class Args {
 public:
  // argv[0] is the subcommand name. Throws UsageError on unknown flags or a
  // missing value. `--help`/`-h` sets help() instead of failing.
  Args(int argc, char** argv, const std::vector<FlagSpec>& specs, bool allow_positionals);

  bool help() const { return help_; }
  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // Throws UsageError("missing --name") when absent.
  std::string require(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  // Integer value; throws UsageError naming the flag when not a whole number
  // or outside [lo, hi].
  int64_t get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::vector<std::string>& after_dashdash() const { return rest_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
  std::vector<std::string> rest_;
  bool help_ = false;
};

// "80GiB", "512MB", "1.5e9", "4096" -> bytes. Binary (KiB, MiB, GiB, TiB) and
// decimal (KB, MB, GB, TB) suffixes. Throws UsageError naming `field`.
int64_t parse_size(const std::string& text, const std::string& field);

}  // namespace shardscope::cli
