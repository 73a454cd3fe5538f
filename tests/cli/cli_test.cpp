// tests/cli/cli_test.cpp — the `ete` binary: bad config key, bad value, missing file give one
// clear error line and a non-zero exit.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "shell.h"
#include "test_build.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace ete {
namespace {

// Runs build/ete with arguments; captures stderr (the error line) and the exit code.
ShellResult run_ete(const std::string& args) {
    return run_shell(ete_cmd(args) + " 2>&1 >/dev/null");
}

std::string write_tmp(const std::string& name, const std::string& text) {
    auto path = std::filesystem::temp_directory_path() / name;
    std::ofstream(path) << text;
    return path.string();
}

TEST(Cli, UnknownConfigKey) {
    auto r = run_ete("train " + write_tmp("ete_bad_key.toml", "[train]\nstepz = 3\n"));
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(r.out.find("ete: error: "), 0u) << r.out;
    EXPECT_NE(r.out.find("unknown config key 'train.stepz'"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(Cli, BadValue) {
    auto r = run_ete("train --set train.lr=abc --dump-config");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("train.lr=abc: expected a number"), std::string::npos) << r.out;
    auto r2 = run_ete("train " + write_tmp("ete_bad_val.toml", "[train]\nrecompute = \"some\"\n"));
    EXPECT_EQ(r2.code, 1);
    EXPECT_NE(r2.out.find("train.recompute = 'some': expected none, full or layer indices"),
              std::string::npos)
        << r2.out;
}

TEST(Cli, MissingFiles) {
    auto r = run_ete("train /nonexistent/cfg.toml");
    EXPECT_EQ(r.code, 2);  // usage error reported by the parser
    EXPECT_NE(r.out.find("/nonexistent/cfg.toml"), std::string::npos) << r.out;
    auto r2 = run_ete(
        "train --set data.train=/nonexistent/x.bin --set data.tokenizer=\"\" "
        "--set model.vocab_size=64 --out " +
        (std::filesystem::temp_directory_path() / "ete_cli_missing").string());
    EXPECT_EQ(r2.code, 1);
    EXPECT_NE(r2.out.find("data.train '/nonexistent/x.bin': file not found"), std::string::npos)
        << r2.out;
    auto r3 = run_ete("eval --model /nonexistent/model --tokens /nonexistent/t.bin --seq 4");
    EXPECT_NE(r3.code, 0);
    EXPECT_NE(r3.out.find("/nonexistent/"), std::string::npos) << r3.out;
}

// NaN or out-of-range sampling settings printed garbage before; now one error line each, before
// any model is loaded — and a range error is one short line (CLI11's printed two, with the
// largest double in full).
TEST(Cli, GenerateRefusesNanSamplingSettings) {
    for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
             {"--temperature nan", "--temperature: nan: expected a number >= 0"},
             {"--temperature -1", "--temperature: -1: expected a number >= 0"},
             {"--top-p nan", "--top-p: nan: expected a number in [0, 1]"},
             {"--top-p 0", "--top-p 0: expected in (0, 1]"},
             {"--top-k -3", "--top-k: -3: expected a number >= 0"}}) {
        auto r = run_ete("generate --model /nonexistent --prompt hi " + flag);
        EXPECT_NE(r.code, 0) << flag << ": " << r.out;
        EXPECT_EQ(r.out.find("ete: error: " + want), 0u) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
        EXPECT_LT(r.out.size(), 200u) << r.out;
    }
}

TEST(Cli, DumpConfigPrintsEveryKey) {
    auto path = std::filesystem::temp_directory_path() / "ete_dump.toml";
    std::string cmd = ::ete::testing::binary_dir() +
                      "/ete train --set train.steps=5 --dump-config > " + path.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find("steps = 5"), std::string::npos) << text;
    EXPECT_NE(text.find("[model]"), std::string::npos);
    EXPECT_NE(text.find("init_from"), std::string::npos);
}

std::string run_stdout(const std::string& cmd) {
    return run_shell(cmd).out;
}

TEST(Cli, UserOpenBlasCoreTypeWins) {
    std::string ete = ::ete::testing::binary_dir() + "/ete --version";
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    // The user's value wins; on an AVX-512 CPU --version says that it is the narrower kernel.
    EXPECT_NE(
        run_stdout("env -u ETE_OPENBLAS_FIXED OPENBLAS_CORETYPE=Haswell " + ete)
            .find(avx512 ? "OpenBLAS core Haswell (OPENBLAS_CORETYPE=Haswell set by the user, "
                           "narrower than this CPU)"
                         : "OpenBLAS core Haswell (OPENBLAS_CORETYPE=Haswell set by the user"),
        std::string::npos);
    // Left alone, the core is the widest the CPU runs, and --version says why.
    std::string v = run_stdout("env -u OPENBLAS_CORETYPE -u ETE_OPENBLAS_FIXED " + ete);
    if (avx512) {
        EXPECT_TRUE(v.find("core SkylakeX") != std::string::npos ||
                    v.find("core Cooperlake") != std::string::npos ||
                    v.find("core Sapphirerapids") != std::string::npos)
            << v;
    } else if (__builtin_cpu_supports("avx2")) {
        EXPECT_EQ(v.find("core Prescott"), std::string::npos) << v;
    }
    EXPECT_TRUE(v.find("(set by ete: OpenBLAS picked ") != std::string::npos ||
                v.find("(OpenBLAS's own choice") != std::string::npos)
        << v;
}

// `ete topo --json` over a saved nvidia-smi matrix: the host from hwloc, the GPUs from the file;
// a damaged file is one error line naming it.
TEST(Cli, TopoReportsTheHostAndASavedGpuMatrix) {
    const std::string fixture = std::string(ETE_SOURCE_DIR) + "/tests/parallel/topo/nvswitch8.txt";
    const ShellResult r = run_shell(ete_cmd("topo --json --nvidia-smi-topo " + fixture));
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_GE(j["host"]["cores"].get<int>(), 1);
    ASSERT_EQ(j["gpu"]["gpus"].size(), 8u);
    EXPECT_EQ(j["gpu"]["gpus"][3]["links"][4], "NV18");
    EXPECT_EQ(j["gpu"]["gpus"][3]["nic_links"], nlohmann::json({"NODE", "PIX", "SYS", "SYS"}));
    EXPECT_EQ(j["gpu"]["gpus"][6]["numa_affinity"], 1);
    EXPECT_EQ(j["gpu"]["nics"][2], "mlx5_2");
    const std::string bad = write_tmp("ete_bad_topo.txt", "\tGPU0\tGPU1\nGPU0\t X \tNVL\n");
    const ShellResult e = run_ete("topo --nvidia-smi-topo " + bad);
    EXPECT_EQ(e.code, 1);
    EXPECT_EQ(e.out, "ete: error: " + bad +
                         ":2: the link of GPU0 to GPU1 is 'NVL' (expected X, NV#, PIX, PXB, PHB, "
                         "NODE or SYS)\n");
}

}  // namespace
}  // namespace ete
