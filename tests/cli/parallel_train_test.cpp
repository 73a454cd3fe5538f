// tests/cli/parallel_train_test.cpp — layout parity: the same job on one process and on a
// dp x tp x pp mesh of real MPI processes (`ete launch -n N -- train ...`) gives the same
// per-step losses and the same final weights, within fp32 summation-order noise.
//
// The model is a tiny Llama with GQA and an untied head whose vocabulary (61) and MLP width (45)
// do not divide by 2, so tensor parallelism must pad; 4 layers, so pipeline stages get 2 each.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "ete/io/safetensors.h"
#include "ete/train/trainer.h"
#include "parallel_fixture.h"
#include "shell.h"
#include "test_util.h"

namespace ete {
namespace {

using namespace parallel_test;

TEST_F(ParallelTrain, DataParallelMatchesOneProcess) {
    RunResult one = train(1, "");
    ASSERT_EQ(one.losses.size(), 5u);
    EXPECT_LT(one.losses.back(), one.losses.front());  // it trains
    expect_same(one, train(2, "--set parallel.dp=2"), "dp=2");
    // Many small buckets (~1 KiB of ~50 KiB of gradients) give the same result.
    expect_same(one, train(2, "--set parallel.dp=2 --set parallel.bucket_mb=0.001"), "buckets");
    // Uneven: 4 rows over 3 replicas pads the third replica's missing row with ignored targets.
    RunResult three = train(3, "--set parallel.dp=3");
    expect_same(one, three, "dp=3 (padded)");
    EXPECT_NE(three.log.find("uneven: pad"), std::string::npos) << three.log;
    // Gradients sent as bf16 lose precision but must still train close to the fp32 run.
    RunResult bf16 = train(2, "--set parallel.dp=2 --set parallel.grad_bf16=true");
    ASSERT_EQ(bf16.losses.size(), 5u);
    EXPECT_NEAR(bf16.losses.back(), one.losses.back(), 2e-2 * one.losses.back());
    // ZeRO-1 shards the AdamW moments; the update is the same.
    expect_same(one, train(2, "--set parallel.dp=2 --set parallel.zero1=true"), "dp=2 zero1");
}

// `ete launch --placement auto`: the layout placed on this host's cores by the search, written
// as an Open MPI rankfile that mpirun accepts, trains the same numbers as launch order (the
// placement moves ranks between cores, never the mesh's arithmetic).
TEST_F(ParallelTrain, AutoPlacementTrainsTheSameNumbers) {
    RunResult one = train(1, "");
    RunResult placed = train(4, "--set parallel.dp=2 --set parallel.tp=2", "--placement auto");
    expect_same(one, placed, "dp=2 x tp=2, --placement auto");
    EXPECT_NE(placed.log.find("placement auto: dp 2 x tp 2 x pp 1 on 4 core blocks of 1 node: "),
              std::string::npos)
        << placed.log;
    EXPECT_NE(placed.log.find("--rankfile "), std::string::npos) << placed.log;
    // A command other than train has no layout to place.
    ShellResult r = run_shell(ete_cmd("launch -n 2 --placement auto -- inspect x 2>&1"));
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("launch --placement auto: expected `-- train [CONFIG] [--set ...]`"),
              std::string::npos)
        << r.out;
}

// parallel.auto: the job plans its own layout on the ranks it was given and trains with the one
// it prints (the same numbers as one process, as on every layout), then logs the measured step
// time beside the prediction.
TEST_F(ParallelTrain, AutoLayoutTrainsWithThePrintedLayout) {
    RunResult one = train(1, "");
    // The config's own mesh (tp 3 on 2 ranks) is what parallel.auto replaces, not an error.
    RunResult a = train(2, "--set parallel.auto=true --set parallel.tp=3");
    expect_same(one, a, "parallel.auto on 2 ranks");
    const size_t chose = a.log.find("parallel.auto: chose dp ");
    ASSERT_NE(chose, std::string::npos) << a.log;
    int dp = 0, tp = 0, pp = 0;
    ASSERT_EQ(std::sscanf(a.log.c_str() + chose, "parallel.auto: chose dp %d x tp %d x pp %d", &dp,
                          &tp, &pp),
              3);
    EXPECT_EQ(dp * tp * pp, 2);
    EXPECT_NE(a.log.find(fmt::format("parallel: 2 ranks = dp {} x tp {} x pp {}", dp, tp, pp)),
              std::string::npos)
        << a.log;
    EXPECT_NE(a.log.find("parallel.auto: this job (2 ranks on 1 host: GEMMs "), std::string::npos)
        << a.log;
    EXPECT_NE(a.log.find("parallel.auto: measured "), std::string::npos) << a.log;
    EXPECT_NE(a.log.find(" s a step (median of 4 steps) against the predicted "), std::string::npos)
        << a.log;
    // With --placement auto, whose layout comes before the ranks start, it is refused.
    ShellResult r =
        run_shell(ete_cmd("launch -n 2 --placement auto -- train " + (dir_ / "job.toml").string() +
                          " --set parallel.auto=true 2>&1"));
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("the train config sets parallel.auto = true"), std::string::npos) << r.out;
}

