// Embedding (token ids with repeats, positions) and mean cross entropy against
// float64 references, central differences and closed forms; range checks.
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "tests/engine/cpu/grad_check.h"
#include "tests/engine/cpu/ref_ops.h"

namespace shardscope::engine::cpu::test {

TEST_CASE(
    "embedding with repeated ids: forward gathers rows, backward sums the repeats' gradients") {
  const int64_t rows = 5, dim = 3;
  const std::vector<int64_t> ids = {2, 0, 2, 4, 2, 1};  // id 2 three times, id 3 never
  const int64_t n = static_cast<int64_t>(ids.size());
  std::mt19937_64 rng(61);
  const FVec table = random_values(rng, rows * dim), dout = random_values(rng, n * dim);
  auto ref = [&](const Vec& t) {
    Vec out(static_cast<size_t>(n * dim));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) out[i * dim + c] = t[ids[i] * dim + c];
    return out;
  };
  FVec out(n * dim);
  embedding_forward(ids.data(), table.data(), out.data(), n, rows, dim);
  check_close(out, ref(to_double(table)), 0.0, "out");  // a gather is exact

  const FVec dtable0 = random_values(rng, rows * dim);
  FVec dtable = dtable0;
  embedding_backward(ids.data(), dout.data(), dtable.data(), n, rows, dim);
  const Vec doutd = to_double(dout);
  const Vec numeric =
      numeric_grad([&](const Vec& t) { return dot(doutd, ref(t)); }, to_double(table));
  check_close(dtable, numeric, kGradTol, "dtable", dtable0);
  // Row 2 gets dout rows 0 + 2 + 4; row 3 is untouched.
  for (int64_t c = 0; c < dim; ++c) {
    CHECK(dtable[2 * dim + c] ==
          Approx(dtable0[2 * dim + c] + dout[0 * dim + c] + dout[2 * dim + c] + dout[4 * dim + c])
              .margin(1e-6));
    CHECK(dtable[3 * dim + c] == dtable0[3 * dim + c]);
  }
}

TEST_CASE("embedding backward with padding_idx: that row gets nothing, the others as without") {
  // nn.Embedding(padding_idx=1) (OPT's pad_token_id): ids equal to 1 add no gradient.
  const int64_t rows = 4, dim = 2;
  const std::vector<int64_t> ids = {1, 0, 1, 3};
  std::mt19937_64 rng(63);
  const FVec dout = random_values(rng, 4 * dim);
  FVec plain(rows * dim, 0.0f), padded(rows * dim, 0.0f);
  embedding_backward(ids.data(), dout.data(), plain.data(), 4, rows, dim);
  embedding_backward(ids.data(), dout.data(), padded.data(), 4, rows, dim, 1);
  for (int64_t c = 0; c < dim; ++c) {
    CHECK(plain[1 * dim + c] == dout[0 * dim + c] + dout[2 * dim + c]);
    CHECK(padded[1 * dim + c] == 0.0f);
    for (const int64_t row : {0, 2, 3}) CHECK(padded[row * dim + c] == plain[row * dim + c]);
  }
  CHECK_THROWS_WITH(embedding_backward(ids.data(), dout.data(), padded.data(), 4, rows, dim, 4),
                    Catch::Contains("padding_idx 4 is not -1 or a row of 4"));
}

TEST_CASE("embedding positions mode (ids == nullptr): row i for i < n, backward into rows < n") {
  const int64_t rows = 6, dim = 2, n = 4;
  std::mt19937_64 rng(62);
  const FVec table = random_values(rng, rows * dim), dout = random_values(rng, n * dim);
  FVec out(n * dim);
  embedding_forward(nullptr, table.data(), out.data(), n, rows, dim);
  for (int64_t i = 0; i < n * dim; ++i) CHECK(out[i] == table[i]);
  const FVec dtable0 = random_values(rng, rows * dim);
  FVec dtable = dtable0;
  embedding_backward(nullptr, dout.data(), dtable.data(), n, rows, dim);
  Vec want(static_cast<size_t>(rows * dim), 0.0);
  for (int64_t i = 0; i < n * dim; ++i) want[i] = dout[i];
  check_close(dtable, want, kGradTol, "dtable", dtable0);
  CHECK_THROWS_AS(embedding_forward(nullptr, table.data(), out.data(), rows + 1, rows, dim),
                  std::out_of_range);
}

TEST_CASE("embedding id out of range throws out_of_range naming the id and its index") {
  const FVec table(4 * 2, 1.0f);
  FVec out(3 * 2);
  const std::vector<int64_t> too_big = {0, 1, 4}, negative = {-1, 0, 0};
  CHECK_THROWS_AS(embedding_forward(too_big.data(), table.data(), out.data(), 3, 4, 2),
                  std::out_of_range);
  CHECK_THROWS_WITH(embedding_forward(too_big.data(), table.data(), out.data(), 3, 4, 2),
                    Catch::Contains("id 4 at index 2"));
  CHECK_THROWS_WITH(embedding_backward(negative.data(), out.data(), out.data(), 3, 4, 2),
                    Catch::Contains("id -1 at index 0"));
}

