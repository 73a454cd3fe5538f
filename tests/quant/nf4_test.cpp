// tests/quant/nf4_test.cpp — the host NF4 quantizer against the goldens of
// tools/gen_nf4_goldens.py (an independent implementation of bitsandbytes' algorithm): code
// table, thresholds and ties, odd counts, nibble order, block sizes, zero blocks and double
// quantization; the fast path against the scalar reference; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "ete/io/safetensors.h"
#include "ete/quant/nf4.h"
#include "test_util.h"

namespace ete {
namespace nf4_test {

const SafetensorsFile& golden() {
    static const SafetensorsFile f =
        SafetensorsFile::open(std::string(ETE_SOURCE_DIR) + "/tests/golden/nf4.safetensors");
    return f;
}

template <typename T>
std::vector<T> read(const std::string& name) {
    const auto b = golden().bytes(name);
    std::vector<T> v(b.size() / sizeof(T));
    std::memcpy(v.data(), b.data(), b.size());
    return v;
}

struct Case {
    std::string name;
    int64_t rows, cols;
    int blocksize;
    bool double_quant;
};

std::vector<Case> cases() {
    std::vector<Case> out;
    for (const auto& c : nlohmann::json::parse(golden().metadata().at("cases"))) {
        out.push_back({c["name"], c["rows"], c["cols"], c["blocksize"], c["double_quant"]});
    }
    return out;
}

void expect_bits_eq(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << what << " [" << i << "]: " << got[i] << " vs " << want[i];
    }
}

TEST(Nf4, CodeTableAndThresholdsMatchTheGolden) {
    const auto code = read<float>("nf4_code");
    ASSERT_EQ(code.size(), 16u);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(code[size_t(i)], kNf4Code[size_t(i)]) << i;
    // The thresholds are the midpoints of the codes (bitsandbytes' constants: within an ulp of
    // the midpoint of the fp32 codes).
    for (int i = 0; i < 15; ++i) {
        const double mid = (double(kNf4Code[size_t(i)]) + double(kNf4Code[size_t(i + 1)])) / 2;
        const float m = std::fabs(float(mid));
        EXPECT_NEAR(kNf4Mid[size_t(i)], mid, std::nextafter(m, 2.0f) - m) << i;  // an ulp
        EXPECT_GT(kNf4Mid[size_t(i)], kNf4Code[size_t(i)]);
        EXPECT_LT(kNf4Mid[size_t(i)], kNf4Code[size_t(i + 1)]);
    }
    EXPECT_EQ(nf4_index(kNf4Mid[3]), 3);  // a tie goes to the lower code
    EXPECT_EQ(nf4_index(std::nextafter(kNf4Mid[3], 1.0f)), 4);
    EXPECT_EQ(nf4_index(-1.0f), 0);
    EXPECT_EQ(nf4_index(1.0f), 15);
    EXPECT_EQ(nf4_index(0.0f), kNf4Zero);
}

TEST(Nf4, DynamicMapMatchesBitsandbytesWithinAnUlp) {
    const auto want = read<float>("dynamic_map");
    ASSERT_EQ(want.size(), 256u);
    const auto& got = nf4_dynamic_map();
    for (size_t i = 0; i < 256; ++i) {
        const float ulp = std::nextafter(std::fabs(want[i]), 2.0f) - std::fabs(want[i]);
        EXPECT_LE(std::fabs(got[i] - want[i]), ulp) << i << ": " << got[i] << " vs " << want[i];
        if (i) {
            EXPECT_LT(got[i - 1], got[i]);
        }
    }
    EXPECT_EQ(got[127], 0.0f);
    EXPECT_EQ(got[255], 1.0f);
}

class Nf4Golden : public ::testing::TestWithParam<bool> {};  // fast path?

TEST_P(Nf4Golden, EveryCaseMatchesTheIndependentImplementation) {
    const bool fast = GetParam();
    for (const Case& c : cases()) {
        SCOPED_TRACE(c.name);
        const auto x = read<float>(c.name + ".input");
        ASSERT_EQ(int64_t(x.size()), c.rows * c.cols);
        const Nf4Options opt{c.blocksize, c.double_quant};
        Nf4Tensor t = fast ? nf4_quantize(x.data(), c.rows, c.cols, opt)
                           : nf4_quantize_ref(x.data(), c.rows, c.cols, opt);
        ASSERT_NO_THROW(t.check("test"));
        EXPECT_EQ(t.packed, read<uint8_t>(c.name + ".packed"));
        if (!c.double_quant) {
            expect_bits_eq(t.absmax, read<float>(c.name + ".absmax"), "absmax");
        } else {
            const auto offset = read<float>(c.name + ".offset");
            EXPECT_EQ(t.offset, offset[0]);
            expect_bits_eq(t.nested_absmax, read<float>(c.name + ".nested_absmax"),
                           "nested_absmax");
            // The codes are nearest values of the map: with the golden's map ETE picks the same
            // ones (ours differs from torch's float32 linspace by at most an ulp somewhere).
            const auto gmap = read<float>("dynamic_map");
            t.nested_map = gmap;
            const auto want_q = read<uint8_t>(c.name + ".absmax_q");
            size_t differ = 0;
            for (size_t i = 0; i < want_q.size(); ++i) differ += t.absmax_q[i] != want_q[i];
            EXPECT_EQ(differ, 0u) << "absmax codes that differ";
            t.absmax_q = want_q;
            expect_bits_eq(t.block_absmax(), read<float>(c.name + ".absmax_dq"), "absmax_dq");
        }
        std::vector<float> y(x.size());
        if (fast) {
            nf4_dequantize(t, y.data());
        } else {
            nf4_dequantize_ref(t, y.data());
        }
        expect_bits_eq(y, read<float>(c.name + ".dequant"), "dequant");
    }
}

INSTANTIATE_TEST_SUITE_P(RefAndFast, Nf4Golden, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "fast" : "ref"; });