// ZeRO-2 reduces each gradient piece to the replica whose shard holds it (parallel/zero.h), which
// alone keeps and updates it; the gather of the masters then gives every replica the whole step.
// Each group of layers writes its gradient into a window reduced into the shards after its
// backward, every micro-batch (as at stage 3), so a replica holds only its shard of the
// gradients. Same update as one process, within the same summation-order noise: dp = 2 and 4
// (the last shard holds the tail), under tp = 2 and pp = 2, LoRA, and a tied GPT-2 over dp = 2
// x pp = 2 whose embedding gradient the stages sum whole: there the whole buffer is kept and
// reduced to the owners bucket by bucket (tiny buckets that straddle the shards). (Stage 1 runs
// in DataParallelMatchesOneProcess; stage 2 on the guarded backend and across a resume below.)
TEST_F(ParallelTrain, ZeroStagesMatchOneProcess) {
    RunResult one = train(1, "");
    const std::string z2 = " --set parallel.zero_stage=2";
    expect_same(one, train(2, mesh(2, 1, 1) + z2), "dp=2 stage 2");
    // parallel.grad_bf16: a window's pieces are sent as bf16 (rounded, summed in f32 and rounded
    // by the transport) as stage 1's buckets are; with one micro-batch a step (stage 1 rounds
    // the micro-batches' sum, the windows each one) and 2 replicas (one addition either way)
    // the same numbers bit for bit, and not the fp32 run's.
    const std::string bf16 = " --set parallel.grad_bf16=true --set train.grad_accum=1";
    RunResult s1 = train(2, mesh(2, 1, 1) + bf16 + " --set parallel.zero_stage=1");
    RunResult f32 =
        train(2, mesh(2, 1, 1) + " --set train.grad_accum=1 --set parallel.zero_stage=1");
    EXPECT_NE(s1.losses.back(), f32.losses.back());
    expect_same(s1, train(2, mesh(2, 1, 1) + bf16 + z2), "bf16 dp=2 stage 2", 0.0f, 0.0, 0.0f);
    if (!testing::under_sanitizers())  // (stage 3's reduce is the same code as stage 2's)
        expect_same(s1, train(2, mesh(2, 1, 1) + bf16 + " --set parallel.zero_stage=3"),
                    "bf16 dp=2 stage 3", 0.0f, 0.0, 0.0f);
    if (!testing::under_sanitizers()) {  // (the windows' code as at dp = 2; CI time)
        RunResult dp4 = train(4, mesh(4, 1, 1) + z2);
        expect_same(one, dp4, "dp=4 stage 2");
        // The fixture's Llama has 33,760 trainable elements: 8,440 on each replica (rank 0 logs).
        EXPECT_NE(
            dp4.log.find("ZeRO stage 2: gradients and optimizer state of 8440 of 33760 elements"),
            std::string::npos)
            << dp4.log;
    }
    const std::string gpt2 =
        " --set model.arch=gpt2 --set model.num_kv_heads=4 --set train.adam_eps=1e-4";
    // Within the dp group under tp = 2 and pp = 2 (an untied Llama: windows on both stages).
    if (!testing::under_sanitizers())
        expect_same(one, train(4, mesh(2, 2, 1) + z2), "(2,2,1) stage 2");
    expect_same(one, train(4, mesh(2, 1, 2) + z2), "(2,1,2) stage 2");
    // LoRA over an f32 base: the adapters' gradients in the windows, the base frozen and whole.
    const std::string lora =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4 "
        "--set train.adam_eps=1e-4 --set lora.base_format=f32";
    expect_same(train(1, lora), train(2, mesh(2, 1, 1) + lora + z2), "lora f32 dp=2 stage 2");
    RunResult tied = train(4, mesh(2, 1, 2) + gpt2 + z2 + " --set parallel.bucket_mb=0.001");
    expect_same(train(1, gpt2), tied, "tied gpt2 (2,1,2) stage 2, 1 KiB buckets");
    EXPECT_NE(tied.log.find("ZeRO stage 2: optimizer state (gradients reduced to their owners in a "
                            "whole buffer"),
              std::string::npos)
        << tied.log;
}

// ZeRO-3 shards the parameters too: each replica keeps its shard of the masters, gradients and
// moments, and the model gathers every group (embeddings, each layer, head) into a window just
// before it runs, forward and again for backward, and reduces the group's gradient into the
// owners' shards right after its backward, every micro-batch (model/transformer_zero3.cpp). The
// same update as one process within the summation-order noise of the other layouts (micro-batch
// gradients are now summed over replicas before being summed over micro-batches): dp = 2 and 4
// (groups straddling 2 shards, the last with the tail), with recompute (a recomputed layer runs
// from the backward's gather), without resharding (one gather a forward, kept for backward),
// under tp = 2 and pp = 2 (bf16: Bf16LayoutsAgreeWithinTheirRounding); and a tied GPT-2, whose
// embedding window keeps the head's gradient from the forward to the end of backward.
TEST_F(ParallelTrain, ZeroStage3MatchesOneProcess) {
    RunResult one = train(1, "");
    const std::string z3 = " --set parallel.zero_stage=3";
    // Under the sanitizers (sweep() says why) dp = 4 stands for dp = 2, (2,1,2) for (2,2,1).
    if (!testing::under_sanitizers())
        expect_same(one, train(2, mesh(2, 1, 1) + z3), "dp=2 stage 3");
    RunResult dp4 = train(4, mesh(4, 1, 1) + z3);
    expect_same(one, dp4, "dp=4 stage 3");
    EXPECT_NE(dp4.log.find("ZeRO stage 3: parameters, gradients and optimizer state of 8440 of "
                           "33760 elements"),
              std::string::npos)
        << dp4.log;
    expect_same(one,
                train(2, mesh(2, 1, 1) + z3 + " --set parallel.zero_reshard_after_forward=false"),
                "dp=2 stage 3 without resharding");
    if (!testing::under_sanitizers())
        expect_same(one, train(4, mesh(2, 2, 1) + z3), "(2,2,1) stage 3");
    expect_same(one, train(4, mesh(2, 1, 2) + z3), "(2,1,2) stage 3");
    const std::string rc = " --set train.recompute=full";
    expect_same(train(1, rc), train(2, mesh(2, 1, 1) + z3 + rc), "dp=2 stage 3 recompute");
    const std::string gpt2 =
        " --set model.arch=gpt2 --set model.num_kv_heads=4 --set train.adam_eps=1e-4";
    expect_same(train(1, gpt2), train(2, mesh(2, 1, 1) + gpt2 + z3), "tied gpt2 dp=2 stage 3");
}

// Overlap is real: the first gradient buckets (the head, the last layers) are all-reduced while
// backward still runs through the earlier layers. metrics.jsonl records, per step, how many
// buckets started before the step's last bucket became ready. A wider model (~38 MB of
// gradients in 256 KiB buckets) makes backward long enough to see it; on this 2-core machine
// the comm threads share the cores with compute, so only the first buckets get ahead. (At a
// quarter of this compute, ~10 MB, a run beside the heaviest other tests once saw none start
// early in all 5 steps: a woken comm thread can wait a scheduling period of the loaded cores.)
TEST_F(ParallelTrain, GradientAllReduceOverlapsBackward) {
    train(2,
          "--set parallel.dp=2 --set parallel.bucket_mb=0.25 --set model.hidden_size=512 "
          "--set model.intermediate_size=1024 --set model.num_heads=8 --set model.num_kv_heads=4");
    std::ifstream metrics(last_out_ + "/metrics.jsonl");
    int64_t early = 0, steps = 0;
    for (std::string line; std::getline(metrics, line); ++steps) {
        nlohmann::json j = nlohmann::json::parse(line);
        EXPECT_GT(j["buckets"].get<int>(), 20) << line;
        early += j["buckets_early"].get<int64_t>();
    }
    EXPECT_EQ(steps, 5);
    EXPECT_GT(early, 0);
}

