// tests/backend/rope_partial_test.cpp — RoPE over part of each head (Phi's
// partial_rotary_factor): the tables' width R/2 says how many dims rotate. The first R dims of
// every q and k head must come out exactly as a whole-head rotation of an R-wide head would make
// them (same operations, so bit for bit), and every other element must be untouched.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend_test_util.h"
#include "ete/core/error.h"
#include "test_util.h"

namespace ete {
namespace {

using namespace backend_test;

// x (B·T, (H + 2KV)·D) -> the first R dims of each head as a (B·T, (H + 2KV)·R) tensor.
std::vector<float> first_dims(const std::vector<float>& x, const AttnDims& d, int R) {
    const int heads = d.H + 2 * d.KV;
    std::vector<float> out;
    for (size_t row = 0; row < size_t(d.B) * d.T; ++row)
        for (int h = 0; h < heads; ++h)
            for (int j = 0; j < R; ++j)
                out.push_back(x[row * size_t(d.qkv_stride()) + size_t(h) * d.D + size_t(j)]);
    return out;
}

void run(Backend& be, std::vector<float>& x, const std::vector<float>& cos,
         const std::vector<float>& sin, const AttnDims& d, int R, int sign) {
    const Mat xm = host_mat(x, int64_t(d.B) * d.T, d.qkv_stride());
    const CMat c = host_cmat(cos, d.T, R / 2), s = host_cmat(sin, d.T, R / 2);
    sign > 0 ? be.rope_forward(xm, c, s, d) : be.rope_backward(xm, c, s, d);
}

TEST(RopePartial, RotatesTheFirstDimsAndPassesTheRest) {
    for (const char* name : {"cpu", "ref"}) {
        std::unique_ptr<Backend> be = make_backend(name);
        for (auto [D, R] : {std::pair{16, 12}, std::pair{24, 8}, std::pair{10, 6}}) {
            const AttnDims d{2, 9, 4, 2, D};
            SCOPED_TRACE(fmt::format("{} D {} R {}", name, D, R));
            std::vector<float> cos, sin;
            rope_tables(d.T, R, cos, sin);
            for (float& v : cos) v *= 1.25f;  // an attention factor, as longrope/yarn tables carry
            for (float& v : sin) v *= 1.25f;
            const std::vector<float> x =
                random_vec<float>(size_t(d.B) * d.T * d.qkv_stride(), 17u + unsigned(D));
            for (int sign : {1, -1}) {
                std::vector<float> y = x;
                run(*be, y, cos, sin, d, R, sign);
                // An R-wide head rotated whole: the same products, the same result.
                const AttnDims narrow{d.B, d.T, d.H, d.KV, R};
                std::vector<float> want = first_dims(x, d, R);
                run(*be, want, cos, sin, narrow, R, sign);
                EXPECT_EQ(first_dims(y, d, R), want) << "sign " << sign;
                size_t changed = 0, passed = 0;
                for (size_t row = 0; row < size_t(d.B) * d.T; ++row)
                    for (int h = 0; h < d.H + 2 * d.KV; ++h)
                        for (int j = 0; j < D; ++j) {
                            const size_t i = row * size_t(d.qkv_stride()) + size_t(h) * D + j;
                            const bool rotated = h < d.H + d.KV && j < R;
                            if (rotated) {
                                changed += y[i] != x[i];
                            } else {
                                passed += y[i] == x[i];
                                EXPECT_EQ(y[i], x[i]) << "row " << row << " head " << h << " dim "
                                                      << j << ": outside the rotary dims";
                            }
                        }
                EXPECT_GT(changed, size_t(0));
                EXPECT_GT(passed, size_t(0));
            }
        }
    }
}

TEST(RopePartial, TablesWiderThanTheHeadAreRefused) {
    std::unique_ptr<Backend> be = make_backend("cpu");
    const AttnDims d{1, 4, 2, 1, 8};
    std::vector<float> x(size_t(d.T) * d.qkv_stride()), cos(size_t(d.T) * 5), sin(cos.size());
    const Mat xm = host_mat(x, d.T, d.qkv_stride());
    EXPECT_NE(error_of([&] {
                  be->rope_forward(xm, host_cmat(cos, d.T, 5), host_cmat(sin, d.T, 5), d);
              }).find("rotary width R <= 8"),
              std::string::npos);
}

}  // namespace
}  // namespace ete
