// tests/nn/linear_lora_test.cpp — nn::Linear with a LoRA adapter over a dense or NF4 base:
// gradients against central finite differences (reference backend in double), the forward
// against base + scale·B·A·x written out, the active rank (rows of A and columns of B past it are
// neither read nor written), and tensor-parallel parity (Column and Row, tp = 2) against tp = 1 —
// each also with dropout on the adapter input (the mask fixed by its counters, so finite
// differences see a deterministic function; shards number their columns globally).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ete/core/rng.h"
#include "ete/nn/linear.h"
#include "ete/parallel/fake_comm.h"
#include "ete/quant/nf4.h"
#include "numerics.h"
#include "test_util.h"

namespace ete {
namespace {

using DVec = std::vector<double>;
using FVec = std::vector<float>;

template <typename T>
std::vector<T> rnd(size_t n, uint32_t seed, double scale = 1.0) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<double> u(-scale, scale);
    std::vector<T> v(n);
    for (auto& x : v) x = T(u(g));
    return v;
}

template <typename T>
Mat mat(std::vector<T>& v, int64_t r, int64_t c) {
    return testing::host_mat(v, r, c);
}

// Everything one Linear-with-adapter test case holds, in host memory of type T.
template <typename T>
struct Case {
    int64_t N, in, out, r_max;
    int rank;
    std::vector<T> x, w, b, a, bb, g;       // inputs, weights, upstream gradient
    std::vector<T> dw, db, da, dbb, dx, y;  // outputs
    std::vector<T> u, du;                   // adapter activations
    std::vector<T> xd, dxd;                 // dropout scratch
    DropoutMask drop;                       // inactive unless a test sets p
    Nf4Tensor q;                            // NF4 base (when nf4)
    std::unique_ptr<Nf4Buffer> qbuf;
    bool nf4 = false, train_w = false;
    float scale = 0.75f;