TEST(Nf4, NibbleOrderHighFirstAndOddCountsPadLow) {
    // Codes 15 (1.0) then 0 (-1.0) then 7 (0): bytes 0xF0, 0x70.
    const std::vector<float> x = {1.0f, -1.0f, 0.0f};
    const Nf4Tensor t = nf4_quantize_ref(x.data(), 1, 3, {32, false});
    ASSERT_EQ(t.packed.size(), 2u);
    EXPECT_EQ(t.packed[0], 0xF0);
    EXPECT_EQ(t.packed[1], 0x70);
}

TEST(Nf4, ZeroBlockStaysExactlyZeroUnderDoubleQuant) {
    std::vector<float> x(64 * 8);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (auto& v : x) v = nd(rng);
    std::fill(x.begin() + 64 * 5, x.begin() + 64 * 6, 0.0f);
    const Nf4Tensor t = nf4_quantize(x.data(), 8, 64, {64, true});
    ASSERT_TRUE(t.double_quant());
    EXPECT_NE(t.block_absmax()[5], 0.0f);  // the 8-bit absmax is only approximately 0 ...
    std::vector<float> y(x.size());
    nf4_dequantize(t, y.data());
    for (int i = 64 * 5; i < 64 * 6; ++i) ASSERT_EQ(y[size_t(i)], 0.0f) << i;  // ... values are
}

TEST(Nf4, FastPathEqualsReferenceOnRandomShapes) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    for (auto [rows, cols, bs, dq] : {std::tuple{37, 91, 32, true},
                                      {64, 1000, 128, false},
                                      {5, 4097, 4096, true},
                                      {1, 33, 64, false}}) {
        std::vector<float> x(size_t(rows * cols));
        for (auto& v : x) v = nd(rng) * 0.05f;
        const Nf4Tensor a = nf4_quantize_ref(x.data(), rows, cols, {bs, dq});
        const Nf4Tensor b = nf4_quantize(x.data(), rows, cols, {bs, dq});
        EXPECT_EQ(a.packed, b.packed);
        EXPECT_EQ(a.absmax, b.absmax);
        EXPECT_EQ(a.absmax_q, b.absmax_q);
        EXPECT_EQ(a.nested_absmax, b.nested_absmax);
        std::vector<float> ya(x.size()), yb(x.size());
        nf4_dequantize_ref(a, ya.data());
        nf4_dequantize(b, yb.data());
        expect_bits_eq(ya, yb, "dequant");
        // The reconstruction error of each element is at most half the widest code gap (0.304)
        // times its block absmax (plus the 8-bit absmax error under double quantization).
        const auto am = a.block_absmax();
        for (size_t e = 0; e < x.size(); ++e) {
            ASSERT_LE(std::fabs(ya[e] - x[e]), 0.16f * am[e / size_t(bs)] * 1.02f + 1e-6f) << e;
        }
    }
}

TEST(Nf4, BitsPerParameterWithDoubleQuant) {
    // 4 + 8/64 + 32/(64·256) = 4.1270 bits, plus the per-tensor 1 KB map and offset (0.001 bits
    // at 8M elements; bitsandbytes stores them per tensor too).
    const int64_t rows = 2048, cols = 4096;
    std::vector<float> x(size_t(rows * cols), 0.5f);
    x[7] = -1.0f;
    const Nf4Tensor t = nf4_quantize(x.data(), rows, cols, {64, true});
    const double per_tensor = 8.0 * (256 * 4 + 4) / double(x.size());
    const double bits = 8.0 * double(t.storage_bytes()) / double(x.size());
    // Byte counts over element counts: exact but for a few double roundings (1e-9 is ~1e6 ulp).
    EXPECT_NEAR(bits - per_tensor, 4.0 + 8.0 / 64 + 32.0 / (64 * 256), 1e-9);
    EXPECT_NEAR(bits, 4.127, 0.002);  // the figure the docs quote, to its 3 decimals
    const Nf4Tensor p = nf4_quantize(x.data(), rows, cols, {64, false});
    EXPECT_NEAR(8.0 * double(p.storage_bytes()) / double(x.size()), 4.5, 1e-9);
}

TEST(Nf4, BadInputIsAOneLineError) {
    std::vector<float> x(96, 1.0f);
    EXPECT_EQ(error_of([&] {
                  nf4_quantize(x.data(), 1, 96, {48, true});
              }),
              "nf4 quantize: NF4 block size 48 is not a power of two in [32, 4096]");
    EXPECT_NE(error_of([&] {
                  nf4_quantize(x.data(), 1, 96, {8192, true});
              }).find("8192"),
              std::string::npos);
    x[17] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(error_of([&] {
                  nf4_quantize(x.data(), 1, 96, {64, true});
              }),
              "nf4 quantize: element 17 is nan, expected a finite value");
    x[17] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(error_of([&] {
                  nf4_quantize_ref(x.data(), 1, 96, {64, false});
              }),
              "nf4 quantize: element 17 is inf, expected a finite value");
}

}  // namespace nf4_test
}  // namespace ete