// Every (dp, tp, pp) in {1,2}^3 against one process, with recompute off and on. tp = 2 pads the
// vocabulary (61) and the MLP width (45); pp = 2 puts 2 layers on each stage and runs 1F1B over
// the 2 micro-batches of a step.
TEST_F(ParallelTrain, EveryLayoutMatchesOneProcessLlama) {
    for (const char* rc : {"none", "full"}) {
        const std::string recompute = std::string(" --set train.recompute=") + rc;
        RunResult one = train(1, recompute);
        for (const auto& l : sweep(kLayouts))
            expect_same(one, train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + recompute),
                        fmt::format("llama ({},{},{}) recompute {}", l[0], l[1], l[2], rc));
    }
}

// A pipeline as deep as the model (pp = 4, one layer a stage) over 8 micro-batches: 1F1B keeps
// 5, 4 and 3 slots on stages 0-2 (micro-batch m in slot m mod slots, so the slots wrap), which
// share their boundary gradients — one d_in for every slot, and d_out from a ring of 2 (an even
// slot count) or 3 (odd), never the same for consecutive micro-batches, wrap included
// (Transformer::allocate_slots; one d_out, or two for 5 slots, and the executor refuses the
// receive). pp alone sums every gradient in one process's order: the same bits.
TEST_F(ParallelTrain, ADeepPipelineSharesItsBoundaryGradients) {
    const std::string ga8 = " --set train.grad_accum=8";
    expect_same(train(1, ga8), train(4, mesh(1, 1, 4) + ga8), "llama (1,1,4), 8 micro-batches",
                0.0f, 0.0, 0.0f);
}

// GPT-2: LayerNorm with biases, learned positions, fused q|k|v split per tp rank, and an
// embedding tied to the head, which pp = 2 keeps on both the first and the last stage.
// adam_eps = 1e-4: the key bias gets a mathematically zero gradient (softmax ignores a shift of
// all scores), so AdamW moves it by its rounding noise δg / ε a step (parity_tolerance's |g| ≪ ε
// case); at eps = 1e-8 two equally exact summation orders (one GEMM over 4 rows vs two replicas
// of 2) end ~1.2e-5 apart there, even for dp = 2 alone, at 1e-6 within 5e-6.
TEST_F(ParallelTrain, EveryLayoutMatchesOneProcessGpt2) {
    const std::string gpt2 =
        " --set model.arch=gpt2 --set model.num_kv_heads=4 --set train.adam_eps=1e-4";
    RunResult one = train(1, gpt2);
    for (const auto& l : sweep(kLayouts))
        expect_same(one, train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + gpt2),
                    fmt::format("gpt2 ({},{},{})", l[0], l[1], l[2]));
}

// Gemma 2 (soft-caps 50 and 30, local and global layers) and Gemma 3 (q/k norms, five local
// layers per global: all four local here, at their own RoPE base) from [model], with a window of
// 5 (sequences of 16) and the tied head: tp, pp and the whole mesh against one process.
// adam_eps = 1e-4 as for GPT-2 above: measured at 1e-8, one element of layer 2's gate_proj ends
// 3.3e-5 apart at tp = 2 (bound 2e-5) — a gradient small next to its summation noise, which AdamW
// scales up to a step of lr; the post-feed-forward norm's backward (it removes the component
// along its input) makes such near-cancelling gradients common. The model-level parity tests
// (tests/model/tp_test.cpp, stage_test.cpp) hold Gemma's gradients themselves to the fp32 bounds.
// Phi-3 likewise, with its fused qkv_proj and gate_up_proj cut per group and RoPE on half of
// each head.
TEST_F(ParallelTrain, GemmaAndPhi3LayoutsMatchOneProcess) {
    for (const char* arch : {"gemma2", "gemma3", "phi3"}) {
        const std::string sets = fmt::format(
            " --set model.arch={} --set model.sliding_window=5 --set "
            "model.tie_word_embeddings=true --set train.adam_eps=1e-4{}",
            arch, std::string(arch) == "phi3" ? " --set model.partial_rotary_factor=0.5" : "");
        RunResult one = train(1, sets);
        for (const auto& l : sweep({{1, 2, 1}, {1, 1, 2}, {2, 2, 2}}))
            expect_same(one, train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + sets),
                        fmt::format("{} ({},{},{})", arch, l[0], l[1], l[2]));
    }
}

// LoRA: adapters shard with their base (column-parallel base: A replicated, B split by rows;
// row-parallel: A split by columns, B replicated), so every layout trains the same adapters,
// over an f32 base and over NF4 (QLoRA), whose shards are cut from the whole quantized tensor
// (the NF4 run widens the model so every shard is whole blocks of 32). adam_eps = 1e-4 as for
// GPT-2 above: k_proj's adapter gets a mathematically ~zero gradient along directions that shift
// every key of a query alike (softmax ignores them), so at eps = 1e-8 AdamW turns two equally
// exact summation orders into visibly different steps there (measured 2.7e-5 on one element).
TEST_F(ParallelTrain, LoraEveryLayoutMatchesOneProcess) {
    const std::string lora =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4 "
        "--set train.adam_eps=1e-4";
    const std::string nf4 =
        " --set lora.base_format=nf4 --set lora.nf4_blocksize=32 --set model.hidden_size=64 "
        "--set model.intermediate_size=64";
    // Dynamic rank on (patience 2, a shrink forced at the end of the second window, step 4):
    // every layout takes the same decision and the same truncated SVD.
    const std::string dynamic =
        " --set lora.dynamic_rank=true --set lora.r_max=8 --set lora.rank_patience=2 "
        "--set lora.rank_shrink_threshold=1";
    // Dropout on the adapter inputs: every layout draws each token's masks from its place in
    // the global batch (tp = 2 splits o_proj's and the padded down_proj's inputs); the f32
    // variant's layouts also recompute every layer, against one process that does not. With
    // dropout some adapter elements get gradients near 1e-6, where at adam_eps = 1e-6 AdamW
    // turned the dp sum's other order into steps of visibly different size (measured 6.8e-5 on
    // one element of 4.7e-3 after 5 steps, while the losses agree to 5e-9 and recompute is bit
    // exact); at eps = 1e-4 every element stays within 3e-7, as without dropout.
    const std::string f32 = " --set lora.base_format=f32";
    const std::string drop = " --set lora.dropout=0.2";
    RunResult no_drop = train(1, lora + f32);
    for (const std::string& base : {f32 + drop, nf4, nf4 + dynamic + drop}) {
        const std::string sets = lora + base;
        RunResult one = train(1, sets);
        if (base == f32 + drop) {  // the masks change the run
            ASSERT_EQ(no_drop.losses.size(), 5u);
            EXPECT_GT(std::fabs(one.losses.back() - no_drop.losses.back()),
                      1e-4 * no_drop.losses.back());
        }
        const std::string layout_extra =
            base == f32 + drop ? std::string(" --set train.recompute=full") : std::string();
        if (base.find("dynamic") != std::string::npos) {
            EXPECT_NE(
                read_file(last_out_ + "/metrics.jsonl").find("\"rank_change\":\"shrink 4 -> 2\""),
                std::string::npos);
        }
        ASSERT_EQ(one.losses.size(), 5u);
        EXPECT_LT(one.losses.back(), one.losses.front());
        EXPECT_EQ(one.weights.size(), 4u * 7 * 2);  // layers x modules x (A, B): adapters only
        const Parity tol =
            base.find("nf4") != std::string::npos ? parity_tolerance(64, 64) : parity_tolerance();
        for (const auto& l : sweep(kLayouts))
            expect_same(one,
                        train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + sets + layout_extra),
                        fmt::format("lora{} ({},{},{})", base + layout_extra, l[0], l[1], l[2]),
                        tol.wtol, tol.ltol, tol.watol);
    }
}

