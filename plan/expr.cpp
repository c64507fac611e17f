#include "plan/expr.h"

#include <cmath>
#include <stdexcept>

namespace shardscope::plan {
namespace {

// Exponents are bounded so that products of polynomials and repeated
// multiplication in eval stay cheap; no size expression needs more than T^2.
constexpr int kMaxParsedPower = 64;
constexpr int kMaxPower = 1 << 16;
constexpr uint64_t kMagnitudeLimit = uint64_t{1} << 63;

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error(std::string(what) + ": overflow");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error(std::string(what) + ": overflow");
  return r;
}

// Adds c * B^b * T^t into terms, dropping the monomial if it cancels to zero.
void accumulate(std::map<std::pair<int, int>, int64_t>& terms, std::pair<int, int> key, int64_t c,
                const char* what) {
  if (c == 0) return;
  auto it = terms.find(key);
  if (it == terms.end()) {
    terms.emplace(key, c);
    return;
  }
  it->second = checked_add(it->second, c, what);
  if (it->second == 0) terms.erase(it);
}

// Recursive-descent parser over the grammar
//   poly   := ws [sign ws] term (ws sign ws term)* ws
//   term   := factor (ws '*' ws factor)*
//   factor := integer | ('B' | 'T') [ws '^' ws integer]
//   sign   := '+' | '-'
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  std::map<std::pair<int, int>, int64_t> parse() {
    std::map<std::pair<int, int>, int64_t> terms;
    skip_ws();
    if (pos_ == text_.size()) fail("empty expression");
    bool negative = false;
    if (peek() == '+' || peek() == '-') {
      negative = peek() == '-';
      ++pos_;
      skip_ws();
    }
    for (;;) {
      parse_term(negative, terms);
      skip_ws();
      if (pos_ == text_.size()) break;
      if (peek() != '+' && peek() != '-') fail("expected '+', '-', '*' or the end");
      negative = peek() == '-';
      ++pos_;
      skip_ws();
    }
    return terms;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    // Long inputs (fuzzed JSON) are quoted in part.
    const std::string shown = text_.size() > 80 ? text_.substr(0, 77) + "..." : text_;
    throw std::invalid_argument("bad polynomial \"" + shown + "\" at position " +
                                std::to_string(pos) + ": " + what);
  }

  // Returns the magnitude of an unsigned decimal literal, at most 2^63.
  uint64_t parse_integer() {
    const size_t start = pos_;
    if (!(peek() >= '0' && peek() <= '9')) fail("expected an integer, B or T");
    uint64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      const uint64_t digit = static_cast<uint64_t>(peek() - '0');
      if (__builtin_mul_overflow(value, uint64_t{10}, &value) ||
          __builtin_add_overflow(value, digit, &value) || value > kMagnitudeLimit)
        fail_at(start, "integer does not fit in 64 bits");
      ++pos_;
    }
    return value;
  }

  void parse_term(bool negative, std::map<std::pair<int, int>, int64_t>& terms) {
    const size_t start = pos_;
    uint64_t magnitude = 1;
    int b_pow = 0, t_pow = 0;
    for (;;) {
      const char c = peek();
      if (c == 'B' || c == 'T') {
        ++pos_;
        skip_ws();
        int power = 1;
        if (peek() == '^') {
          ++pos_;
          skip_ws();
          const size_t power_pos = pos_;
          const uint64_t p = parse_integer();
          if (p > kMaxParsedPower)
            fail_at(power_pos, "exponent above " + std::to_string(kMaxParsedPower));
          power = static_cast<int>(p);
        }
        int& total = c == 'B' ? b_pow : t_pow;
        total += power;
        if (total > kMaxParsedPower)
          fail_at(start, "exponent above " + std::to_string(kMaxParsedPower));
      } else {
        if (__builtin_mul_overflow(magnitude, parse_integer(), &magnitude) ||
            magnitude > kMagnitudeLimit)
          fail_at(start, "coefficient does not fit in 64 bits");
      }
      skip_ws();
      if (peek() != '*') break;
      ++pos_;
      skip_ws();
    }
    // -2^63 is representable, +2^63 is not.
    if (!negative && magnitude == kMagnitudeLimit)
      fail_at(start, "coefficient does not fit in 64 bits");
    const int64_t value =
        negative ? static_cast<int64_t>(uint64_t{0} - magnitude) : static_cast<int64_t>(magnitude);
    try {
      accumulate(terms, {b_pow, t_pow}, value, "poly parse");
    } catch (const std::overflow_error&) {
      fail_at(start, "sum of coefficients does not fit in 64 bits");
    }
  }

  const std::string& text_;
  size_t pos_ = 0;
};

