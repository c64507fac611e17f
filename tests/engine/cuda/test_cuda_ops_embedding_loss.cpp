// embedding and cross entropy against cpu on the same inputs: repeated ids,
// the positions form (ids null), fp32 (atomic) and 16-bit (workspace)
// backward, error flags for out-of-range ids and labels, the loss accumulated
// into a device double deterministically; rows padded past their valid
// columns (a padded vocabulary).
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/cuda/ops/ops.h"
#include "tests/engine/cuda/cuda_ops_test_util.h"

namespace shardscope::engine::cuda::test {
namespace {

void check_embedding(const std::vector<int64_t>& ids, int64_t rows, int64_t dim, DType dt,
                     uint32_t seed) {
  const bool positions = ids.empty();
  const int64_t n = positions ? rows - 1 : static_cast<int64_t>(ids.size());
  INFO("embedding n " << n << " rows " << rows << " dim " << dim << " " << dtype_label(dt)
                      << (positions ? " positions" : " ids"));
  std::mt19937 rng(seed);
  const FVec table = random_values(rng, rows * dim, dt);
  const FVec dout = random_values(rng, n * dim, dt);
  const FVec dtable0 = random_values(rng, rows * dim, dt);
  FVec out_ref(static_cast<size_t>(n * dim)), dtable_ref = dtable0;
  const int64_t* host_ids = positions ? nullptr : ids.data();
  cpu::embedding_forward(host_ids, table.data(), out_ref.data(), n, rows, dim);
  cpu::embedding_backward(host_ids, dout.data(), dtable_ref.data(), n, rows, dim);

  Stream s;
  const DeviceVector<int64_t> ids_d(ids);
  const int64_t* dev_ids = positions ? nullptr : ids_d.get();
  const DeviceArray table_d(table, dt), dout_d(dout, dt);
  DeviceArray out_d(random_values(rng, n * dim, dt), dt), dtable_d(dtable0, dt);
  DeviceVector<int32_t> flag(std::vector<int32_t>{0});
  const size_t ws_bytes = embedding_backward_workspace_bytes(n, rows, dim);
  DeviceBuffer ws(ws_bytes);
  embedding_forward(s.get(), dev_ids, table_d.cptr(), out_d.ptr(), n, rows, dim, flag.get());
  embedding_backward(s.get(), dev_ids, dout_d.cptr(), dtable_d.ptr(), n, rows, dim,
                     Workspace{ws.get(), ws_bytes});
  s.sync();
  CHECK(out_d.download() == out_ref);  // a gather is exact
  CHECK(flag.download()[0] == 0);
  // A row used k times sums k values of size <= 1 onto the initial gradient.
  check_close(dtable_d.download(), dtable_ref, tol_for(dt, 4.0), "dtable");
}

}  // namespace

TEST_CASE("embedding forward and backward match cpu with repeated ids and positions", "[gpu]") {
  // Id 3 appears four times, id 0 twice; rows 1, 4 and 6 are never used.
  const std::vector<int64_t> ids{3, 0, 3, 5, 2, 3, 0, 3, 7};
  uint32_t seed = 1;
  for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
    check_embedding(ids, 8, 64, dt, ++seed);  // packed rows
    check_embedding(ids, 8, 13, dt, ++seed);  // odd rows
    check_embedding({}, 12, 24, dt, ++seed);  // positions 0..10
    check_embedding({2}, 4, 1, dt, ++seed);   // n = 1, dim = 1
  }
}

TEST_CASE("embedding forward flags the first out-of-range id and writes zeros for it", "[gpu]") {
  const int64_t rows = 4, dim = 8;
  const std::vector<int64_t> ids{1, 4, 2, -1, 0};  // rows 1 and 3 hold bad ids
  std::mt19937 rng(3);
  const FVec table = random_values(rng, rows * dim, DType::f32);
  Stream s;
  const DeviceVector<int64_t> ids_d(ids);
  const DeviceArray table_d(table, DType::f32);
  DeviceArray out_d(FVec(ids.size() * dim, 5.0f), DType::f32);
  DeviceVector<int32_t> flag(std::vector<int32_t>{0});
  embedding_forward(s.get(), ids_d.get(), table_d.cptr(), out_d.ptr(), 5, rows, dim, flag.get());
  s.sync();
  CHECK(flag.download()[0] == 2);  // 1 + the first row holding a bad id
  const FVec out = out_d.download();
  for (int64_t c = 0; c < dim; ++c) {
    CHECK(out[1 * dim + c] == 0.0f);
    CHECK(out[3 * dim + c] == 0.0f);
    CHECK(out[2 * dim + c] == table[2 * dim + c]);
  }
}