// GPT-2 QLoRA: c_attn's adapter B is split like its q | k | v groups, c_proj's A by columns.
// adam_eps = 1e-4: at 1e-6 some adapter elements (of c_proj and c_fc) have gradients near ε, where
// AdamW turns the tp sums' other order into visibly different steps (measured 1.2e-5 to 3e-5 on
// one element after 5 steps), outside parity_tolerance's |g| ≫ ε; at 1e-4 every element stays
// within 7e-7 with OpenBLAS's AVX-512 and Haswell kernels alike, against the bound's 2.7e-5.
TEST_F(ParallelTrain, QloraGpt2TensorParallelMatchesOneProcess) {
    const std::string q =
        " --set model.arch=gpt2 --set model.num_kv_heads=4 --set model.hidden_size=64 "
        "--set model.intermediate_size=128 --set lora.enabled=true --set lora.targets=all-linear "
        "--set lora.r=4 --set lora.nf4_blocksize=32 --set train.adam_eps=1e-4";
    RunResult one = train(1, q);
    const Parity tol = parity_tolerance(64, 128);
    expect_same(one, train(2, mesh(1, 2, 1) + q), "gpt2 qlora (1,2,1)", tol.wtol, tol.ltol,
                tol.watol);
    expect_same(one, train(8, mesh(2, 2, 2) + q), "gpt2 qlora (2,2,2)", tol.wtol, tol.ltol,
                tol.watol);
}

// The whole mesh on the guarded backend, whose memory the host cannot touch: tensor-parallel
// all-reduces, pipeline send/recv, the tied-embedding sum, ZeRO-2 reduces and gathers,
// data-parallel buckets (f32 and bf16) all stage through host memory, and give the CPU backend's
// run.
TEST_F(ParallelTrain, EveryTransportCarriesBackendMemory) {
    const std::string guarded = " --set train.backend=guarded";
    RunResult one = train(1, "");
    expect_same(one, train(1, guarded), "guarded, one process");
    expect_same(one, train(8, mesh(2, 2, 2) + guarded), "guarded (2,2,2)");
    expect_same(one, train(2, "--set parallel.dp=2 --set parallel.zero_stage=2" + guarded),
                "guarded dp=2 zero stage 2");
    RunResult bf16 = train(2, "--set parallel.dp=2 --set parallel.grad_bf16=true");
    RunResult bf16_guarded =
        train(2, "--set parallel.dp=2 --set parallel.grad_bf16=true" + guarded);
    EXPECT_EQ(bf16_guarded.losses, bf16.losses);
    EXPECT_EQ(bf16_guarded.weights, bf16.weights);
    const std::string gpt2 =
        " --set model.arch=gpt2 --set model.num_kv_heads=4 --set train.adam_eps=1e-4";
    expect_same(train(1, gpt2), train(8, mesh(2, 2, 2) + gpt2 + guarded), "guarded gpt2 (2,2,2)");
}

// bf16: every layout against one process, within tolerances derived from bf16 itself (not bit
// for bit: the layouts sum the same fp32 products in other orders, and a result near the midpoint
// of two bf16 values can then round the other way).
// - Losses: within the distance between the bf16 and the fp32 run, or bf16's half unit u/2 =
//   2^-9 where that distance happens to be smaller (precision_test.cpp's loss bound: the mean over
//   the tokens averages the independent errors of their roundings, and rounding the same operands
//   differently is no larger an error than rounding them at all). A layout only reorders sums; a
//   layout bug (a missing or doubled reduction) moves the loss by far more. (Measured, largest
//   layout over the gap: 0.15 with oneDNN's bf16 GEMMs, 0.45 with the sgemm engine, Emerald
//   Rapids; 1.33 (1.5e-4, a gap of 1.1e-4) in the -O1 sanitizer build under the AVX2 kernels.)
// - Final weights (saved as bf16): at least 99% within max(2 bf16 units of the value, lr / 100) —
//   the fp32 masters mostly differ by far less than one unit, so their roundings differ by at most
//   one step — and every one within max(lr / 2, 1 unit): AdamW moves an element by about lr per
//   step whatever the size of its gradient, so where a gradient is tiny, rounding noise in it can
//   redirect part of a step (how often depends on the summation orders), and masters apart by any
//   amount across a bf16 midpoint save one unit apart (a norm weight near 1: 2^-7). (Measured:
//   beyond 2 units and the floor 0.02% with oneDNN's GEMMs (Zen 4, Emerald Rapids) and 0.26% with
//   the sgemm engine; worst 4.9e-4 with oneDNN and 1.5e-3 with the sgemm engine in the -O1
//   sanitizer build, or one unit. pp alone is exact.)
// AdamW's epsilon is 1e-4 here (both runs): at the default 1e-8 an element whose first gradient is
// within rounding noise of zero moves by ±lr whichever its sign, so a layout (or the -O1 sanitizer
// build) that rounds it to the other sign moves it 2·lr away (measured on an AMX Xeon: one of
// 33760 weights after step 1, then the loss and 8% of the weights by step 5). With epsilon above
// that noise such an element barely moves, and the layouts are compared on their rounding alone.
// On a GPU (tools/gpu_check.sh; skipped where there is none): two ranks sharing one GPU through
// the staged MPI communicator (NCCL refuses two ranks on one device) give one rank's run, for
// dp = 2, tp = 2 and pp = 2 (the tolerances of the CPU layouts: other summation orders).
TEST_F(ParallelTrain, TwoRanksOnOneGpuMatchOneRank) {
    if (!cuda_unavailable_reason().empty()) GTEST_SKIP() << cuda_unavailable_reason();
    const std::string cuda = " --set train.backend=cuda";
    RunResult one = train(1, cuda);
    expect_same(one, train(2, mesh(2, 1, 1) + cuda), "cuda dp=2");
    expect_same(one, train(2, mesh(1, 2, 1) + cuda), "cuda tp=2");
    expect_same(one, train(2, mesh(1, 1, 2) + cuda), "cuda pp=2");
}