// base^power with overflow detection; power >= 0.
int64_t checked_pow(int64_t base, int power) {
  int64_t r = 1;
  for (int i = 0; i < power; ++i) {
    r = checked_mul(r, base, "Poly::eval");
    if (r == 0) break;
  }
  return r;
}

}  // namespace

Poly Poly::constant(int64_t c) {
  return term(c, 0, 0);
}

Poly Poly::term(int64_t c, int b_pow, int t_pow) {
  if (b_pow < 0 || t_pow < 0 || b_pow > kMaxPower || t_pow > kMaxPower)
    throw std::invalid_argument("Poly::term: exponents must be in [0, " +
                                std::to_string(kMaxPower) + "]");
  Poly p;
  if (c != 0) p.terms_.emplace(std::make_pair(b_pow, t_pow), c);
  return p;
}

Poly Poly::parse(const std::string& text) {
  Poly p;
  p.terms_ = Parser(text).parse();
  return p;
}

Poly Poly::operator+(const Poly& other) const {
  Poly r = *this;
  for (const auto& [key, c] : other.terms_) accumulate(r.terms_, key, c, "Poly +");
  return r;
}

Poly Poly::operator*(const Poly& other) const {
  Poly r;
  for (const auto& [ka, ca] : terms_) {
    for (const auto& [kb, cb] : other.terms_) {
      const int b_pow = ka.first + kb.first, t_pow = ka.second + kb.second;
      if (b_pow > kMaxPower || t_pow > kMaxPower)
        throw std::overflow_error("Poly *: exponent above " + std::to_string(kMaxPower));
      accumulate(r.terms_, {b_pow, t_pow}, checked_mul(ca, cb, "Poly *"), "Poly *");
    }
  }
  return r;
}

Poly Poly::operator*(int64_t k) const {
  Poly r;
  for (const auto& [key, c] : terms_)
    accumulate(r.terms_, key, checked_mul(c, k, "Poly *"), "Poly *");
  return r;
}

int64_t Poly::eval(const Workload& w) const {
  int64_t sum = 0;
  for (const auto& [key, c] : terms_) {
    int64_t v = checked_mul(c, checked_pow(w.batch, key.first), "Poly::eval");
    v = checked_mul(v, checked_pow(w.seq, key.second), "Poly::eval");
    sum = checked_add(sum, v, "Poly::eval");
  }
  return sum;
}

double Poly::eval_double(const Workload& w) const {
  double sum = 0.0;
  for (const auto& [key, c] : terms_) {
    double v = static_cast<double>(c);
    for (int i = 0; i < key.first; ++i) v *= static_cast<double>(w.batch);
    for (int i = 0; i < key.second; ++i) v *= static_cast<double>(w.seq);
    sum += v;
  }
  return sum;
}

// Canonical form: terms sorted by (B power, T power), each "c*B^i*T^j" with a
// coefficient of 1 and exponents of 1 left out, negative terms written with
// " - "; the zero polynomial is "0". Poly::parse reads it back exactly.
std::string Poly::to_string() const {
  if (terms_.empty()) return "0";
  std::string out;
  for (const auto& [key, c] : terms_) {
    const bool negative = c < 0;
    // Magnitude as unsigned so that INT64_MIN prints correctly.
    const uint64_t magnitude =
        negative ? static_cast<uint64_t>(0) - static_cast<uint64_t>(c) : static_cast<uint64_t>(c);
    if (out.empty()) {
      if (negative) out += "-";
    } else {
      out += negative ? " - " : " + ";
    }
    std::string factors;
    auto add_symbol = [&factors](const char* symbol, int power) {
      if (power == 0) return;
      if (!factors.empty()) factors += "*";
      factors += symbol;
      if (power > 1) factors += "^" + std::to_string(power);
    };
    add_symbol("B", key.first);
    add_symbol("T", key.second);
    if (factors.empty()) {
      out += std::to_string(magnitude);
    } else {
      if (magnitude != 1) out += std::to_string(magnitude) + "*";
      out += factors;
    }
  }
  return out;
}

}  // namespace shardscope::plan
