#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <memory>
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

// ---- routed-token terms (mixture of experts) ----------------------------------

using shardscope::plan::routed_tokens;
using shardscope::plan::TokenBalance;

TEST_CASE("routed tokens: uniform gives floor or ceil of T*k/E, summing to T*k exactly",
          "[plan][expr][moe]") {
  // T = 10, k = 2, E = 8: 20 assignments; floor(20(e+1)/8) - floor(20e/8) =
  // 2, 3, 2, 3, 2, 3, 2, 3.
  const int64_t want[8] = {2, 3, 2, 3, 2, 3, 2, 3};
  for (int64_t e = 0; e < 8; ++e) CHECK(routed_tokens(10, e, 8, 2, nullptr) == want[e]);
  for (int64_t t : {1, 7, 16, 1000, 4096})
    for (int64_t experts : {2, 8, 60})
      for (int64_t k : {1, 2, 4}) {
        if (k > experts) continue;
        int64_t sum = 0;
        for (int64_t e = 0; e < experts; ++e) {
          const int64_t n = routed_tokens(t, e, experts, k, nullptr);
          CHECK(n >= (t * k) / experts);
          CHECK(n <= (t * k + experts - 1) / experts);
          sum += n;
        }
        CHECK(sum == t * k);
      }
}

TEST_CASE("routed tokens: explicit weights split by cumulative shares, all_tokens is T",
          "[plan][expr][moe]") {
  TokenBalance w;
  w.mode = TokenBalance::Mode::weights;
  // Weights 0.5, 0.25, 0.125, 0.125 in units of 1e-9.
  w.cumulative = {0, 500000000, 750000000, 875000000, 1000000000};
  // T = 16, k = 1: 8, 4, 2, 2. T = 3, k = 1 (3 assignments): floor(1.5) = 1,
  // floor(2.25) - 1 = 1, floor(2.625) - 2 = 0, 3 - 2 = 1.
  const int64_t t16[4] = {8, 4, 2, 2}, t3[4] = {1, 1, 0, 1};
  for (int64_t e = 0; e < 4; ++e) {
    CHECK(routed_tokens(16, e, 4, 1, &w) == t16[e]);
    CHECK(routed_tokens(3, e, 4, 1, &w) == t3[e]);
  }
  CHECK_THROWS_AS(routed_tokens(16, 0, 8, 1, &w), std::invalid_argument);  // 4 weights, 8 experts
  TokenBalance all;
  all.mode = TokenBalance::Mode::all_tokens;
  CHECK(routed_tokens(16, 3, 8, 2, &all) == 16);
  CHECK_THROWS_AS(routed_tokens(16, 8, 8, 2, nullptr), std::invalid_argument);  // no expert 8
  CHECK_THROWS_AS(routed_tokens(16, 0, 8, 9, nullptr), std::invalid_argument);  // k > E
}

TEST_CASE("Poly routed terms: arithmetic, eval under a balance, text round trip",
          "[plan][expr][moe]") {
  // Expert 1 of 8, top-2: rows B*routed(1,8,2), times hidden 64.
  const Poly rows = Poly::routed(1, 1, 0, 1, 8, 2);
  const Poly x = rows * Poly::constant(64);
  CHECK(x.to_string() == "64*B*routed(1,8,2)");
  CHECK(Poly::parse("64*B*routed(1,8,2)") == x);
  CHECK(Poly::parse("B * 64 * routed ( 1 , 8 , 2 )") == x);
  // B = 3, T = 10: expert 1 gets 3 tokens per sequence (above), 9 rows, 576 elements.
  CHECK(x.eval({3, 10}) == 576);
  CHECK(x.eval_double({3, 10}) == 576.0);
  // A sum over experts is B*T*k whatever the balance.
  Poly all;
  for (int64_t e = 0; e < 8; ++e) all = all + Poly::routed(1, 1, 0, e, 8, 2);
  CHECK(all.eval({3, 10}) == 60);
  auto weights = std::make_shared<TokenBalance>();
  weights->mode = TokenBalance::Mode::weights;
  weights->cumulative = {0,         0,         250000000, 500000000, 500000000,
                         625000000, 750000000, 875000000, 1000000000};
  Workload w{3, 10, weights};
  CHECK(all.eval(w) == 60);
  CHECK(x.eval(w) == 64 * 3 * 5);  // expert 1: floor(20 * 0.25) - 0 = 5 tokens per sequence
  // Mixed plain and routed terms print plain first and parse back.
  const Poly mixed = Poly::parse("routed(0,2,1)*T + 5 + B");
  CHECK(mixed.to_string() == "5 + B + T*routed(0,2,1)");
  CHECK(Poly::parse(mixed.to_string()) == mixed);
  CHECK((x + x * -1).is_zero());
  CHECK_THROWS_AS(rows * rows, std::domain_error);
  CHECK_THAT(parse_error("routed(1,8,2)*routed(0,8,2)"), Catch::Contains("at most one routed"));
  CHECK_THAT(parse_error("routed(8,8,2)"), Catch::Contains("position 0"));
  CHECK_THAT(parse_error("routed(1,8)"), Catch::Contains("expected ','"));
  CHECK_THAT(parse_error("route"), Catch::Contains("position 0"));
  CHECK_THROWS_AS(Poly::routed(1, 0, 0, 0, 0, 1), std::invalid_argument);
  // Workloads compare their balances, null being uniform.
  auto uniform = std::make_shared<TokenBalance>();
  CHECK(Workload{3, 10}.same_as(Workload{3, 10, uniform}));
  CHECK(!Workload{3, 10}.same_as(w));
  CHECK(!Workload{3, 10}.same_as(Workload{3, 11}));
}
