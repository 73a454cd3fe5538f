// tests/train/anomaly_test.cpp — anomalies every rank agrees on (train/anomaly.h), fault
// injection (train/fault.h), and what a run does about repeated anomalies: stop with the last
// good weights saved, or roll back to the newest checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/train/anomaly.h"
#include "ete/train/fault.h"
#include "ete/train/trainer.h"
#include "test_util.h"
#include "tiny_run.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

TEST(Anomaly, VerdictNamesEachCauseAndItsRanks) {
    const AnomalyVerdict v =
        combine_anomalies({0, kNonFiniteGrad, 0, kNonFiniteGrad | kNonFiniteLoss}, 0.0);
    EXPECT_TRUE(v.skip());
    EXPECT_TRUE(v.anomalous());
    EXPECT_EQ(v.describe(), "non-finite loss on rank 3; non-finite gradient on rank 1, 3");
    EXPECT_EQ(v.causes_json().dump(), R"({"nonfinite_grad":[1,3],"nonfinite_loss":[3]})");
    const AnomalyVerdict spike = combine_anomalies({kLossSpike, 0}, 9.25);
    EXPECT_EQ(spike.describe(), "loss spike (z = 9.2) on rank 0");
    const AnomalyVerdict overflow = combine_anomalies({kOverflow, kOverflow}, 0.0);
    EXPECT_TRUE(overflow.skip());
    EXPECT_FALSE(overflow.anomalous());  // the fp16 loss scaler's business
    EXPECT_FALSE(combine_anomalies({0, 0, 0}, 0.0).skip());
    // A norm that is non-finite because of rank 1's NaN is not blamed on the others; one that
    // overflowed with every element finite is.
    EXPECT_EQ(combine_anomalies({kNonFiniteNorm, kNonFiniteGrad}, 0.0).describe(),
              "non-finite gradient on rank 1");
    EXPECT_EQ(combine_anomalies({kNonFiniteNorm, kNonFiniteNorm}, 0.0).describe(),
              "non-finite gradient norm on rank 0, 1");
}

TEST(Anomaly, LossWindowJudgesOnceFullAndRoundTrips) {
    LossWindow w(4);
    for (double l : {2.0, 2.2, 1.8, 2.0}) {
        EXPECT_FALSE(w.zscore(100.0)) << "not full yet";
        w.push(l);
    }
    // mean 2, population sd sqrt(0.02) = 0.1414... (1e-12: a few double roundings, ~1e-15)
    EXPECT_NEAR(*w.zscore(3.0), 1.0 / std::sqrt(0.02), 1e-12);
    EXPECT_LT(*w.zscore(1.0), 0.0);
    w.push(std::nan(""));  // never enters the window
    EXPECT_NEAR(*w.zscore(3.0), 1.0 / std::sqrt(0.02), 1e-12);
    w.push(6.0);  // drops the oldest (2.0): 2.2, 1.8, 2.0, 6.0
    LossWindow r(4);
    r.restore(w.state());
    EXPECT_EQ(*r.zscore(5.0), *w.zscore(5.0));
    // A flat loss: the sd floor keeps rounding noise from reading as a spike.
    LossWindow flat(3);
    for (int i = 0; i < 3; ++i) flat.push(1.0);
    EXPECT_LT(*flat.zscore(1.0 + 1e-9), 0.01);
}

TEST(Anomaly, BadConfigNamesTheKey) {
    AnomalyConfig c;
    c.on_repeated = "retry";
    EXPECT_THROW(
        {
            try {
                validate_anomaly(c);
            } catch (const Error& e) {
                EXPECT_STREQ(e.what(), "anomaly.on_repeated = 'retry': expected stop or rollback");
                throw;
            }
        },
        Error);
    c = {};
    c.window = 1;
    EXPECT_THROW(validate_anomaly(c), Error);
}

TEST(Fault, ParsesEveryKindAndFiresWhereTold) {
    const FaultPlan p(
        parse_faults("nan_grad@step=5,rank=1; hang@step=9,rank=2;kill@step=12,rank=0;"
                     "slow@rank=1,ms=200;error@step=3"));
    EXPECT_TRUE(p.fires("nan_grad", 5, 1));
    EXPECT_FALSE(p.fires("nan_grad", 5, 0));
    EXPECT_FALSE(p.fires("nan_grad", 6, 1));
    EXPECT_TRUE(p.fires("error", 3, 7));  // no rank: every rank
    EXPECT_EQ(p.slow_ms(1, 1), 200);
    EXPECT_EQ(p.slow_ms(40, 1), 200);
    EXPECT_EQ(p.slow_ms(1, 0), 0);
    EXPECT_TRUE(p.fires("kill", 12, 0));
    // A restarted attempt does not die or hang again unless told always=1.
    const FaultPlan again(
        parse_faults("kill@step=12,rank=0;hang@step=9,always=1;kill@step=4,rank=1,attempt=1"), 1);
    EXPECT_FALSE(again.fires("kill", 12, 0));
    EXPECT_TRUE(again.fires("hang", 9, 4));
    EXPECT_TRUE(again.fires("kill", 4, 1));  // the second attempt's own fault
    EXPECT_FALSE(FaultPlan(parse_faults("kill@step=4,rank=1,attempt=1")).fires("kill", 4, 1));
}

