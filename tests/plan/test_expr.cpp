#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "plan/expr.h"

using shardscope::plan::Poly;
using shardscope::plan::Workload;

namespace {

// The message of the std::invalid_argument that parsing `text` throws.
std::string parse_error(const std::string& text) {
  try {
    Poly::parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("Poly parses a GPT-2 attention FLOP count into B*T and B*T^2 terms", "[plan][expr]") {
  // 2*B*T*768*2304 + 4*B*T*T*768 = 3538944*B*T + 3072*B*T^2
  const Poly p = Poly::parse("2*B*T*768*2304 + 4*B*T*T*768");
  REQUIRE(p.terms().size() == 2);
  CHECK(p.terms().at({1, 1}) == 3538944);
  CHECK(p.terms().at({1, 2}) == 3072);
  CHECK(p.to_string() == "3538944*B*T + 3072*B*T^2");
  CHECK(p.eval({2, 3}) == 3538944 * 6 + 3072 * 18);
}

TEST_CASE("Poly canonical text is sorted by (B power, T power) and parses back", "[plan][expr]") {
  CHECK(Poly::parse("T + B + 7 + B*T").to_string() == "7 + T + B + B*T");
  CHECK(Poly::parse(" B ^ 2 *3 ").to_string() == "3*B^2");
  CHECK(Poly::parse("T*B*T").to_string() == "B*T^2");
  CHECK(Poly::parse("-B + 5").to_string() == "5 - B");
  CHECK(Poly::parse("-5 - 2*T").to_string() == "-5 - 2*T");
  CHECK(Poly::parse("0").to_string() == "0");
  CHECK(Poly::parse("B - B").is_zero());  // cancelled terms are dropped
  CHECK(Poly::parse("B^0*4").to_string() == "4");
  for (const char* text : {"7 + T + B + B*T", "3*B^2", "5 - B", "-5 - 2*T", "0", "B*T^2",
                           "-9223372036854775808*T", "9223372036854775807*B^64*T^64"}) {
    INFO(text);
    CHECK(Poly::parse(text).to_string() == text);
  }
}

TEST_CASE("Poly to_string parses back to an equal Poly for random polynomials", "[plan][expr]") {
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int> power(0, 3);
  std::uniform_int_distribution<int64_t> coef(-1000000, 1000000);
  for (int i = 0; i < 500; ++i) {
    Poly p;
    const int n = static_cast<int>(rng() % 5);
    for (int k = 0; k < n; ++k) p = p + Poly::term(coef(rng), power(rng), power(rng));
    if (rng() % 4 == 0) p = p + Poly::term(std::numeric_limits<int64_t>::min(), 4, 4);
    const std::string text = p.to_string();
    INFO(text);
    CHECK(Poly::parse(text) == p);
  }
}

TEST_CASE("Poly arithmetic: (B+1)^2 and scaling", "[plan][expr]") {
  const Poly b1 = Poly::term(1, 1, 0) + Poly::constant(1);
  CHECK((b1 * b1).to_string() == "1 + 2*B + B^2");
  CHECK((b1 * 3).to_string() == "3 + 3*B");
  CHECK((b1 * 0).is_zero());
  CHECK(Poly::term(0, 2, 2).is_zero());
  CHECK(Poly::term(5, 0, 0) == Poly::constant(5));
  CHECK_THROWS_AS(Poly::term(1, -1, 0), std::invalid_argument);
  CHECK_THROWS_AS(Poly::constant(std::numeric_limits<int64_t>::max()) * 2, std::overflow_error);
  CHECK_THROWS_AS(Poly::constant(std::numeric_limits<int64_t>::max()) + Poly::constant(1),
                  std::overflow_error);
}

TEST_CASE("Poly eval is exact and detects int64 overflow", "[plan][expr]") {
  const Poly p = Poly::parse("2*B*T*768 + 4*B*T^2*768");
  // B=8, T=1024: 2*8*1024*768 + 4*8*1024^2*768 = 12582912 + 25769803776
  CHECK(p.eval({8, 1024}) == 12582912 + 25769803776LL);
  CHECK(p.eval_double({8, 1024}) == Approx(12582912.0 + 25769803776.0));
  CHECK(Poly().eval({5, 5}) == 0);
  CHECK(Poly::parse("7").eval({0, 0}) == 7);

  const Poly b4 = Poly::parse("B^4");
  CHECK(b4.eval({int64_t{1} << 15, 1}) == int64_t{1} << 60);
  CHECK_THROWS_AS(b4.eval({int64_t{1} << 16, 1}), std::overflow_error);  // 2^64
  CHECK(b4.eval_double({int64_t{1} << 16, 1}) == Approx(18446744073709551616.0));
  // Each term fits; their sum does not.
  const Poly sum = Poly::parse("9223372036854775807 + B");
  CHECK(sum.eval({0, 1}) == std::numeric_limits<int64_t>::max());
  CHECK_THROWS_AS(sum.eval({1, 1}), std::overflow_error);
  // Negative coefficients.
  CHECK(Poly::parse("-9223372036854775808 + B").eval({1, 1}) ==
        std::numeric_limits<int64_t>::min() + 1);
}

TEST_CASE("Poly parse errors give the character position", "[plan][expr]") {
  CHECK_THAT(parse_error("2*X"), Catch::Contains("position 2"));
  CHECK_THAT(parse_error(""), Catch::Contains("position 0") && Catch::Contains("empty"));
  CHECK_THAT(parse_error("   "), Catch::Contains("position 3"));
  CHECK_THAT(parse_error("2**B"), Catch::Contains("position 2"));
  CHECK_THAT(parse_error("B^"), Catch::Contains("position 2"));
  CHECK_THAT(parse_error("B^-1"), Catch::Contains("position 2"));
  CHECK_THAT(parse_error("2 +"), Catch::Contains("position 3"));
  CHECK_THAT(parse_error("2 3"), Catch::Contains("position 2"));
  CHECK_THAT(parse_error("2*B)"), Catch::Contains("position 3"));
  CHECK_THAT(parse_error("b*t"), Catch::Contains("position 0"));
  CHECK_THAT(parse_error("B^65"), Catch::Contains("position 2") && Catch::Contains("exponent"));
  CHECK_THAT(parse_error("B^40*B^40"), Catch::Contains("exponent"));
  CHECK_THAT(parse_error("4*99999999999999999999"),
             Catch::Contains("position 2") && Catch::Contains("64 bits"));
  CHECK_THAT(parse_error("9223372036854775808"), Catch::Contains("64 bits"));  // 2^63
  CHECK_THAT(parse_error("4294967296*4294967296"), Catch::Contains("position 0"));
  CHECK_THAT(parse_error("9223372036854775807 + 1"), Catch::Contains("position 22"));
  CHECK_THAT(parse_error("2*B*Q"), Catch::Contains("\"2*B*Q\""));  // quotes the input
}

TEST_CASE("Poly parse of random strings either fails cleanly or round-trips", "[plan][expr]") {
  const std::string alphabet = "0123456789BT^*+- \tx";
  std::mt19937 rng(99);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const size_t n = rng() % 12;
    for (size_t k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    Poly p;
    try {
      p = Poly::parse(text);
    } catch (const std::invalid_argument& e) {
      INFO(text);
      CHECK_THAT(e.what(), Catch::Contains("position"));
      continue;
    }
    ++parsed;
    INFO(text << " -> " << p.to_string());
    CHECK(Poly::parse(p.to_string()) == p);
  }
  CHECK(parsed > 100);  // the alphabet does produce valid expressions
}