TEST_CASE(
    "cross_entropy: loss and log_probs match float64 reference, dlogits central differences") {
  const int64_t n = 4, v = 7;
  const std::vector<int64_t> labels = {3, 0, 6, 3};
  std::mt19937_64 rng(63);
  const FVec logits = random_values(rng, n * v, 0.1, 3.0);
  const Vec ld = to_double(logits);
  FVec log_probs(n * v);
  const double loss = cross_entropy_forward(logits.data(), labels.data(), log_probs.data(), n, v);
  Vec ref_log_probs;
  const double ref_loss = cross_entropy_ref(ld, labels, n, v, &ref_log_probs);
  CHECK(loss == Approx(ref_loss).epsilon(kForwardTol));
  check_close(log_probs, ref_log_probs, kForwardTol, "log_probs");

  const float dloss = 0.75f;  // upstream gradient (e.g. 1 / grad_accum_steps)
  const FVec d0 = random_values(rng, n * v);
  FVec dlogits = d0;
  cross_entropy_backward(log_probs.data(), labels.data(), dloss, dlogits.data(), n, v);
  check_close(
      dlogits,
      numeric_grad([&](const Vec& x) { return dloss * cross_entropy_ref(x, labels, n, v); }, ld),
      kGradTol, "dlogits", d0);
}

TEST_CASE("cross_entropy of equal logits is log(V), gradient (1/V - onehot)/N") {
  const int64_t n = 2, v = 8;
  const FVec logits(n * v, 2.5f);
  const std::vector<int64_t> labels = {1, 7};
  FVec log_probs(n * v), dlogits(n * v, 0.0f);
  CHECK(cross_entropy_forward(logits.data(), labels.data(), log_probs.data(), n, v) ==
        Approx(std::log(8.0)).epsilon(1e-7));
  cross_entropy_backward(log_probs.data(), labels.data(), 1.0f, dlogits.data(), n, v);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < v; ++j)
      CHECK(dlogits[i * v + j] ==
            Approx((1.0 / 8.0 - (j == labels[i] ? 1.0 : 0.0)) / 2.0).margin(1e-7));
}

TEST_CASE("cross_entropy label out of range throws out_of_range naming the label and its index") {
  const FVec logits(2 * 3, 0.5f);
  FVec log_probs(2 * 3);
  const std::vector<int64_t> labels = {0, 3};
  CHECK_THROWS_AS(cross_entropy_forward(logits.data(), labels.data(), log_probs.data(), 2, 3),
                  std::out_of_range);
  CHECK_THROWS_WITH(cross_entropy_forward(logits.data(), labels.data(), log_probs.data(), 2, 3),
                    Catch::Contains("label 3 at index 1"));
  FVec d(2 * 3, 0.0f);
  CHECK_THROWS_AS(cross_entropy_backward(log_probs.data(), labels.data(), 1.0f, d.data(), 2, 3),
                  std::out_of_range);
}

TEST_CASE(
    "cross_entropy over the first valid columns: the unpadded loss to the bit, padding inert") {
  // A padded vocabulary (plan/vocab_padding.h): rows of Vp = 8 columns whose
  // first V = 5 are the classes. The padded logits are the largest, so that
  // letting them into the softmax would change every value.
  const int64_t n = 3, valid = 5, vp = 8;
  std::mt19937_64 rng(17);
  const FVec packed = random_values(rng, n * valid);
  FVec padded(static_cast<size_t>(n * vp), 9.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < valid; ++j) padded[i * vp + j] = packed[i * valid + j];
  const std::vector<int64_t> labels = {4, 0, 2};
  FVec lp_packed(packed.size()), lp_padded(padded.size());
  const double loss_packed =
      cross_entropy_forward(packed.data(), labels.data(), lp_packed.data(), n, valid);
  const double loss_padded =
      cross_entropy_forward(padded.data(), labels.data(), lp_padded.data(), n, vp, valid);
  CHECK(loss_padded == loss_packed);  // bitwise: the same loop over the same values
  FVec d_packed(packed.size(), 0.0f), d_padded(padded.size(), 0.25f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < valid; ++j) d_padded[i * vp + j] = 0.0f;
  cross_entropy_backward(lp_packed.data(), labels.data(), 0.5f, d_packed.data(), n, valid);
  cross_entropy_backward(lp_padded.data(), labels.data(), 0.5f, d_padded.data(), n, vp, valid);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < vp; ++j) {
      if (j < valid) {
        CHECK(lp_padded[i * vp + j] == lp_packed[i * valid + j]);
        CHECK(d_padded[i * vp + j] == d_packed[i * valid + j]);
      } else {
        CHECK(lp_padded[i * vp + j] == -std::numeric_limits<float>::infinity());
        CHECK(d_padded[i * vp + j] == 0.25f);  // no gradient: left as it was
      }
    }
}

TEST_CASE("cross_entropy with valid columns: a label in the padding and a bad count throw") {
  const FVec logits(2 * 8, 0.5f);
  FVec log_probs(2 * 8), d(2 * 8, 0.0f);
  const std::vector<int64_t> labels = {0, 5};  // 5: a padded column of 5 valid
  CHECK_THROWS_WITH(cross_entropy_forward(logits.data(), labels.data(), log_probs.data(), 2, 8, 5),
                    Catch::Contains("label 5 at index 1"));
  CHECK_THROWS_WITH(
      cross_entropy_backward(log_probs.data(), labels.data(), 1.0f, d.data(), 2, 8, 5),
      Catch::Contains("label 5 at index 1"));
  const std::vector<int64_t> ok = {0, 1};
  CHECK_THROWS_WITH(cross_entropy_forward(logits.data(), ok.data(), log_probs.data(), 2, 8, 9),
                    Catch::Contains("valid = 9 columns outside [1, v = 8]"));
  CHECK_THROWS_WITH(cross_entropy_backward(log_probs.data(), ok.data(), 1.0f, d.data(), 2, 8, 0),
                    Catch::Contains("valid = 0 columns outside [1, v = 8]"));
}

}  // namespace shardscope::engine::cpu::test