TEST(Fault, BadSpecsSayWhatIsExpected) {
    for (const char* bad : {"boom@step=1", "nan_grad@step=0,rank=1", "nan_grad@rank=1",
                            "nan_grad@step=x", "slow@rank=1", "kill@step=2,when=3", "nan_grad@1"}) {
        try {
            parse_faults(bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("ETE_FAULT '"), std::string::npos) << e.what();
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        }
    }
    // A key given twice was taken silently (the last); a 100 KB spec was echoed whole.
    EXPECT_NE(error_of([] { parse_faults("kill@step=2,step=5"); }).find("'step' given twice"),
              std::string::npos);
    const std::string huge(100000, 'x');
    EXPECT_EQ(error_of([&] { parse_faults(huge); }),
              "ETE_FAULT: 100000 characters, expected at most 4096");
}

using AnomalyRun = TinyRunTest;

std::string model_bytes(const fs::path& checkpoint) {
    return read_file((checkpoint / "model.safetensors").string());
}

// Divergence is not silent: NaN gradients from step 3 on (as a too-high lr gives) are skipped by
// every rank; after max_consecutive_skips the run stops with a checkpoint of the last good
// weights (step 2's), rotation keeps it, metrics say which step, cause and rank, and the run
// reports diverged (the CLI exits 3). Before the fix the NaN reached the weights, every later
// checkpoint and final/.
TEST_F(AnomalyRun, RepeatedNonFiniteGradientsStopWithTheLastGoodWeights) {
    cfg_.checkpoint_every = 2;
    cfg_.keep_checkpoints = 1;
    cfg_.anomaly_max_consecutive_skips = 3;
    ScopedEnv f("ETE_FAULT", "nan_grad@step=3;nan_grad@step=4;nan_grad@step=5;nan_grad@step=6");
    const TrainSummary s = run_training(cfg_, (dir_ / "a").string());
    EXPECT_TRUE(s.diverged);
    EXPECT_EQ(s.steps, 5);
    EXPECT_FALSE(fs::exists(dir_ / "a" / "final"));
    const fs::path ck = dir_ / "a" / "checkpoints";
    ASSERT_TRUE(fs::exists(ck / "step_00000005"));
    EXPECT_FALSE(fs::exists(ck / "step_00000002"));  // rotated away: step 5's holds its weights
    // The reference: the same run stopped after step 2.
    RunConfig two = cfg_;
    two.steps = 2;
    run_training(two, (dir_ / "b").string());
    EXPECT_EQ(model_bytes(ck / "step_00000005"),
              model_bytes(dir_ / "b" / "checkpoints" / "step_00000002"));
    const auto m = read_metrics((dir_ / "a" / "metrics.jsonl").string());
    ASSERT_EQ(m.size(), 5u);
    EXPECT_FALSE(m[1].contains("skipped"));
    for (size_t i = 2; i < 5; ++i) {
        EXPECT_TRUE(m[i]["skipped"].get<bool>());
        EXPECT_EQ(m[i]["skip_causes"].dump(), R"({"nonfinite_grad":[0]})");
    }
}