    Case(int64_t N_, int64_t in_, int64_t out_, int64_t r_max_, int rank_, uint32_t seed)
        : N(N_), in(in_), out(out_), r_max(r_max_), rank(rank_) {
        x = rnd<T>(size_t(N * in), seed);
        w = rnd<T>(size_t(out * in), seed + 1, 0.5);
        b = rnd<T>(size_t(out), seed + 2);
        a = rnd<T>(size_t(r_max * in), seed + 3, 0.7);
        bb = rnd<T>(size_t(out * r_max), seed + 4, 0.7);
        g = rnd<T>(size_t(N * out), seed + 5);
        dw.assign(w.size(), 0);
        db.assign(b.size(), 0);
        da.assign(a.size(), 0);
        dbb.assign(bb.size(), 0);
        dx.assign(x.size(), 0);
        y.assign(size_t(N * out), 0);
        u.assign(size_t(N * r_max), 0);
        du.assign(size_t(N * r_max), 0);
        xd.assign(x.size(), 0);
        dxd.assign(x.size(), 0);
    }
    // Dropout p on the adapter input; this case's columns are [col0, col0 + in) of `width`.
    void use_dropout(float p, uint64_t col0 = 0, uint64_t width = 0) {
        drop.p = p;
        drop.seed = 99;
        drop.stream = 4242;
        drop.row0 = 640;
        drop.col0 = col0;
        drop.row_stride = width ? width : uint64_t(in);
    }
    void use_nf4(Backend& be) {
        const FVec wf(w.begin(), w.end());
        q = nf4_quantize(wf.data(), out, in, {32, true});
        qbuf = std::make_unique<Nf4Buffer>(be, q);
        nf4 = true;
    }
    Linear linear() {
        LinearParams p;
        if (nf4) {
            p.nf4 = &qbuf->view();
        } else {
            p.w = mat(w, out, in);
            if (train_w) p.d_w = mat(dw, out, in);
        }
        p.b = testing::host_cvec(b);
        p.d_b = testing::host_vec(db);
        Linear lin(p);
        lin.set_adapter({mat(a, r_max, in), mat(bb, out, r_max), mat(da, r_max, in),
                         mat(dbb, out, r_max), scale, rank});
        return lin;
    }
    LoraActs acts() {
        LoraActs ac;
        ac.u = mat(u, N, r_max);
        ac.d_u = mat(du, N, r_max);
        ac.d_uc = ac.d_u;
        ac.drop = drop;
        ac.x_drop = mat(xd, N, in);
        ac.dx_drop = mat(dxd, N, in);
        return ac;
    }
    // Upper bounds on Σ |terms|, the magnitude rounding errors are relative to, from each
    // operand's largest element (an NF4 weight is at most its block's largest |w|): of the loss
    // Σ g ⊙ y, each y = W·x + b + scale·B·(A·x'), x' = x·keep / (1 - p) the adapter's input; and
    // of any one output of forward or backward (y, d_x, d_W, d_b, d_A, d_B).
    struct Magnitudes {
        double loss, any;
    };
    Magnitudes magnitudes() const {
        auto mx = [](const std::vector<T>& v) {
            double m = 0;
            for (T e : v) m = std::max(m, std::fabs(double(e)));
            return m;
        };
        const double keep = 1.0 / (1.0 - double(drop.p)), s = scale, R = double(r_max);
        const double y =
            double(in) * mx(w) * mx(x) + mx(b) + s * R * mx(bb) * double(in) * mx(a) * mx(x) * keep;
        const double dx =
            double(out) * mx(w) * mx(g) + s * R * mx(a) * keep * double(out) * mx(bb) * mx(g);
        const double dw = double(N) * mx(g) * mx(x),
                     d_a = double(N) * s * double(out) * mx(bb) * mx(g) * mx(x) * keep;
        const double d_bb = double(N) * s * mx(g) * double(in) * mx(a) * mx(x) * keep;
        return {double(N * out) * mx(g) * y, std::max({y, dx, dw, double(N) * mx(g), d_a, d_bb})};
    }
    // Σ g ⊙ y for the current parameters.
    double loss(Backend& be) {
        Linear lin = linear();
        LoraActs ac = acts();
        lin.forward(be, mat(y, N, out), mat(x, N, in), false, {}, &ac);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += double(g[i]) * double(y[i]);
        return s;
    }
    void backward(Backend& be) {
        loss(be);
        Linear lin = linear();
        LoraActs ac = acts();
        lin.backward(be, mat(dx, N, in), mat(g, N, out), mat(x, N, in), &ac);
    }
};

// Central differences of c.loss over every element of v against the analytic gradient. The loss
// is linear in each single element (y is linear in x, W, b, A and B separately, the dropout mask
// fixed), so the quotient has no truncation error, only the rounding of the two losses in double
// (u = 2^-53): each within γ_n of the loss's magnitude, n = in + r_max + 2 + N·out the longest
// chain (a y, then the sum of N·out terms), so the quotient within γ_n·Σ|terms| / h (numerics.h;
// 3e-7 here). A wrong gradient term is off by O(1).
void fd_check(Case<double>& c, Backend& be, std::vector<double>& v, const std::vector<double>& grad,
              const char* what) {
    const double h = 1e-5;
    const double n = double(c.in + c.r_max + 2 + c.N * c.out);
    const double tol = testing::gamma_worst(n, 0x1p-53) * c.magnitudes().loss / h;
    for (size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i];
        v[i] = keep + h;
        const double lp = c.loss(be);
        v[i] = keep - h;
        const double lm = c.loss(be);
        v[i] = keep;
        const double fd = (lp - lm) / (2 * h);
        ASSERT_NEAR(grad[i], fd, tol) << what << " [" << i << "]";
    }
}

class LoraFd : public ::testing::TestWithParam<std::tuple<bool, bool>> {};  // NF4? dropout?

TEST_P(LoraFd, GradientsMatchFiniteDifferences) {
    auto be = make_ref_backend();
    const auto [nf4, dropout] = GetParam();
    Case<double> c(5, 7, 6, 4, 3, 21);  // rank 3 of r_max 4
    c.train_w = !nf4;
    if (nf4) c.use_nf4(*be);
    if (dropout) c.use_dropout(0.4f);
    c.backward(*be);
    const DVec da = c.da, dbb = c.dbb, dx = c.dx, dw = c.dw, db = c.db;
    fd_check(c, *be, c.a, da, "d_A");
    fd_check(c, *be, c.bb, dbb, "d_B");
    fd_check(c, *be, c.x, dx, "d_x");
    fd_check(c, *be, c.b, db, "d_b");
    if (c.train_w) fd_check(c, *be, c.w, dw, "d_W");
    // Past the active rank: row 3 of A, column 3 of B get no gradient (and had none to get).
    for (int64_t j = 0; j < c.in; ++j) EXPECT_EQ(da[size_t(3 * c.in + j)], 0.0);
    for (int64_t o = 0; o < c.out; ++o) EXPECT_EQ(dbb[size_t(o * c.r_max + 3)], 0.0);
    double norm = 0;
    for (double v : da) norm += v * v;
    EXPECT_GT(norm, 1e-3);  // the check above is not vacuous
}

