// tests/parallel/flight_recorder_test.cpp — the per-group sequence numbers that let a hang
// report tell which ranks entered a collective, and the bounded history.
#include <gtest/gtest.h>

#include "ete/parallel/flight_recorder.h"

namespace ete {
namespace {

TEST(FlightRecorder, CountsCollectivesPerGroupAndKeepsTheLastOnes) {
    FlightRecorder& fr = FlightRecorder::instance();
    fr.clear();
    const uint64_t a = fr.begin("all_reduce", "dp", true, 8, -1, {0, 1});
    const uint64_t b = fr.begin("send", "pp", false, 16, 1, {0, 2});
    const uint64_t c = fr.begin("all_gather", "dp", true, 4, -1, {0, 1});
    EXPECT_EQ(fr.issued(), (std::map<std::string, uint64_t>{{"dp", 2}}));  // p2p not counted
    EXPECT_EQ(fr.members().at("pp"), (std::vector<int>{0, 2}));
    fr.end(a);
    auto pending = fr.pending();
    ASSERT_EQ(pending.size(), 2u);
    EXPECT_EQ(pending[0].id, b);  // oldest first
    EXPECT_EQ(pending[0].peer, 1);
    EXPECT_EQ(pending[1].seq, 2u);
    ASSERT_EQ(fr.recent().size(), 1u);
    EXPECT_TRUE(fr.recent()[0].done);
    EXPECT_EQ(fr.recent()[0].op, "all_reduce");
    fr.end(b);
    fr.end(c);
    for (size_t i = 0; i < 2 * FlightRecorder::kKeep; ++i)
        fr.end(fr.begin("barrier", "world", true, 0, -1, {0, 1}));
    EXPECT_EQ(fr.recent().size(), FlightRecorder::kKeep);
    EXPECT_EQ(fr.recent().back().seq, 2 * FlightRecorder::kKeep);
    EXPECT_TRUE(fr.pending().empty());
    fr.clear();
}

TEST(FlightRecorder, TheTimeoutHookSeesWhereTheOperationWas) {
    FlightRecorder& fr = FlightRecorder::instance();
    std::string seen;
    fr.set_timeout_hook([&](const std::string& w) { seen = w; });
    fr.timed_out("all_reduce on group dp");
    EXPECT_EQ(seen, "all_reduce on group dp");
    fr.set_timeout_hook({});
    fr.timed_out("again");  // no hook: nothing happens
    EXPECT_EQ(seen, "all_reduce on group dp");
}

}  // namespace
}  // namespace ete