TEST_F(ParallelTrain, Bf16LayoutsAgreeWithinTheirRounding) {
    const std::string eps = " --set train.adam_eps=1e-4";
    const std::string bf16 = eps + " --set train.precision=bf16";
    RunResult fp32 = train(1, eps), one = train(1, bf16);
    double gap = 0;
    for (size_t i = 0; i < one.losses.size(); ++i)
        gap = std::max(gap, std::abs(one.losses[i] - fp32.losses[i]) / fp32.losses[i]);
    ASSERT_GT(gap, 0.0) << "bf16 must differ from fp32";
    gap = std::max(gap, std::ldexp(1.0, -9));
    auto check = [&](const RunResult& got, const std::string& what) {
        ASSERT_EQ(got.losses.size(), one.losses.size()) << what;
        for (size_t i = 0; i < got.losses.size(); ++i)
            EXPECT_LE(std::abs(got.losses[i] - one.losses[i]) / one.losses[i], gap)
                << what << " step " << i + 1;
        size_t far = 0, total = 0;
        double worst = 0;
        for (const auto& [name, w] : one.weights) {
            const auto& g = got.weights.at(name);
            for (size_t i = 0; i < w.size(); ++i) {
                const float big = std::max({std::fabs(w[i]), std::fabs(g[i]), 1e-30f});
                const float unit = std::ldexp(1.0f, std::ilogb(big) - 7);
                ++total;
                if (std::fabs(g[i] - w[i]) > std::max(2 * unit, 1e-4f)) ++far;
                worst = std::max(worst, double(std::fabs(g[i] - w[i]) / std::max(unit, 5e-3f)));
            }
        }
        EXPECT_LE(worst, 1.0) << what << ": a weight beyond max(lr / 2, one bf16 unit)";
        EXPECT_LE(double(far), 0.01 * double(total)) << what;
    };
    for (const auto& l : sweep(kLayouts))
        check(train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + bf16),
              fmt::format("bf16 ({},{},{})", l[0], l[1], l[2]));
    // ZeRO-3 gathers a matrix as the bf16 copy its holder rounds from its master (norms and
    // embeddings as F32 masters, rounded in the window), as stage 0 rounds its compute copy from
    // the masters: the same rounding of the same values.
    check(train(2, mesh(2, 1, 1) + bf16 + " --set parallel.zero_stage=3"), "bf16 dp=2 stage 3");
}

// fp16: an inf in the gradient of one rank (world rank 5 of a (2,2,2) mesh: not the rank that
// writes the metrics, and after the data-parallel sum, so no other rank sees it) makes every rank
// skip the same step and halve the same scale: the run equals the one where rank 0 saw the inf,
// bit for bit, and the replicas stay identical (checked every step).
TEST_F(ParallelTrain, Fp16SkipIsDecidedByEveryRankAlike) {
    const std::string fp16 = " --set train.precision=fp16 --set train.loss_scale_window=2" +
                             std::string(" --set parallel.replica_check_every=1 ") + mesh(2, 2, 2);
    auto metrics = [](const std::string& out) {
        std::vector<std::pair<double, bool>> m;
        std::ifstream in(out + "/metrics.jsonl");
        for (std::string line; std::getline(in, line);) {
            nlohmann::json j = nlohmann::json::parse(line);
            m.emplace_back(j["loss_scale"].get<double>(), j["skipped"].get<bool>());
        }
        return m;
    };
    setenv("ETE_FAULT", "nan_grad@step=3,rank=5", 1);
    RunResult by5 = train(8, fp16);
    const auto m5 = metrics(last_out_);
    setenv("ETE_FAULT", "nan_grad@step=3,rank=0", 1);
    RunResult by0 = train(8, fp16);
    const auto m0 = metrics(last_out_);
    unsetenv("ETE_FAULT");
    using M = std::vector<std::pair<double, bool>>;
    EXPECT_EQ(m5,
              (M{{65536, false}, {65536, false}, {131072, true}, {65536, false}, {65536, false}}));
    EXPECT_EQ(m0, m5);
    EXPECT_EQ(by5.losses, by0.losses);
    EXPECT_EQ(by5.weights, by0.weights);
    EXPECT_NE(by5.log.find("non-finite gradient, step skipped; loss scale 131072 -> 65536"),
              std::string::npos)
        << by5.log;
}

// fp32: a NaN gradient on one rank only (the last world rank, after the data-parallel sum, so no
// other rank sees it) makes every rank of every layout skip that step — before the fix each rank
// decided alone and the replicas diverged — the metrics name that rank, and the run equals the
// one-process run that skipped the same step (which differs from the run without the fault).
TEST_F(ParallelTrain, ANanOnOneRankIsSkippedByEveryLayout) {
    RunResult clean = train(1, "");
    setenv("ETE_FAULT", "nan_grad@step=3,rank=0", 1);
    RunResult one = train(1, "");
    ASSERT_NE(one.weights, clean.weights);
    for (const auto& l : sweep({{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}})) {
        const int n = l[0] * l[1] * l[2];
        const std::string what = fmt::format("({},{},{})", l[0], l[1], l[2]);
        setenv("ETE_FAULT", fmt::format("nan_grad@step=3,rank={}", n - 1).c_str(), 1);
        RunResult got = train(n, mesh(l[0], l[1], l[2]) + " --set parallel.replica_check_every=1");
        expect_same(one, got, what);
        std::ifstream in(last_out_ + "/metrics.jsonl");
        std::vector<std::string> causes;
        for (std::string line; std::getline(in, line);) {
            const nlohmann::json j = nlohmann::json::parse(line);
            causes.push_back(j.contains("skip_causes") ? j["skip_causes"].dump() : "");
        }
        EXPECT_EQ(causes, (std::vector<std::string>{
                              "", "", fmt::format(R"({{"nonfinite_grad":[{}]}})", n - 1), "", ""}))
            << what;
        EXPECT_NE(
            got.log.find(fmt::format("step 3: skipped: non-finite gradient on rank {}", n - 1)),
            std::string::npos)
            << got.log;
    }
    unsetenv("ETE_FAULT");
}