INSTANTIATE_TEST_SUITE_P(Bases, LoraFd, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param) ? "nf4" : "dense") +
                                    (std::get<1>(info.param) ? "_dropout" : "");
                         });

// The mask of Case c for element (n, i), from its definition.
template <typename T>
bool kept(const Case<T>& c, int64_t n, int64_t i) {
    const CounterRng rng(c.drop.seed, c.drop.stream);
    return rng.word((c.drop.row0 + uint64_t(n)) * c.drop.row_stride + c.drop.col0 + uint64_t(i)) >=
           c.drop.threshold();
}

TEST(LoraLinear, ForwardIsBasePlusScaledBA) {
    auto be = make_cpu_backend();
    for (auto [nf4, p] : {std::pair{false, 0.0f}, {true, 0.0f}, {false, 0.3f}, {true, 0.5f}}) {
        SCOPED_TRACE(::testing::Message() << "nf4 " << nf4 << " dropout " << p);
        Case<float> c(9, 40, 24, 8, 8, 31);
        if (nf4) c.use_nf4(*be);
        if (p > 0) c.use_dropout(p);
        int64_t dropped = 0;
        c.loss(*be);
        std::vector<float> wd(c.w.begin(), c.w.end());
        if (nf4) nf4_dequantize(c.q, wd.data());
        for (int64_t n = 0; n < c.N; ++n)
            for (int64_t o = 0; o < c.out; ++o) {
                double base = c.b[size_t(o)], ad = 0;
                double mag = std::fabs(base), ad_mag = 0;  // Σ |terms| of y
                for (int64_t i = 0; i < c.in; ++i) {
                    base += double(c.x[size_t(n * c.in + i)]) * wd[size_t(o * c.in + i)];
                    mag += std::fabs(double(c.x[size_t(n * c.in + i)]) * wd[size_t(o * c.in + i)]);
                }
                for (int64_t k = 0; k < c.r_max; ++k) {
                    double ax = 0, ax_mag = 0;
                    for (int64_t i = 0; i < c.in; ++i) {
                        // The adapter (only) reads x · keep / (1 - p).
                        double xi = c.x[size_t(n * c.in + i)];
                        if (p > 0) xi = kept(c, n, i) ? xi / (1.0 - p) : 0.0;
                        dropped += p > 0 && o == 0 && k == 0 && !kept(c, n, i);
                        ax += double(c.a[size_t(k * c.in + i)]) * xi;
                        ax_mag += std::fabs(double(c.a[size_t(k * c.in + i)]) * xi);
                    }
                    ad += double(c.bb[size_t(o * c.r_max + k)]) * ax;
                    ad_mag += std::fabs(double(c.bb[size_t(o * c.r_max + k)])) * ax_mag;
                }
                // f32 against this double sum: the longest chain is x' (1 / (1 - p) and the
                // product), u = A·x' (in terms), B·u (r_max), the scale and the add to y; an NF4
                // weight's dequantization rounds once too: γ_(in + r_max + 5) of Σ |terms|, any
                // order (numerics.h). A wrong scale or mask is off by O(1).
                const double tol =
                    testing::gamma_worst(double(c.in + c.r_max + 5)) * (mag + c.scale * ad_mag);
                ASSERT_NEAR(c.y[size_t(n * c.out + o)], base + c.scale * ad, tol) << n << "," << o;
            }
        if (p > 0) {  // not vacuous; statistical: 0.1 is ~4σ of the rate over 360 fixed draws
            EXPECT_NEAR(double(dropped) / double(c.N * c.in), p, 0.1);
        }
    }
}

TEST(LoraLinear, ScaleFollowsPeft) {
    EXPECT_FLOAT_EQ(lora_scale(16, 8, false), 2.0f);
    EXPECT_FLOAT_EQ(lora_scale(16, 4, true), 8.0f);
}

TEST(LoraLinear, BadAdapterShapeOrRankIsAnError) {
    std::vector<float> w(12), a(8), bb(6), da(8), dbb(6);
    Linear lin({testing::host_cmat(w, 3, 4), {}, {}, {}, {}});
    EXPECT_EQ(
        error_of([&] {
            lin.set_adapter({mat(a, 2, 4), mat(bb, 2, 3), mat(da, 2, 4), mat(dbb, 2, 3), 1.0f, 2});
        }),
        "lora: adapter A (2, 4), B (2, 3) does not fit a (3, 4) linear");
    EXPECT_EQ(
        error_of([&] {
            lin.set_adapter({mat(a, 2, 4), mat(bb, 3, 2), mat(da, 2, 4), mat(dbb, 3, 2), 1.0f, 3});
        }),
        "lora: active rank 3 outside [1, 2]");
}

