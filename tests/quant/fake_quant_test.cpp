// tests/quant/fake_quant_test.cpp — observers and fake quantization against PyTorch's own
// (tools/gen_qat_goldens.py: MinMaxObserver, PerChannelMinMaxObserver, the moving-average ones,
// torchao's per-token and per-group schemes, fake_quantize_per_{tensor,channel}_affine and their
// straight-through gradients), bit for bit on every backend, with values planted on rounding ties
// and half a step beyond the grid; the observer's own arithmetic, state and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "ete/backend/backend.h"
#include "ete/io/safetensors.h"
#include "ete/quant/observer.h"
#include "test_util.h"

namespace ete {
namespace {

using testing::DeviceCopy;

const SafetensorsFile& golden() {
    static const SafetensorsFile f =
        SafetensorsFile::open(std::string(ETE_SOURCE_DIR) + "/tests/golden/qat.safetensors");
    return f;
}

std::vector<float> read(const std::string& name) {
    const auto b = golden().bytes(name);
    std::vector<float> v(b.size() / sizeof(float));
    std::memcpy(v.data(), b.data(), b.size());
    return v;
}

QParamRule rule_of(const std::string& r) {
    return r == "symmetric" ? QParamRule::Symmetric
           : r == "affine"  ? QParamRule::Affine
                            : QParamRule::PerToken;
}

// The block ranges of x on backend be.
void block_ranges(Backend& be, const std::vector<float>& x, int64_t rows, int64_t cols,
                  int64_t group, std::vector<float>* lo, std::vector<float>* hi) {
    const int64_t blocks = rows * (cols / group);
    DeviceCopy dx(be, x), dlo(be, std::vector<float>(size_t(blocks))),
        dhi(be, std::vector<float>(size_t(blocks)));
    be.min_max(dlo.vec(), dhi.vec(), dx.mat(rows, cols), group);
    *lo = dlo.download<float>();
    *hi = dhi.download<float>();
}

class QatGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QatGolden, ObserversAndFakeQuantMatchPyTorchBitForBit) {
    auto be = make_backend(GetParam());
    for (const auto& c : nlohmann::json::parse(golden().metadata().at("cases"))) {
        const std::string name = c["name"], gran = c["granularity"];
        SCOPED_TRACE(name);
        const int64_t rows = c["rows"], cols = c["cols"], group = c["group"];
        const QuantGrid g{c["qmin"].get<int>(), c["qmax"].get<int>(), rule_of(c["rule"])};
        const std::vector<float> x = read(name + ".x"), want_s = read(name + ".scale"),
                                 want_z = read(name + ".zero");
        std::vector<float> scale, zero, lo, hi;
        if (gran == "token") {  // dynamic: the backend's own quant_params
            block_ranges(*be, x, rows, cols, cols, &lo, &hi);
            DeviceCopy ds(*be, lo), dz(*be, lo), dl(*be, lo), dh(*be, hi);
            be->quant_params(ds.vec(), dz.vec(), dl.vec(), dh.vec(), g);
            scale = ds.download<float>();
            zero = dz.download<float>();
        } else {
            const int64_t channels = gran == "tensor"    ? 1
                                     : gran == "channel" ? rows
                                                         : rows * cols / group;
            Observer o(channels, observer_kind_from_name(c["observer"], "observer"),
                       c["averaging_constant"].get<float>());
            for (int k = 0; k < c["batches"].get<int>(); ++k) {
                block_ranges(*be, read(name + ".batch" + std::to_string(k)), rows, cols, group, &lo,
                             &hi);
                o.observe(lo.data(), hi.data(), int64_t(lo.size()));
            }
            o.params(g, &scale, &zero);
        }
        ASSERT_EQ(scale, want_s);
        ASSERT_EQ(zero, want_z);
        // Fake quantization with those parameters, and its straight-through mask.
        const int64_t qgroup = gran == "tensor" ? cols : group;
        DeviceCopy dx(*be, x), dy(*be, std::vector<float>(x.size())), ds(*be, scale), dz(*be, zero),
            dm(*be, std::vector<uint8_t>(size_t(fake_quant_mask_bytes(rows, cols))), DType::U8);
        be->fake_quant(dy.mat(rows, cols), dx.mat(rows, cols), ds.vec(), dz.vec(), dm.vec(), qgroup,
                       g);
        EXPECT_EQ(dy.download<float>(), read(name + ".y"));
        // The backward of an all-ones gradient is the mask itself.
        DeviceCopy dg(*be, std::vector<float>(x.size(), 1.0f));
        be->fake_quant_backward(dg.mat(rows, cols), dg.mat(rows, cols), dm.vec());
        EXPECT_EQ(dg.download<float>(), read(name + ".mask"));
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, QatGolden, ::testing::Values("ref", "cpu", "guarded"));

TEST(Observer, MovingAverageFollowsItsConstantAndSkipsEmptyChannels) {
    Observer o(2, ObserverKind::MovingAverage, 0.5f);
    const float inf = std::numeric_limits<float>::infinity();
    const float lo1[] = {-1, -4}, hi1[] = {1, 2};
    o.observe(lo1, hi1, 2);  // the first batch sets the range
    EXPECT_EQ(o.lo(), (std::vector<float>{-1, -4}));
    const float lo2[] = {-3, inf}, hi2[] = {5, -inf};  // channel 1 saw nothing finite
    o.observe(lo2, hi2, 2);
    EXPECT_EQ(o.lo(), (std::vector<float>{-2, -4}));
    EXPECT_EQ(o.hi(), (std::vector<float>{3, 2}));
    // Four blocks for two channels: each pair folds into one channel.
    Observer m(2, ObserverKind::MinMax);
    const float lo4[] = {-1, -2, 0.5f, 3}, hi4[] = {0, 1, 0.75f, 4};
    m.observe(lo4, hi4, 4);
    EXPECT_EQ(m.lo(), (std::vector<float>{-2, 0.5f}));
    EXPECT_EQ(m.hi(), (std::vector<float>{1, 4}));
}

TEST(Observer, AnUnobservedOrZeroRangeChannelGivesTheSmallestScaleNotNaN) {
    Observer o(3, ObserverKind::MinMax);
    EXPECT_FALSE(o.observed());
    std::vector<float> s, z;
    o.params(QuantGrid::of(8, QParamRule::Affine), &s, &z);
    EXPECT_EQ(s, std::vector<float>(3, kMinScale));
    EXPECT_EQ(z, std::vector<float>(3, -128.0f));
    const float lo[] = {0, 0, -1}, hi[] = {0, 0, 1};
    o.observe(lo, hi, 3);
    o.params(QuantGrid::of(8, QParamRule::Symmetric), &s, &z);
    EXPECT_EQ(s, (std::vector<float>{kMinScale, kMinScale, 1.0f / 127.0f}));
    EXPECT_EQ(z, std::vector<float>(3, 0.0f));
}

TEST(Observer, StateRoundTripsAndABadOneIsNamed) {
    Observer o(2, ObserverKind::MovingAverage, 0.1f), back(2, ObserverKind::MovingAverage, 0.1f);
    const float lo[] = {-1.5f, -0.25f}, hi[] = {2, 0.125f};
    o.observe(lo, hi, 2);
    back.restore(o.state(), "qat observer x");
    EXPECT_TRUE(back.observed());
    EXPECT_EQ(back.lo(), o.lo());
    EXPECT_EQ(back.hi(), o.hi());
    EXPECT_EQ(error_of([&] {
                  back.restore({1, 2, 3}, "checkpoint 'c' qat.layers.0.attn_out");
              }),
              "checkpoint 'c' qat.layers.0.attn_out: observer state of 3 values, expected 5 (1 + "
              "2 x 2 channels)");
    EXPECT_EQ(error_of([] { observer_kind_from_name("ema", "qat.observer"); }),
              "qat.observer = 'ema': expected minmax or moving_average");
    // A saved range with lo > hi, beyond ±1e30 or not finite was accepted (scales overflowed);
    // an unobserved state's values are not ranges and stay free.
    for (const std::vector<float>& bad :
         {std::vector<float>{1, 3, 0, 2, 1}, std::vector<float>{1, -1e38f, 0, 1e38f, 1},
          std::vector<float>{1, 0, 0, INFINITY, 1}}) {
        const std::string e = error_of([&] { back.restore(bad, "qat.json observer 0.1"); });
        EXPECT_NE(e.find("qat.json observer 0.1: channel 0 range ["), std::string::npos) << e;
        EXPECT_NE(e.find("expected finite lo <= hi within +-1e+30"), std::string::npos) << e;
    }
    EXPECT_EQ(error_of([&] { back.restore({0, 3, 0, 2, 1}, "unobserved"); }), "<no error>");
}

TEST(QuantGrid, BitsAndRules) {
    const QuantGrid s8 = QuantGrid::of(8, QParamRule::Symmetric),
                    a8 = QuantGrid::of(8, QParamRule::Affine),
                    s4 = QuantGrid::of(4, QParamRule::Symmetric);
    EXPECT_EQ(std::make_pair(s8.qmin, s8.qmax), std::make_pair(-127, 127));
    EXPECT_EQ(std::make_pair(a8.qmin, a8.qmax), std::make_pair(-128, 127));
    EXPECT_EQ(std::make_pair(s4.qmin, s4.qmax), std::make_pair(-7, 7));
}

// QatRuntime writes no straight-through mask for a weight quantized with scales from its own
// range (model/qat_runtime.h): every finite value must then fall inside the symmetric grid. The
// extremes ±max|w| are the values nearest the grid's ends (|x · inv_s| grows with |x|), so
// checking them over random ranges of every exponent, normal and subnormal, covers all values.
TEST(QuantGrid, TheSymmetricGridOfARangesOwnScaleClampsNoFiniteValue) {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        return state;
    };
    for (int bits = 2; bits <= 8; ++bits) {
        const QuantGrid g = QuantGrid::of(bits, QParamRule::Symmetric);
        int64_t checked = 0;
        for (int i = 0; i < 200000; ++i) {
            // Any positive finite float, and a smaller other end of the range.
            const uint32_t u = uint32_t(next() % 0x7f7fffffull) + 1;
            float amax;
            std::memcpy(&amax, &u, sizeof amax);
            const float other = amax * (float(next() % 1000) / 1000.0f);
            for (const auto& [lo, hi] : {std::pair{-amax, other}, std::pair{-other, amax}}) {
                float s, z;
                quant_params(lo, hi, g, &s, &z);
                for (float x : {lo, hi, -amax, amax}) {
                    if (!(x >= lo && x <= hi)) continue;
                    bool inside = false;
                    fake_quant_value(x, s, 1.0f / s, z, float(g.qmin), float(g.qmax), &inside);
                    ASSERT_TRUE(inside) << "bits " << bits << " x " << x << " range [" << lo << ", "
                                        << hi << "] scale " << s;
                    ++checked;
                }
            }
        }
        EXPECT_GT(checked, 800000);
    }
}

}  // namespace
}  // namespace ete