// A skipped step changes nothing: with the data in file order and a constant learning rate, a run
// whose step 3 is skipped (NaN gradient on the last rank of a (2,2,2) mesh, and on one process)
// ends with the weights of a 4-step run on the same tokens with step 3's windows cut out. Step 3
// reads samples [16, 24) = tokens [256, 384]; cutting [256, 384) keeps every other window whole
// when tokens 256 and 384 agree (window 15's last target is then unchanged).
TEST_F(ParallelTrain, ASkippedStepEqualsARunWhoseDataLeftItOut) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 6000; ++i) ids.push_back((i * 17 + (i / 3) % 5) % 61);
    ids[384] = ids[256];
    std::vector<int32_t> cut(ids.begin(), ids.begin() + 256);
    cut.insert(cut.end(), ids.begin() + 384, ids.end());
    write_token_shard((dir_ / "full.bin").string(), ids, 61);
    write_token_shard((dir_ / "cut.bin").string(), cut, 61);
    // adam_eps = 1e-4: with no warm-up AdamW takes a full lr = 1e-2 step from step 1, and at the
    // default 1e-8 a gradient within rounding noise of zero moves its weight by ±lr whichever its
    // sign; above that noise the mesh is held to parity_tolerance (fp32 summation order).
    const std::string common =
        " --set data.shuffle=false --set train.lr_schedule=constant --set train.adam_eps=1e-4 "
        "--set train.warmup_steps=0 --set data.train=";
    RunResult ref = train(1, "--set train.steps=4" + common + (dir_ / "cut.bin").string());
    setenv("ETE_FAULT", "nan_grad@step=3,rank=0", 1);
    RunResult one = train(1, common + (dir_ / "full.bin").string());
    setenv("ETE_FAULT", "nan_grad@step=3,rank=7", 1);
    RunResult mesh8 = train(8, mesh(2, 2, 2) + common + (dir_ / "full.bin").string());
    unsetenv("ETE_FAULT");
    ASSERT_EQ(one.losses.size(), 5u) << one.log;
    ASSERT_EQ(ref.losses.size(), 4u) << ref.log;
    for (const auto& [step, ref_step] : {std::pair{1, 1}, {2, 2}, {4, 3}, {5, 4}})
        EXPECT_EQ(one.losses[size_t(step - 1)], ref.losses[size_t(ref_step - 1)]) << step;
    EXPECT_EQ(one.weights, ref.weights);  // one process: the same arithmetic, bit for bit
    // The mesh within fp32 summation noise (a step taken or skipped wrongly moves the weights by
    // ~lr = 1e-2).
    expect_same(one, mesh8, "(2,2,2)");
}

// GQA with tp = 4 > num_kv_heads = 2: each kv head is replicated on 2 tp ranks, which sum its
// gradient; alone (4 ranks) and under dp = 2 (8 ranks), the same run as one process.
TEST_F(ParallelTrain, KvHeadsReplicatedWhenTpExceedsThem) {
    RunResult one = train(1, "");
    expect_same(one, train(4, "--set parallel.tp=4"), "tp=4, 2 kv heads");
    // Under the sanitizers (CI time) the 8-rank run and the plain f32 LoRA run are left to the
    // release build: tp = 4 and the dropout run reach the same code.
    if (!testing::under_sanitizers())
        expect_same(one, train(8, "--set parallel.dp=2 --set parallel.tp=4"),
                    "dp=2 tp=4, 2 kv heads");
    // LoRA on k_proj / v_proj of replicated kv heads: the holders of a head sum their partial B
    // gradients like the base's (f32 base; NF4 on a model wide enough for 32-element blocks).
    // adam_eps = 1e-4, for the reason the GPT-2 QLoRA test gives (at 1e-6 one AdamW-amplified
    // adapter element of the NF4 run ended 3.5e-5 apart); the dropout run also has every holder
    // of a kv head draw the same masks for its k_proj / v_proj adapter inputs.
    const std::string lora =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4 "
        "--set train.adam_eps=1e-4";
    for (const std::string& base :
         {std::string(" --set lora.base_format=f32"),
          std::string(" --set lora.base_format=f32 --set lora.dropout=0.2"),
          std::string(" --set lora.base_format=nf4 --set lora.nf4_blocksize=32 "
                      "--set model.hidden_size=128 --set model.intermediate_size=128")}) {
        if (testing::under_sanitizers() && base == " --set lora.base_format=f32") continue;
        RunResult l1 = train(1, lora + base);
        const Parity tol =
            base.find("nf4") != std::string::npos ? parity_tolerance(128, 128) : parity_tolerance();
        expect_same(l1, train(4, "--set parallel.tp=4" + lora + base), "lora tp=4" + base, tol.wtol,
                    tol.ltol, tol.watol);
    }
}

