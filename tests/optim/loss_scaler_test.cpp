// tests/optim/loss_scaler_test.cpp — the fp16 dynamic loss scaler: halve and skip on a non-finite
// gradient, double after the window of clean steps, restore exactly, stay off for bf16/fp32.
#include "ete/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace ete {
namespace {

TEST(LossScaler, DisabledIsScaleOneAndNeverSkipsAFiniteStep) {
    LossScaler s;
    EXPECT_FALSE(s.enabled());
    EXPECT_EQ(s.scale(), 1.0);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(s.update(false));
    EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScaler, HalvesOnOverflowAndGrowsAfterTheWindow) {
    LossScaler s = LossScaler::for_fp16(3);
    EXPECT_EQ(s.scale(), 65536.0);
    EXPECT_FALSE(s.update(true));  // skipped
    EXPECT_EQ(s.scale(), 32768.0);
    EXPECT_EQ(s.skipped_total(), 1);
    EXPECT_TRUE(s.update(false));
    EXPECT_TRUE(s.update(false));
    EXPECT_EQ(s.scale(), 32768.0);  // 2 clean steps: not yet
    EXPECT_TRUE(s.update(false));
    EXPECT_EQ(s.scale(), 65536.0);  // the 3rd clean step doubles
    EXPECT_EQ(s.good_steps(), 0);
    // An overflow resets the count of clean steps.
    EXPECT_TRUE(s.update(false));
    EXPECT_FALSE(s.update(true));
    EXPECT_EQ(s.good_steps(), 0);
    EXPECT_EQ(s.scale(), 32768.0);
    EXPECT_TRUE(s.update(false));
    EXPECT_TRUE(s.update(false));
    EXPECT_EQ(s.scale(), 32768.0);
}

TEST(LossScaler, NeverBelowOne) {
    LossScaler s = LossScaler::for_fp16(2000);
    for (int i = 0; i < 40; ++i) s.update(true);
    EXPECT_EQ(s.scale(), LossScaler::kMinScale);
}

TEST(LossScaler, StateRestoresExactly) {
    LossScaler a = LossScaler::for_fp16(5);
    a.update(true);
    a.update(false);
    a.update(false);
    LossScaler b = LossScaler::for_fp16(5);
    b.restore(a.state());
    EXPECT_EQ(b.scale(), a.scale());
    EXPECT_EQ(b.good_steps(), a.good_steps());
    EXPECT_EQ(b.skipped_total(), a.skipped_total());
    for (bool overflow : {false, false, true, false, false, false, false, false}) {
        EXPECT_EQ(a.update(overflow), b.update(overflow));
        EXPECT_EQ(a.scale(), b.scale());
    }
    EXPECT_NE(error_of([&] { b.restore(nlohmann::json{{"scale", 2.0}}); }), "<no error>");
    EXPECT_NE(error_of([&] {
                  b.restore(nlohmann::json{{"scale", 0.5}, {"good_steps", 0}, {"skipped", 0}});
              }).find("below"),
              std::string::npos);
}

}  // namespace
}  // namespace ete
