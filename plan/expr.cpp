#include "plan/expr.h"

#include <climits>
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

// Adds c * (the term of `key`) into terms, dropping it if it cancels to zero.
template <class Key>
void accumulate(std::map<Key, int64_t>& terms, const Key& key, int64_t c, const char* what) {
  if (c == 0) return;
  auto it = terms.find(key);
  if (it == terms.end()) {
    terms.emplace(key, c);
    return;
  }
  it->second = checked_add(it->second, c, what);
  if (it->second == 0) terms.erase(it);
}

using Terms = std::map<std::pair<int, int>, int64_t>;
using RoutedTerms = std::map<Poly::RoutedKey, int64_t>;

void check_routed(int64_t expert, int64_t experts, int64_t top_k) {
  if (experts < 1 || expert < 0 || expert >= experts || top_k < 1 || top_k > experts)
    throw std::invalid_argument("routed(" + std::to_string(expert) + "," + std::to_string(experts) +
                                "," + std::to_string(top_k) +
                                "): needs 0 <= expert < experts and 1 <= top_k <= experts");
}

// Recursive-descent parser over the grammar
//   poly   := ws [sign ws] term (ws sign ws term)* ws
//   term   := factor (ws '*' ws factor)*      (at most one routed factor)
//   factor := integer | ('B' | 'T') [ws '^' ws integer]
//           | 'routed' ws '(' ws integer ws ',' ws integer ws ',' ws integer ws ')'
//   sign   := '+' | '-'
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Terms parse(RoutedTerms& routed) {
    Terms terms;
    skip_ws();
    if (pos_ == text_.size()) fail("empty expression");
    bool negative = false;
    if (peek() == '+' || peek() == '-') {
      negative = peek() == '-';
      ++pos_;
      skip_ws();
    }
    for (;;) {
      parse_term(negative, terms, routed);
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

  // An integer argument of routed(...).
  int64_t parse_argument() {
    skip_ws();
    const size_t at = pos_;
    const uint64_t v = parse_integer();
    if (v > static_cast<uint64_t>(INT64_MAX)) fail_at(at, "routed argument too large");
    skip_ws();
    return static_cast<int64_t>(v);
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  void parse_term(bool negative, Terms& terms, RoutedTerms& routed) {
    const size_t start = pos_;
    uint64_t magnitude = 1;
    int b_pow = 0, t_pow = 0;
    bool has_route = false;
    int64_t route[3] = {0, 0, 0};
    for (;;) {
      const char c = peek();
      if (c == 'r') {
        const size_t at = pos_;
        static const std::string kWord = "routed";
        if (text_.compare(pos_, kWord.size(), kWord) != 0) fail("expected an integer, B or T");
        if (has_route) fail_at(at, "a term has at most one routed factor");
        pos_ += kWord.size();
        skip_ws();
        expect('(');
        for (int i = 0; i < 3; ++i) {
          route[i] = parse_argument();
          expect(i < 2 ? ',' : ')');
        }
        try {
          check_routed(route[0], route[1], route[2]);
        } catch (const std::invalid_argument& e) {
          fail_at(at, e.what());
        }
        has_route = true;
      } else if (c == 'B' || c == 'T') {
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
      if (has_route)
        accumulate(routed, Poly::RoutedKey{b_pow, t_pow, route[0], route[1], route[2]}, value,
                   "poly parse");
      else
        accumulate(terms, std::pair<int, int>{b_pow, t_pow}, value, "poly parse");
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

// Expert `expert`'s tokens of one sequence: floor(n*c_{e+1}) - floor(n*c_e)
// with n = seq * top_k (expr.h, TokenBalance).
int64_t floor_share(int64_t n, int64_t num, int64_t den) {
  return checked_mul(n, num, "routed tokens") / den;  // n, num >= 0: truncation is floor
}

}  // namespace

bool Workload::same_as(const Workload& other) const {
  if (batch != other.batch || seq != other.seq) return false;
  const TokenBalance uniform;
  const TokenBalance& a = balance ? *balance : uniform;
  const TokenBalance& b = other.balance ? *other.balance : uniform;
  return a == b;
}

int64_t routed_tokens(int64_t seq, int64_t expert, int64_t experts, int64_t top_k,
                      const TokenBalance* balance) {
  check_routed(expert, experts, top_k);
  if (seq < 0) throw std::invalid_argument("routed tokens: negative sequence length");
  const TokenBalance::Mode mode = balance ? balance->mode : TokenBalance::Mode::uniform;
  const int64_t n = checked_mul(seq, top_k, "routed tokens");
  switch (mode) {
    case TokenBalance::Mode::all_tokens:
      return seq;
    case TokenBalance::Mode::uniform:
      return floor_share(n, expert + 1, experts) - floor_share(n, expert, experts);
    case TokenBalance::Mode::weights:
      break;
  }
  const std::vector<int64_t>& c = balance->cumulative;
  if (c.size() != static_cast<size_t>(experts) + 1)
    throw std::invalid_argument("routed tokens: the token balance has " +
                                std::to_string(c.empty() ? 0 : c.size() - 1) +
                                " weights for a layer of " + std::to_string(experts) + " experts");
  const int64_t s = TokenBalance::kShareScale;
  return floor_share(n, c[static_cast<size_t>(expert) + 1], s) -
         floor_share(n, c[static_cast<size_t>(expert)], s);
}

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

Poly Poly::routed(int64_t c, int b_pow, int t_pow, int64_t expert, int64_t experts, int64_t top_k) {
  if (b_pow < 0 || t_pow < 0 || b_pow > kMaxPower || t_pow > kMaxPower)
    throw std::invalid_argument("Poly::routed: exponents must be in [0, " +
                                std::to_string(kMaxPower) + "]");
  check_routed(expert, experts, top_k);
  Poly p;
  if (c != 0) p.routed_.emplace(RoutedKey{b_pow, t_pow, expert, experts, top_k}, c);
  return p;
}

Poly Poly::parse(const std::string& text) {
  Poly p;
  p.terms_ = Parser(text).parse(p.routed_);
  return p;
}

Poly Poly::operator+(const Poly& other) const {
  Poly r = *this;
  r += other;
  return r;
}

Poly& Poly::operator+=(const Poly& other) {
  for (const auto& [key, c] : other.terms_) accumulate(terms_, key, c, "Poly +");
  for (const auto& [key, c] : other.routed_) accumulate(routed_, key, c, "Poly +");
  return *this;
}

namespace {
std::pair<int, int> add_powers(int b1, int t1, int b2, int t2) {
  const int b_pow = b1 + b2, t_pow = t1 + t2;
  if (b_pow > kMaxPower || t_pow > kMaxPower)
    throw std::overflow_error("Poly *: exponent above " + std::to_string(kMaxPower));
  return {b_pow, t_pow};
}
}  // namespace

Poly Poly::operator*(const Poly& other) const {
  if (!routed_.empty() && !other.routed_.empty())
    throw std::domain_error("Poly *: a product of two routed-token terms (" + to_string() +
                            ") * (" + other.to_string() + ")");
  Poly r;
  for (const auto& [ka, ca] : terms_) {
    for (const auto& [kb, cb] : other.terms_)
      accumulate(r.terms_, add_powers(ka.first, ka.second, kb.first, kb.second),
                 checked_mul(ca, cb, "Poly *"), "Poly *");
    for (const auto& [kb, cb] : other.routed_) {
      const auto [b_pow, t_pow] = add_powers(ka.first, ka.second, std::get<0>(kb), std::get<1>(kb));
      accumulate(r.routed_,
                 RoutedKey{b_pow, t_pow, std::get<2>(kb), std::get<3>(kb), std::get<4>(kb)},
                 checked_mul(ca, cb, "Poly *"), "Poly *");
    }
  }
  for (const auto& [ka, ca] : routed_) {
    for (const auto& [kb, cb] : other.terms_) {
      const auto [b_pow, t_pow] = add_powers(std::get<0>(ka), std::get<1>(ka), kb.first, kb.second);
      accumulate(r.routed_,
                 RoutedKey{b_pow, t_pow, std::get<2>(ka), std::get<3>(ka), std::get<4>(ka)},
                 checked_mul(ca, cb, "Poly *"), "Poly *");
    }
  }
  return r;
}

Poly Poly::operator*(int64_t k) const {
  Poly r;
  for (const auto& [key, c] : terms_)
    accumulate(r.terms_, key, checked_mul(c, k, "Poly *"), "Poly *");
  for (const auto& [key, c] : routed_)
    accumulate(r.routed_, key, checked_mul(c, k, "Poly *"), "Poly *");
  return r;
}

namespace {
int64_t routed_value(const Poly::RoutedKey& key, const Workload& w) {
  return routed_tokens(w.seq, std::get<2>(key), std::get<3>(key), std::get<4>(key),
                       w.balance.get());
}
}  // namespace

int64_t Poly::eval(const Workload& w) const {
  int64_t sum = 0;
  for (const auto& [key, c] : terms_) {
    int64_t v = checked_mul(c, checked_pow(w.batch, key.first), "Poly::eval");
    v = checked_mul(v, checked_pow(w.seq, key.second), "Poly::eval");
    sum = checked_add(sum, v, "Poly::eval");
  }
  for (const auto& [key, c] : routed_) {
    int64_t v = checked_mul(c, checked_pow(w.batch, std::get<0>(key)), "Poly::eval");
    v = checked_mul(v, checked_pow(w.seq, std::get<1>(key)), "Poly::eval");
    v = checked_mul(v, routed_value(key, w), "Poly::eval");
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
  for (const auto& [key, c] : routed_) {
    double v = static_cast<double>(c) * static_cast<double>(routed_value(key, w));
    for (int i = 0; i < std::get<0>(key); ++i) v *= static_cast<double>(w.batch);
    for (int i = 0; i < std::get<1>(key); ++i) v *= static_cast<double>(w.seq);
    sum += v;
  }
  return sum;
}

// Canonical form: terms sorted by (B power, T power), each "c*B^i*T^j" with a
// coefficient of 1 and exponents of 1 left out, negative terms written with
// " - "; the zero polynomial is "0". Poly::parse reads it back exactly.
std::string Poly::to_string() const {
  if (is_zero()) return "0";
  std::string out;
  // Plain terms, then routed ones (a routed factor last in its term).
  std::vector<std::pair<RoutedKey, int64_t>> all;
  for (const auto& [key, c] : terms_)
    all.push_back({RoutedKey{key.first, key.second, -1, 0, 0}, c});
  for (const auto& [key, c] : routed_) all.push_back({key, c});
  for (const auto& [rkey, c] : all) {
    const std::pair<int, int> key{std::get<0>(rkey), std::get<1>(rkey)};
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
    if (std::get<2>(rkey) >= 0) {
      if (!factors.empty()) factors += "*";
      factors += "routed(" + std::to_string(std::get<2>(rkey)) + "," +
                 std::to_string(std::get<3>(rkey)) + "," + std::to_string(std::get<4>(rkey)) + ")";
    }
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