// Checkpoints hold the logical model: one written at (2,2,1) resumes onto (1,1,2) and onto one
// process, and one written by a ZeRO-1 dp=2 run resumes on one process and back on dp=2, each
// continuing exactly like the uninterrupted single-process run.
TEST_F(ParallelTrain, ResumeOntoAnotherLayout) {
    RunResult one = train(1, "");
    train(4, mesh(2, 2, 1) + " --set train.checkpoint_every=3");
    std::string ckpt = last_out_ + "/checkpoints/step_00000003";
    ASSERT_TRUE(fs::exists(ckpt)) << ckpt;
    RunResult pp2 = train(2, mesh(1, 1, 2) + " --resume " + ckpt);
    EXPECT_EQ(pp2.steps, (std::vector<int64_t>{4, 5})) << pp2.log;
    expect_same(one, pp2, "(2,2,1) -> (1,1,2)");
    expect_same(one, train(1, "--resume " + ckpt), "(2,2,1) -> (1,1,1)");

    train(2, mesh(2, 1, 1) + " --set parallel.zero_stage=2 --set train.checkpoint_every=3");
    ckpt = last_out_ + "/checkpoints/step_00000003";
    expect_same(one, train(1, "--resume " + ckpt), "dp=2 zero stage 2 -> 1 process");
    expect_same(one, train(2, mesh(2, 1, 1) + " --resume " + ckpt), "dp=2 zero stage 2 -> dp=2");

    // ZeRO-3's checkpoints are the same logical tensors: saved from the parameter shards at
    // dp = 4, resumed on one process and on dp = 2 at stage 3; and one saved on one process
    // resumes at stage 3.
    train(4, mesh(4, 1, 1) + " --set parallel.zero_stage=3 --set train.checkpoint_every=3");
    ckpt = last_out_ + "/checkpoints/step_00000003";
    expect_same(one, train(1, "--resume " + ckpt), "dp=4 zero stage 3 -> 1 process");
    expect_same(one, train(2, mesh(2, 1, 1) + " --set parallel.zero_stage=3 --resume " + ckpt),
                "dp=4 zero stage 3 -> dp=2 stage 3");
    train(1, "--set train.checkpoint_every=3");
    ckpt = last_out_ + "/checkpoints/step_00000003";
    expect_same(one, train(4, mesh(4, 1, 1) + " --set parallel.zero_stage=3 --resume " + ckpt),
                "1 process -> dp=4 zero stage 3");

    // Saved from the shards and read back into them tensor by tensor (train/state_stream.h) on
    // the same layout, the resumed run ends bit for bit where the uninterrupted one did: ZeRO-2
    // over dp = 2 x tp = 2 (AdamW's moments split by replica and by tp rank), and 8-bit AdamW's
    // blockwise state, uploaded shard piece by shard piece.
    for (const std::string& z :
         {mesh(2, 2, 1) + " --set parallel.zero_stage=2",
          mesh(2, 1, 1) + " --set parallel.zero_stage=3",
          mesh(2, 1, 1) + " --set parallel.zero_stage=1 --set train.optimizer=adamw8bit"}) {
        const int n = z.find("tp=2") != std::string::npos ? 4 : 2;
        RunResult whole = train(n, z + " --set train.checkpoint_every=3");
        ckpt = last_out_ + "/checkpoints/step_00000003";
        RunResult again = train(n, z + " --resume " + ckpt);
        EXPECT_EQ(again.steps, (std::vector<int64_t>{4, 5})) << again.log;
        EXPECT_EQ(again.weights, whole.weights) << z;
        EXPECT_EQ(again.losses.back(), whole.losses.back()) << z;
    }
}

// QLoRA checkpoints hold adapters only; the NF4 base is rebuilt from the seed on the new layout
// (quantized whole, then sharded), so a resume continues as if nothing had changed — dropout
// masks included (keyed by the step and the global sample, not by anything a process keeps).
// adam_eps = 1e-4: with dropout some adapter elements get gradients near 1e-6 (see
// LoraEveryLayoutMatchesOneProcess), where at eps = 1e-6 AdamW amplifies the layouts' other
// summation order past parity_tolerance's |g| ≫ ε (measured 1.5e-5 off on one element with
// OpenBLAS's Haswell kernels).
TEST_F(ParallelTrain, QloraResumeOntoAnotherLayout) {
    const std::string q =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4 "
        "--set train.adam_eps=1e-4 --set lora.nf4_blocksize=32 --set model.hidden_size=64 "
        "--set model.intermediate_size=64 --set lora.dropout=0.1";
    RunResult one = train(1, q);
    train(4, mesh(2, 2, 1) + q + " --set train.checkpoint_every=3");
    const std::string ckpt = last_out_ + "/checkpoints/step_00000003";
    ASSERT_TRUE(fs::exists(ckpt)) << ckpt;
    const Parity tol = parity_tolerance(64, 64);
    expect_same(one, train(2, mesh(1, 1, 2) + q + " --resume " + ckpt), "qlora (2,2,1) -> (1,1,2)",
                tol.wtol, tol.ltol, tol.watol);
    expect_same(one, train(1, q + " --resume " + ckpt), "qlora (2,2,1) -> (1,1,1)", tol.wtol,
                tol.ltol, tol.watol);
}

// FSDP + QLoRA: at ZeRO-3 the frozen base is sharded too, each weight whole on one replica (an
// NF4 weight with its block statistics; ParamStore::shard), broadcast into the group's window
// before use; the adapters are sharded like any trainable parameter. The same adapters as one
// process within the NF4 tolerance of the other layouts: QLoRA with dropout at dp = 2 and dp = 4
// and under tp = 2 and pp = 2, LoRA over an f32 base at dp = 2 with recompute; and a QLoRA run
// saved at stage 3 on dp = 4 resumes on one process and on dp = 2 at stage 3.
TEST_F(ParallelTrain, QloraAndLoraShardTheirBaseAtZeroStage3) {
    const std::string z3 = " --set parallel.zero_stage=3";
    const std::string q =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4 "
        "--set train.adam_eps=1e-4 --set lora.nf4_blocksize=32 --set model.hidden_size=64 "
        "--set model.intermediate_size=64 --set lora.dropout=0.1";
    const Parity tol = parity_tolerance(64, 64);
    RunResult one = train(1, q);
    RunResult dp4 = train(4, mesh(4, 1, 1) + q + z3 + " --set train.checkpoint_every=3");
    expect_same(one, dp4, "qlora dp=4 stage 3", tol.wtol, tol.ltol, tol.watol);
    const std::string ckpt = last_out_ + "/checkpoints/step_00000003";
    // The base is spread over the replicas: on a model whose base outweighs two layers' windows
    // (8 layers of C = F = 256, ~1.7 MiB of NF4 base), the start line's frozen base per rank at
    // dp = 4 is a quarter of it plus the windows, against the whole at stage 0.
    auto frozen_mib = [](const std::string& log) {
        const size_t at = log.find("frozen base ");
        return at == std::string::npos ? -1.0 : std::stod(log.substr(at + 12));
    };
    const std::string wide =
        " --set model.num_layers=8 --set model.hidden_size=256 "
        "--set model.intermediate_size=256 --set train.steps=1";
    const double whole = frozen_mib(train(4, mesh(4, 1, 1) + q + wide).log);
    const double sharded = frozen_mib(train(4, mesh(4, 1, 1) + q + wide + z3).log);
    EXPECT_GT(whole, 1.0);
    // Estimate: whole ~1.8 MiB; sharded = whole / 4 + two windows of ~0.23 MiB (a layer's NF4
    // weights with their statistics) ~ 0.9 MiB, i.e. 0.5x (measured 0.9 against 1.8). Each
    // figure is printed to 0.1 MiB, so rounding moves the ratio by at most 0.05 / 1.75 + 0.05 /
    // 0.85 ~ 0.09 of it (0.55x); a base held whole would read >= 1.0x.
    EXPECT_LT(sharded, 0.6 * whole) << sharded << " MiB against " << whole;
    for (const auto& l : sweep({{2, 1, 1}, {2, 2, 1}, {2, 1, 2}}))
        expect_same(one, train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + q + z3),
                    fmt::format("qlora ({},{},{}) stage 3", l[0], l[1], l[2]), tol.wtol, tol.ltol,
                    tol.watol);
    expect_same(one, train(1, q + " --resume " + ckpt), "qlora dp=4 stage 3 -> 1 process", tol.wtol,
                tol.ltol, tol.watol);
    expect_same(one, train(2, mesh(2, 1, 1) + q + z3 + " --resume " + ckpt),
                "qlora dp=4 stage 3 -> dp=2 stage 3", tol.wtol, tol.ltol, tol.watol);
    const std::string lora =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4 "
        "--set train.adam_eps=1e-4 --set lora.base_format=f32";
    const std::string rc = " --set train.recompute=full";
    const Parity f32 = parity_tolerance();
    expect_same(train(1, lora), train(2, mesh(2, 1, 1) + lora + z3 + rc), "lora f32 dp=2 stage 3",
                f32.wtol, f32.ltol, f32.watol);
}