// Column and Row over tp = 2 against one process: outputs, input gradients and the adapter's
// gradients (sharded ones gathered).
void tp_parity(TpMode mode, float p) {
    const int64_t N = 6, in = 10, out = 8, R = 4;
    auto be1 = make_cpu_backend();
    Case<float> full(N, in, out, R, 3, 41);
    if (p > 0) full.use_dropout(p);
    full.backward(*be1);
    run_fake_world(2, [&](Communicator& tp) {
        auto be = make_cpu_backend();
        const int k = tp.rank();
        const bool col = mode == TpMode::Column;
        const int64_t lo = col ? out / 2 : in / 2;  // this rank's share of the split dim
        Case<float> c(N, col ? in : lo, col ? lo : out, R, 3, 41);
        auto slice_cols = [&](const FVec& src, int64_t rows, int64_t cols, int64_t c0, int64_t n) {
            FVec d;
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = c0; j < c0 + n; ++j) d.push_back(src[size_t(r * cols + j)]);
            return d;
        };
        if (col) {  // W, b, B by rows; x, A replicated; the upstream gradient by columns
            c.x = full.x;
            c.a = full.a;
            c.w.assign(full.w.begin() + k * lo * in, full.w.begin() + (k + 1) * lo * in);
            c.b.assign(full.b.begin() + k * lo, full.b.begin() + (k + 1) * lo);
            c.bb.assign(full.bb.begin() + k * lo * R, full.bb.begin() + (k + 1) * lo * R);
            c.g = slice_cols(full.g, N, out, k * lo, lo);
        } else {  // W, A, x by columns; b, B replicated (the bias is added once, after the sum)
            c.x = slice_cols(full.x, N, in, k * lo, lo);
            c.a = slice_cols(full.a, R, in, k * lo, lo);
            c.w = slice_cols(full.w, out, in, k * lo, lo);
            c.b = full.b;
            c.bb = full.bb;
            c.g = full.g;
        }
        if (p > 0) c.use_dropout(p, col ? 0 : uint64_t(k * lo), uint64_t(in));
        Linear lin = c.linear();
        LinearParams p = lin.params();
        Linear tl(p, mode, &tp);
        tl.set_adapter(lin.adapter());
        LoraActs ac = c.acts();
        tl.forward(*be, mat(c.y, N, c.out), mat(c.x, N, c.in), false, {}, &ac);
        tl.backward(*be, mat(c.dx, N, c.in), mat(c.g, N, c.out), mat(c.x, N, c.in), &ac);
        // The same products, tp's halves summed apart and then all-reduced: two orders of a
        // chain of at most in + out + N + r_max + 4 additions (the adapter's input and
        // activations, the scale and the add each round once), within reorder_worst of the
        // largest Σ |terms| of any output (numerics.h): <= 1.8e-4, where a wrong shard is O(1).
        const double tol =
            testing::reorder_worst(double(in + out + N + R + 4)) * full.magnitudes().any;
        auto near = [tol](const FVec& got, const FVec& want, const char* what) {
            ASSERT_EQ(got.size(), want.size()) << what;
            for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << i;
        };
        if (col) {
            near(c.y, slice_cols(full.y, N, out, k * lo, lo), "y");
            near(c.dx, full.dx, "d_x");
            near(c.da, full.da, "d_A");  // replicated, complete on every rank
            near(c.dbb, FVec(full.dbb.begin() + k * lo * R, full.dbb.begin() + (k + 1) * lo * R),
                 "d_B");
        } else {
            near(c.y, full.y, "y");
            near(c.dx, slice_cols(full.dx, N, in, k * lo, lo), "d_x");
            near(c.da, slice_cols(full.da, R, in, k * lo, lo), "d_A");
            near(c.dbb, full.dbb, "d_B");
        }
    });
}

TEST(LoraLinear, ColumnParallelMatchesOneProcess) {
    tp_parity(TpMode::Column, 0.0f);
    tp_parity(TpMode::Column, 0.35f);
}

TEST(LoraLinear, RowParallelMatchesOneProcess) {
    tp_parity(TpMode::Row, 0.0f);
    tp_parity(TpMode::Row, 0.35f);
}

}  // namespace
}  // namespace ete