// A real divergence, no injection: lr = 10 drives the model's gradients to NaN within a few
// dozen steps on the native build (step 24 here; an ASan build's different code path may take
// longer). Whether or not it diverges in these 100 steps, nothing non-finite is ever on disk; when
// it does, the run stops on its own (the stop itself is pinned down by the injected test above).
TEST_F(AnomalyRun, ATooHighLearningRateNeverSavesNaN) {
    cfg_.model.hidden_size = 256;
    cfg_.model.intermediate_size = 688;
    cfg_.lr = 10;
    cfg_.min_lr = 0;
    cfg_.warmup_steps = 0;
    cfg_.steps = 100;
    cfg_.eval_every = 0;
    cfg_.checkpoint_every = 5;
    cfg_.keep_checkpoints = 0;
    const TrainSummary s = run_training(cfg_, (dir_ / "a").string());
    const auto m = read_metrics((dir_ / "a" / "metrics.jsonl").string());
    if (s.diverged) {
        EXPECT_TRUE(m.back()["skipped"].get<bool>());
        EXPECT_EQ(int(m.size()), s.steps);
    }
    auto finite_weights = [](const fs::path& file) {
        const std::string bytes = read_file(file.string());
        const size_t header = size_t(*reinterpret_cast<const uint64_t*>(bytes.data()));
        const float* v = reinterpret_cast<const float*>(bytes.data() + 8 + header);
        const size_t n = (bytes.size() - 8 - header) / sizeof(float);
        return std::all_of(v, v + n, [](float x) { return std::isfinite(x); });
    };
    for (const auto& e : fs::directory_iterator(dir_ / "a" / "checkpoints"))
        EXPECT_TRUE(finite_weights(e.path() / "model.safetensors")) << e.path();
    if (!s.diverged) {
        EXPECT_TRUE(finite_weights(dir_ / "a" / "final" / "model.safetensors"));
    }
}

// rollback: steps 6 and 7 skipped (max 2) roll back to the checkpoint of step 4, dropping step
// 5's update; step 8 trains on. That equals a run where steps 5, 6 and 7 were all skipped (no
// update, AdamW's count at 4), bit for bit, and differs from the run without faults.
TEST_F(AnomalyRun, RollbackReloadsTheNewestCheckpointAndGoesOn) {
    cfg_.checkpoint_every = 4;
    cfg_.anomaly_max_consecutive_skips = 2;
    cfg_.anomaly_on_repeated = "rollback";
    TrainSummary s;
    {
        ScopedEnv f("ETE_FAULT", "nan_grad@step=6;nan_grad@step=7");
        s = run_training(cfg_, (dir_ / "rollback").string());
    }
    EXPECT_FALSE(s.diverged);
    EXPECT_EQ(s.steps, 8);
    RunConfig c = cfg_;
    c.anomaly_max_consecutive_skips = 10;
    {
        ScopedEnv f("ETE_FAULT", "nan_grad@step=5;nan_grad@step=6;nan_grad@step=7");
        run_training(c, (dir_ / "skipped").string());
    }
    run_training(c, (dir_ / "clean").string());
    const auto final_bytes = [&](const char* run) {
        return read_file((dir_ / run / "final" / "model.safetensors").string());
    };
    EXPECT_EQ(final_bytes("rollback"), final_bytes("skipped"));
    EXPECT_NE(final_bytes("rollback"), final_bytes("clean"));
    // With no checkpoint to roll back to, the policy stops instead.
    c = cfg_;
    c.checkpoint_every = 0;
    ScopedEnv f("ETE_FAULT", "nan_grad@step=2;nan_grad@step=3");
    EXPECT_TRUE(run_training(c, (dir_ / "nothing").string()).diverged);
}

// anomaly.spike_zscore: a loss 1000 times the window's (ETE_FAULT spike) is skipped — judged by
// rank 0 against the last 4 taken steps — and the run goes on; without spike detection it is
// taken.
TEST_F(AnomalyRun, ALossSpikeIsSkippedOnceTheWindowIsFull) {
    cfg_.anomaly_spike_zscore = 6;
    cfg_.anomaly_window = 4;
    ScopedEnv f("ETE_FAULT", "spike@step=7");  // the window: steps 3..6
    run_training(cfg_, (dir_ / "a").string());
    const auto m = read_metrics((dir_ / "a" / "metrics.jsonl").string());
    ASSERT_EQ(m.size(), 8u);
    EXPECT_EQ(m[6]["skip_causes"].dump(), R"({"loss_spike":[0]})");
    EXPECT_FALSE(m[7].contains("skipped"));
    cfg_.anomaly_spike_zscore = 0;
    run_training(cfg_, (dir_ / "b").string());
    for (const auto& j : read_metrics((dir_ / "b" / "metrics.jsonl").string()))
        EXPECT_FALSE(j.contains("skipped"));
}

// A NaN loss on the one rank is caught even where the gradients stay finite.
TEST_F(AnomalyRun, ANonFiniteLossIsSkippedToo) {
    ScopedEnv f("ETE_FAULT", "nan_loss@step=2");
    run_training(cfg_, (dir_ / "a").string());
    const auto m = read_metrics((dir_ / "a" / "metrics.jsonl").string());
    ASSERT_EQ(m.size(), 8u);
    EXPECT_EQ(m[1]["skip_causes"].dump(), R"({"nonfinite_loss":[0]})");
    EXPECT_FALSE(m[2].contains("skipped"));
}

}  // namespace
}  // namespace ete
