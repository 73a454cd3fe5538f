// tests/train/rank_controller_test.cpp — the dynamic-rank rule: no decision in the first window,
// grow on a large |grad B| / |B|, shrink on a plateau, bounds, and a restored state deciding
// exactly like the uninterrupted controller.
#include <gtest/gtest.h>

#include "ete/train/rank_controller.h"

namespace ete {
namespace {

TEST(RankController, FollowsTheDocumentedRule) {
    RankController c({2, 16, 4, 0.01, 1.0}, 8);
    // Window 1 (steps 1-4): never a decision, whatever the statistics say.
    for (int s = 1; s <= 4; ++s) EXPECT_FALSE(c.observe(s, 5.0, 100.0));
    // Window 2: a plateau (loss flat) and a small rho: shrink 8 -> 4.
    for (int s = 5; s <= 7; ++s) EXPECT_FALSE(c.observe(s, 5.0, 0.1));
    auto ch = c.observe(8, 5.0, 0.1);
    ASSERT_TRUE(ch);
    EXPECT_EQ(ch->reason, "shrink");
    EXPECT_EQ(ch->from, 8);
    EXPECT_EQ(ch->to, 4);
    EXPECT_NEAR(ch->rho, 0.1, 1e-12);  // the value observed, through a few double roundings
    // Window 3: the loss falls fast: no change.
    double loss = 5.0;
    std::optional<RankChange> none;
    for (int s = 9; s <= 12; ++s) none = c.observe(s, loss -= 0.5, 0.1);
    EXPECT_FALSE(none);
    // Window 4: a large rho grows 4 -> 8, even on a plateau (grow wins).
    for (int s = 13; s <= 15; ++s) c.observe(s, loss, 3.0);
    ch = c.observe(16, loss, 3.0);
    ASSERT_TRUE(ch);
    EXPECT_EQ(ch->reason, "grow");
    EXPECT_EQ(ch->to, 8);
    // Bounds: shrinking stops at r_min.
    RankController low({2, 16, 1, 1.0, 1e9}, 3);
    low.observe(1, 1.0, 0);
    EXPECT_EQ(low.observe(2, 1.0, 0)->to, 2);
    EXPECT_FALSE(low.observe(3, 1.0, 0));
}

TEST(RankController, RestoredStateDecidesLikeTheOriginal) {
    RankController a({2, 16, 3, 0.05, 2.0}, 8), b({2, 16, 3, 0.05, 2.0}, 8);
    auto loss = [](int s) { return 4.0 - 0.01 * s * (s % 3); };
    for (int s = 1; s <= 5; ++s) a.observe(s, loss(s), 0.5 + s);
    b.restore(nlohmann::json::parse(a.state().dump()));  // through JSON, as in a checkpoint
    for (int s = 6; s <= 30; ++s) {
        auto ca = a.observe(s, loss(s), 3.0 / s), cb = b.observe(s, loss(s), 3.0 / s);
        ASSERT_EQ(bool(ca), bool(cb)) << s;
        if (ca) {
            EXPECT_EQ(ca->to, cb->to);
        }
        ASSERT_EQ(a.rank(), b.rank());
    }
    EXPECT_EQ(a.state(), b.state());
}

}  // namespace
}  // namespace ete