// A config error is one every rank meets alike before any talks to another
// (train/job_check.h): one line (from the first rank of the node), an exit of 1, and no
// MPI_Abort (whose banner Open MPI prints). `ete launch` checks the job before it starts mpirun
// at all.
TEST_F(ParallelTrain, ConfigErrorsAreOneLineFromOneRank) {
    const std::string job = (dir_ / "job.toml").string() + " --out " + (dir_ / "bad").string();
    write_token_shard((dir_ / "toks100.bin").string(), std::vector<int32_t>(64, 99), 100);
    auto errors = [](const std::string& out) {
        size_t n = 0;
        for (size_t at = out.find("ete: error:"); at != std::string::npos;
             at = out.find("ete: error:", at + 1))
            ++n;
        return n;
    };
    struct Case {
        std::string sets, message;
    };
    const Case cases[] = {
        {" --set parallel.dp=3", "parallel.dp*tp*pp = 3*1*1 = 3 but the job has 2 ranks"},
        {" --set parallel.tp=2 --set model.hidden_size=36 --set model.num_heads=6 "
         "--set model.num_kv_heads=3",
         "model.num_kv_heads = 3 does not fit parallel.tp = 2"},
        {" --set parallel.tpp=2", "--set: unknown config key 'parallel.tpp'"},
        {" --set parallel.pp=2 --set parallel.pp_layers=1,1", "parallel.pp_layers"},
        // The data, which `ete launch` checks before it starts a rank: a shard of a larger
        // vocabulary, a missing file (plain mpirun: each rank, through MPI_Abort; not run here).
        {" --set data.train=" + (dir_ / "toks100.bin").string(),
         "tokens come from a vocabulary of 100, larger than the model's 61"},
        {" --set data.train=" + (dir_ / "none.bin").string(), "none.bin': file not found"},
        // QLoRA quantizing as it loads: o_proj's tp = 2 shards are 32 columns wide.
        {" --set parallel.tp=2 --set model.hidden_size=64 --set model.intermediate_size=64 "
         "--set lora.enabled=true --set lora.base_format=nf4",
         "NF4 blocks of 64 elements would straddle its shards at parallel.tp = 2 (a shard run of "
         "32 elements at element 0); use lora.nf4_blocksize = 32"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.sets);
        ShellResult r = run_shell("OMP_NUM_THREADS=1 " + kMpiEnv +
                                  ete_cmd("launch -n 2 -- train " + job + c.sets) + " 2>&1");
        EXPECT_EQ(r.code, 1) << r.out;
        EXPECT_NE(r.out.find(c.message), std::string::npos) << r.out;
        EXPECT_EQ(errors(r.out), 1u) << r.out;
        EXPECT_EQ(r.out.find("ete launch: mpirun"), std::string::npos) << r.out;  // not started
        // Plain mpirun: the ranks check it, the node's first rank reports (two of the cases:
        // each mpirun start costs about a second).
        if (c.sets.find("parallel.dp=3") != std::string::npos ||
            c.sets.find("parallel.pp_layers") != std::string::npos ||
            c.sets.find("data.train") != std::string::npos)
            continue;
        r = run_shell(
            "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 "
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " +
            kMpiEnv + "mpirun -np 2 --oversubscribe " + ete_cmd("train " + job + c.sets) + " 2>&1");
        EXPECT_NE(r.code, 0) << r.out;
        EXPECT_NE(r.out.find(c.message), std::string::npos) << r.out;
        EXPECT_EQ(errors(r.out), 1u) << r.out;
        EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
    }
}

// A QLoRA base stored in NF4 (`ete quantize`) whose 64-element blocks straddle the tp = 2 shards
// of a 64-wide o_proj (32 columns each): the error says that the dir's blocks are fixed and which
// block size re-quantizing needs, not lora.nf4_blocksize (which cannot change a stored base).
TEST_F(ParallelTrain, AStoredNf4BaseThatCannotShardSaysHowToRequantize) {
    train(1, " --set model.hidden_size=64 --set model.intermediate_size=64");
    const std::string base = last_out_ + "/final", q = (dir_ / "nf4").string();
    ShellResult r = run_shell(
        ete_cmd("quantize --scheme nf4 --blocksize 64 --model " + base + " --out " + q) + " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    r = run_shell("OMP_NUM_THREADS=1 " + kMpiEnv +
                  ete_cmd("launch -n 2 -- train " + (dir_ / "job.toml").string() + " --out " +
                          (dir_ / "bad").string() + " --set model.init_from=" + q +
                          " --set lora.enabled=true --set parallel.tp=2") +
                  " 2>&1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("NF4 blocks of 64 elements would straddle its shards at parallel.tp = 2"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("the base dir stores blocks of 64 (lora.nf4_blocksize cannot change "
                         "them): re-quantize its full-precision weights with `ete quantize "
                         "--blocksize 32`"),
              std::string::npos)
        << r.out;
}

}  // namespace
}  // namespace ete