TEST_CASE("cross entropy forward and backward match cpu", "[gpu]") {
  struct Case {
    int64_t n, v;
  };
  uint32_t seed = 30;
  for (const Case c : {Case{4, 7}, Case{3, 64}, Case{1, 1}, Case{5, 1000}, Case{2, 2053}})
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      INFO("cross entropy n " << c.n << " v " << c.v << " " << dtype_label(dt));
      std::mt19937 rng(++seed);
      const FVec logits = random_values(rng, c.n * c.v, dt, -4.0f, 4.0f);
      std::vector<int64_t> labels(static_cast<size_t>(c.n));
      for (int64_t i = 0; i < c.n; ++i) labels[i] = (i * 7 + 3) % c.v;
      FVec lp_ref(logits.size());
      const double loss_ref =
          cpu::cross_entropy_forward(logits.data(), labels.data(), lp_ref.data(), c.n, c.v);
      const float dloss = 0.75f;
      const FVec dlogits0 = random_values(rng, c.n * c.v, dt);
      // The backward reads log_probs as stored (rounded to dt).
      const FVec lp_stored = rounded(lp_ref, dt);
      FVec dlogits_ref = dlogits0;
      cpu::cross_entropy_backward(lp_stored.data(), labels.data(), dloss, dlogits_ref.data(), c.n,
                                  c.v);

      Stream s;
      const DeviceArray logits_d(logits, dt);
      const DeviceVector<int64_t> labels_d(labels);
      DeviceArray lp_d(FVec(logits.size(), 1.0f), dt), dlogits_d(dlogits0, dt);
      DeviceVector<double> loss(std::vector<double>{1.5});  // accumulated onto
      DeviceVector<int32_t> flag(std::vector<int32_t>{0});
      const size_t ws_bytes = cross_entropy_forward_workspace_bytes(c.n, c.v);
      DeviceBuffer ws(ws_bytes);
      cross_entropy_forward(s.get(), logits_d.cptr(), labels_d.get(), lp_d.ptr(), c.n, c.v,
                            loss.get(), flag.get(), Workspace{ws.get(), ws_bytes});
      cross_entropy_backward(s.get(), lp_d.cptr(), labels_d.get(), dloss, dlogits_d.ptr(), c.n,
                             c.v);
      s.sync();
      // log_probs down to about -(8 + log v): scale 16.
      check_close(lp_d.download(), lp_ref, tol_for(dt, 16.0), "log_probs");
      CHECK(std::fabs(loss.download()[0] - (1.5 + loss_ref)) <= 1e-5 * (1.0 + loss_ref));
      CHECK(flag.download()[0] == 0);
      check_close(dlogits_d.download(), dlogits_ref, tol_for(dt, 1.0), "dlogits");
    }
}

TEST_CASE("cross entropy over the first valid columns of padded rows matches cpu", "[gpu]") {
  // A padded vocabulary (plan/vocab_padding.h): rows of v = Vp columns, the
  // classes the first `valid`. The padded logits are large, so that a kernel
  // that let them into the softmax would move every log-probability.
  struct Case {
    int64_t n, valid, v;
  };
  uint32_t seed = 70;
  for (const Case c :
       {Case{4, 7, 8}, Case{3, 61, 64}, Case{5, 1000, 1024}, Case{2, 2053, 2112}, Case{3, 1, 8}})
    for (const DType dt : {DType::f32, DType::bf16, DType::f16}) {
      INFO("cross entropy n " << c.n << " valid " << c.valid << " of " << c.v << " "
                              << dtype_label(dt));
      std::mt19937 rng(++seed);
      FVec logits = random_values(rng, c.n * c.v, dt, -4.0f, 4.0f);
      for (int64_t i = 0; i < c.n; ++i)
        for (int64_t j = c.valid; j < c.v; ++j) logits[static_cast<size_t>(i * c.v + j)] = 8.0f;
      std::vector<int64_t> labels(static_cast<size_t>(c.n));
      for (int64_t i = 0; i < c.n; ++i) labels[i] = (i * 7 + 3) % c.valid;
      FVec lp_ref(logits.size());
      const double loss_ref = cpu::cross_entropy_forward(logits.data(), labels.data(),
                                                         lp_ref.data(), c.n, c.v, c.valid);
      const float dloss = 0.75f;
      const FVec dlogits0 = random_values(rng, c.n * c.v, dt);
      const FVec lp_stored = rounded(lp_ref, dt);
      FVec dlogits_ref = dlogits0;
      cpu::cross_entropy_backward(lp_stored.data(), labels.data(), dloss, dlogits_ref.data(), c.n,
                                  c.v, c.valid);

      Stream s;
      const DeviceArray logits_d(logits, dt);
      const DeviceVector<int64_t> labels_d(labels);
      DeviceArray lp_d(FVec(logits.size(), 1.0f), dt), dlogits_d(dlogits0, dt);
      DeviceVector<double> loss(std::vector<double>{0.0});
      DeviceVector<int32_t> flag(std::vector<int32_t>{0});
      const size_t ws_bytes = cross_entropy_forward_workspace_bytes(c.n, c.v);
      DeviceBuffer ws(ws_bytes);
      cross_entropy_forward(s.get(), logits_d.cptr(), labels_d.get(), lp_d.ptr(), c.n, c.v,
                            loss.get(), flag.get(), Workspace{ws.get(), ws_bytes}, c.valid);
      cross_entropy_backward(s.get(), lp_d.cptr(), labels_d.get(), dloss, dlogits_d.ptr(), c.n, c.v,
                             c.valid);
      s.sync();
      const FVec lp = lp_d.download(), dl = dlogits_d.download();
      FVec lp_valid, lp_valid_ref, dl_valid, dl_valid_ref;
      for (int64_t i = 0; i < c.n; ++i)
        for (int64_t j = 0; j < c.v; ++j) {
          const auto k = static_cast<size_t>(i * c.v + j);
          if (j < c.valid) {
            lp_valid.push_back(lp[k]);
            lp_valid_ref.push_back(lp_ref[k]);
            dl_valid.push_back(dl[k]);
            dl_valid_ref.push_back(dlogits_ref[k]);
          } else {
            CHECK(std::isinf(lp[k]));  // log of probability 0
            CHECK(lp[k] < 0.0f);
            CHECK(dl[k] == dlogits0[k]);  // no gradient: left as it was
            CHECK(dlogits_ref[k] == dlogits0[k]);
          }
        }
      check_close(lp_valid, lp_valid_ref, tol_for(dt, 16.0), "log_probs");
      CHECK(std::fabs(loss.download()[0] - loss_ref) <= 1e-5 * (1.0 + loss_ref));
      CHECK(flag.download()[0] == 0);
      check_close(dl_valid, dl_valid_ref, tol_for(dt, 1.0), "dlogits");
    }
}

