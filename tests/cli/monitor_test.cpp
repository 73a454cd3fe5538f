// tests/cli/monitor_test.cpp — what operators scrape and plot, checked by independent readers:
// Debian's prometheus_client parser and real Prometheus server (tests/ops/prometheus_scrape.py),
// a protoc-compiled TensorBoard Event reader (tests/ops/read_tfevents.py), and the straggler
// score of a rank slowed by ETE_FAULT.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "shell.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

// The Debian packages the independent readers need: their absence skips these tests on a
// developer's machine and fails them in CI (run.sh installs them).
bool have_python_modules(const std::string& modules) {
    return run_shell("/usr/bin/python3 -c 'import " + modules + "' 2>/dev/null").code == 0;
}

class Monitor : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_monitor_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::vector<int32_t> ids;
        for (int i = 0; i < 6000; ++i) ids.push_back((i * 13 + (i / 5) % 7) % 61);
        write_token_shard((dir_ / "toks.bin").string(), ids, 61);
        write_file_atomic(
            (dir_ / "job.toml").string(),
            "[model]\narch = \"llama\"\nvocab_size = 61\nhidden_size = 32\n"
            "intermediate_size = 48\nnum_layers = 2\nnum_heads = 4\nnum_kv_heads = 2\n"
            "max_position_embeddings = 32\n[train]\nsteps = 12\nmicro_batch = 4\nseq_len = 16\n"
            "lr = 1e-2\nwarmup_steps = 1\neval_every = 6\neval_batches = 1\nlog_every = 1\n"
            "[data]\ntrain = \"" +
                (dir_ / "toks.bin").string() + "\"\ntokenizer = \"\"\nval_fraction = 0.1\n");
    }
    void TearDown() override { fs::remove_all(dir_); }
    void require(const std::string& modules, const char* tool = nullptr) {
        const bool ok =
            have_python_modules(modules) &&
            (!tool || run_shell(std::string("command -v ") + tool + " >/dev/null").code == 0);
        if (ok) return;
        if (std::getenv("CI"))
            FAIL() << "CI lacks python modules " << modules << " or " << (tool ? tool : "");
        GTEST_SKIP() << "needs /usr/bin/python3 with " << modules
                     << (tool ? std::string(" and ") + tool : "");
    }
    std::string train_args(const std::string& out) const {
        return "train " + (dir_ / "job.toml").string() + " --out " + (dir_ / out).string();
    }

    fs::path dir_;
};

// The exposition parses with prometheus_client, and Debian's prometheus server, started on
// 127.0.0.1, scrapes the run: its query API returns ete_tokens_per_second and ete_steps_total.
TEST_F(Monitor, PrometheusScrapesARun) {
    require("prometheus_client", "prometheus");
    if (HasFatalFailure() || IsSkipped()) return;
    const std::string cmd = "ETE_FAULT=slow@ms=150 OMP_NUM_THREADS=1 /usr/bin/python3 " +
                            std::string(ETE_SOURCE_DIR) + "/tests/ops/prometheus_scrape.py " +
                            dir_.string() + " -- " + ete_cmd(train_args("prom")) +
                            " --set train.steps=400 2>&1";
    const ShellResult r = run_shell(cmd);
    ASSERT_EQ(r.code, 0) << r.out << read_file((dir_ / "train.log").string());
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
    EXPECT_GE(j["steps_total"].get<double>(), 1);
}

// The event files decode with an independent reader (CRCs checked) and carry every step's loss,
// equal to metrics.jsonl's as a float.
TEST_F(Monitor, TensorBoardEventsCarryEveryStepsLoss) {
    require("google.protobuf, crcmod", "protoc");
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_EQ(run_shell(ete_cmd(train_args("tb") + " --set monitor.tensorboard=true 2>&1")).code,
              0);
    const ShellResult r = run_shell("/usr/bin/python3 " + std::string(ETE_SOURCE_DIR) +
                                    "/tests/ops/read_tfevents.py " + (dir_ / "tb").string());
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json tb = nlohmann::json::parse(r.out);
    EXPECT_EQ(tb["file_version"], "brain.Event:2");
    std::ifstream in(dir_ / "tb" / "metrics.jsonl");
    int steps = 0;
    for (std::string line; std::getline(in, line); ++steps) {
        const nlohmann::json m = nlohmann::json::parse(line);
        const std::string step = std::to_string(m["step"].get<int>());
        ASSERT_TRUE(tb["steps"].contains(step)) << step;
        EXPECT_EQ(tb["steps"][step]["loss"].get<double>(), double(float(m["loss"].get<double>())));
        if (m.contains("val_loss")) {
            EXPECT_EQ(tb["steps"][step]["val_loss"].get<double>(),
                      double(float(m["val_loss"].get<double>())));
        }
    }
    EXPECT_EQ(steps, 12);
    EXPECT_EQ(tb["steps"].size(), 12u);
}

// A rank slowed by 200 ms a step shows in the straggler score every rank's gather computes.
TEST_F(Monitor, ADelayedRankShowsInItsStragglerScore) {
    if (run_shell("command -v mpirun >/dev/null 2>&1").code != 0) GTEST_SKIP() << "no mpirun";
    const ShellResult r =
        run_shell("ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 ETE_FAULT=slow@rank=1,ms=200 " +
                  ete_cmd("launch -n 2 -- " + train_args("slow") +
                          " --set train.steps=4 --set monitor.straggler_every=2") +
                  " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream in(dir_ / "slow" / "metrics.jsonl");
    int gathered = 0;
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json m = nlohmann::json::parse(line);
        if (m["step"].get<int>() % 2 != 0) {
            EXPECT_FALSE(m.contains("straggler_score")) << line;
            continue;
        }
        ++gathered;
        EXPECT_EQ(m["straggler_rank"], 1) << line;
        EXPECT_GT(m["straggler_score"].get<double>(), 2.0) << line;
    }
    EXPECT_EQ(gathered, 2);
}

}  // namespace
}  // namespace ete
