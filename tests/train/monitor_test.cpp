// tests/train/monitor_test.cpp — the exposition format, CRC-32C, the event encoding, the
// straggler score and the model-FLOPs count, against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <set>

#include "ete/backend/backend.h"
#include "ete/train/monitor.h"
#include "ete/train/prometheus.h"
#include "ete/train/tensorboard.h"

namespace ete {
namespace {

TEST(Prometheus, ExpositionFollowsTheTextFormat) {
    const std::vector<MetricFamily> f = {
        {"ete_a_total", "a \\ counter\nof things", "counter", {{"", 3}}},
        {"ete_b", "b", "gauge", {{"rank=\"0\"", 0.5}, {"rank=\"1\"", std::nan("")}}},
        {"ete_inf", "i", "gauge", {{"", -INFINITY}}},
        {"ete_empty", "never printed", "gauge", {}}};
    EXPECT_EQ(render_exposition(f),
              "# HELP ete_a_total a \\\\ counter\\nof things\n# TYPE ete_a_total counter\n"
              "ete_a_total 3\n"
              "# HELP ete_b b\n# TYPE ete_b gauge\nete_b{rank=\"0\"} 0.5\nete_b{rank=\"1\"} NaN\n"
              "# HELP ete_inf i\n# TYPE ete_inf gauge\nete_inf -Inf\n");
    EXPECT_EQ(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(Prometheus, RunFamiliesNameEveryMetricOnce) {
    RunGauges g;
    g.steps = 7;
    g.loss = 2.5;
    g.rank_compute_s = {0.1, 0.4};
    g.skipped["nonfinite_grad"] = 2;
    std::set<std::string> names;
    for (const MetricFamily& f : run_metric_families(g)) {
        EXPECT_EQ(f.name.rfind("ete_", 0), 0u) << f.name;
        EXPECT_EQ(f.type == "counter", f.name.size() > 6 && f.name.ends_with("_total")) << f.name;
        EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    }
    const std::string text = render_exposition(run_metric_families(g));
    EXPECT_NE(text.find("\nete_steps_total 7\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\nete_loss 2.5\n"), std::string::npos);
    EXPECT_NE(text.find("ete_skipped_steps_total{cause=\"nonfinite_grad\"} 2\n"),
              std::string::npos);
    EXPECT_NE(text.find("ete_rank_straggler_score{rank=\"1\"} 4\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("ete_validation_loss "), std::string::npos);  // no value: no sample
}

// The Grafana dashboard in examples/ plots only metrics ETE serves (it cannot drift from them).
TEST(Prometheus, TheDashboardUsesServedMetrics) {
    std::set<std::string> served;
    for (const MetricFamily& f : run_metric_families(RunGauges{})) served.insert(f.name);
    std::ifstream in(std::string(ETE_SOURCE_DIR) + "/examples/grafana_dashboard.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::regex name("ete_[a-z_]+");
    int used = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), name);
         it != std::sregex_iterator(); ++it) {
        if (it->str() == "ete_training" || it->str() == "ete_") continue;  // the uid, not a metric
        EXPECT_TRUE(served.count(it->str())) << it->str() << " is not served";
        ++used;
    }
    EXPECT_GE(used, 10);
}

TEST(Monitor, StragglerScoresAgainstTheFastestRank) {
    EXPECT_EQ(straggler_scores({0.2, 0.1, 0.4}), (std::vector<double>{2, 1, 4}));
    EXPECT_EQ(straggler_scores({0.0, 0.5}), (std::vector<double>{0, 1}));  // unknown stays 0
}

// Llama, C 8, F 16, H 2 (D 4), KV 1, L 1, V 10: matmul weights q 64 + k, v 64 + o 64 + mlp 384 +
// head 80 = 656; attention 12 · 1 · 2 · 4 · T(3) = 288.
TEST(Monitor, ModelFlopsFollowTheStandardAccounting) {
    ModelConfig mc;
    mc.arch = Arch::Llama;
    mc.hidden_size = 8;
    mc.intermediate_size = 16;
    mc.num_heads = 2;
    mc.num_kv_heads = 1;
    mc.num_layers = 1;
    mc.vocab_size = 10;
    EXPECT_DOUBLE_EQ(model_flops_per_token(mc, 3, 0, false), 6 * 656 + 288);
    EXPECT_DOUBLE_EQ(model_flops_per_token(mc, 3, 50, true), 4 * 656 + 6 * 50 + 288);
}

// The shapes the planner's GEMM measurement runs are the products the FLOP count counts: 6 ·
// (layers · Σ out · in + the head's) is model_flops_per_token's matmul part, for every family's
// MLP and head layout; split tp ways, each rank's are a tp-th of them (exact: integer shapes).
TEST(Monitor, TheMeasuredGemmShapesAreTheCountedOnes) {
    for (Arch arch : {Arch::Llama, Arch::GPT2}) {
        ModelConfig mc;
        mc.arch = arch;
        mc.hidden_size = 64;
        mc.intermediate_size = 96;
        mc.num_heads = 4;
        mc.num_kv_heads = arch == Arch::Llama ? 2 : 4;
        mc.num_layers = 3;
        mc.vocab_size = 100;
        for (int tp : {1, 2}) {
            const ModelGemmShapes g = model_gemm_shapes(mc, tp);
            double nk = 0;
            for (const auto& [n, k] : g.layer) nk += double(n) * double(k);
            const double flops = 6 * (mc.num_layers * nk + double(g.head.first * g.head.second));
            const double counted =
                model_flops_per_token(mc, 5, 0, false) - attention_flops_per_token(mc, 5);
            EXPECT_DOUBLE_EQ(flops * tp, counted) << "tp " << tp;
        }
    }
}

// The measurement runs those products through the backend and returns a finite positive rate,
// below any CPU's fp32 peak (1 PFLOP/s); the value itself is this machine's, not asserted.
TEST(Monitor, TheModelGemmRateIsMeasured) {
    ModelConfig mc;
    mc.hidden_size = 64;
    mc.intermediate_size = 96;
    mc.num_heads = 4;
    mc.num_kv_heads = 2;
    mc.num_layers = 2;
    mc.vocab_size = 100;
    std::unique_ptr<Backend> be = make_cpu_backend();
    for (DType dt : {DType::F32, DType::BF16}) {
        const double r = measure_model_gemm_flops(*be, dt, mc, 16, 2, 1);
        EXPECT_TRUE(std::isfinite(r) && r > 0 && r < 1e15) << r;
    }
}

TEST(TensorBoard, Crc32cAndItsMask) {
    EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
    const uint32_t c = 0xE3069283u;
    EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

// Event{wall_time 1.0, step 3, summary{value{tag "x", simple_value 0.5}}} on the wire: Value is
// 0a 01 'x' 15 <0.5f> (8 bytes), Summary 0a 08 <Value>, Event field 5: 2a 0a <Summary>.
TEST(TensorBoard, ScalarEventWireFormat) {
    const std::string e = tb_scalar_event(3, 1.0, {{"x", 0.5}});
    const std::string want = std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9) +
                             std::string("\x10\x03", 2) +
                             std::string("\x2a\x0a\x0a\x08\x0a\x01x\x15\x00\x00\x00\x3f", 12);
    EXPECT_EQ(e, want);
}

}  // namespace
}  // namespace ete