TEST_CASE("cross entropy flags a label in the padded columns", "[gpu]") {
  const int64_t n = 3, valid = 5, v = 8;
  std::mt19937 rng(9);
  const FVec logits = random_values(rng, n * v, DType::f32);
  const std::vector<int64_t> labels{0, 4, 5};  // row 2 names a padded column
  Stream s;
  const DeviceArray logits_d(logits, DType::f32);
  const DeviceVector<int64_t> labels_d(labels);
  DeviceArray lp_d(FVec(logits.size(), 0.0f), DType::f32);
  DeviceVector<double> loss(std::vector<double>{0.0});
  DeviceVector<int32_t> flag(std::vector<int32_t>{0});
  const size_t ws_bytes = cross_entropy_forward_workspace_bytes(n, v);
  DeviceBuffer ws(ws_bytes);
  cross_entropy_forward(s.get(), logits_d.cptr(), labels_d.get(), lp_d.ptr(), n, v, loss.get(),
                        flag.get(), Workspace{ws.get(), ws_bytes}, valid);
  s.sync();
  CHECK(flag.download()[0] == 3);  // 1 + row 2
}

TEST_CASE("cross entropy loss is the same bits on every run and flags a bad label", "[gpu]") {
  const int64_t n = 2500, v = 40;  // more rows than the summing block has threads
  std::mt19937 rng(8);
  const FVec logits = random_values(rng, n * v, DType::f32, -3.0f, 3.0f);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = (i * 13) % v;
  Stream s;
  const DeviceArray logits_d(logits, DType::f32);
  DeviceArray lp_d(FVec(logits.size(), 0.0f), DType::f32);
  const size_t ws_bytes = cross_entropy_forward_workspace_bytes(n, v);
  DeviceBuffer ws(ws_bytes);
  double first = 0.0;
  for (int run = 0; run < 2; ++run) {
    const DeviceVector<int64_t> labels_d(labels);
    DeviceVector<double> loss(std::vector<double>{0.0});
    cross_entropy_forward(s.get(), logits_d.cptr(), labels_d.get(), lp_d.ptr(), n, v, loss.get(),
                          nullptr, Workspace{ws.get(), ws_bytes});
    s.sync();
    const double got = loss.download()[0];
    if (run == 0)
      first = got;
    else
      CHECK(std::memcmp(&got, &first, sizeof got) == 0);
  }
  // Labels v and -5 at rows 7 and 9: the flag holds 1 + 7, the bad rows add 0.
  labels[7] = v;
  labels[9] = -5;
  FVec lp_ref(logits.size());
  std::vector<int64_t> good = labels;
  good[7] = good[9] = 0;
  const double with_zero_rows =
      cpu::cross_entropy_forward(logits.data(), good.data(), lp_ref.data(), n, v) -
      (-(static_cast<double>(lp_ref[7 * v])) - static_cast<double>(lp_ref[9 * v])) / n;
  const DeviceVector<int64_t> labels_d(labels);
  DeviceVector<double> loss(std::vector<double>{0.0});
  DeviceVector<int32_t> flag(std::vector<int32_t>{0});
  cross_entropy_forward(s.get(), logits_d.cptr(), labels_d.get(), lp_d.ptr(), n, v, loss.get(),
                        flag.get(), Workspace{ws.get(), ws_bytes});
  s.sync();
  CHECK(flag.download()[0] == 8);
  CHECK(std::fabs(loss.download()[0] - with_zero_rows) <= 1e-5);
}

}  // namespace shardscope::engine::cuda::test
