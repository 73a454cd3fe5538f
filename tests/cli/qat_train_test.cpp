// tests/cli/qat_train_test.cpp — quantization-aware training end to end (the `ete` binary on the
// job of parallel_fixture.h): warm-up and resume, layout parity of the runs and of the observers,
// the [qat] options and what cannot apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "parallel_fixture.h"
#include "shell.h"

namespace ete {
namespace {

using namespace parallel_test;

// QAT layouts compute a quantizer's input in other summation orders, so besides fp32 noise an
// input within that noise of a tie of its grid can round one step apart: a tie flip
// (docs/numerics.md). In this job a flip moves a loss by ~1e-5 relative (1.25e-5 seen, see
// ExportsQatOverLoraWithItsAdapter) and one run has ~1 of them: the losses of QAT layouts are held
// to parity_tolerance plus four flips. A flip also changes the gradients downstream of it, which
// AdamW's normalised steps (~lr each, 2·lr at most when one turns around) carry into the weights
// that follow it for the rest of the run: such weights leave fp32 parity by a part of a step
// (seen: lr / 74 on one weight, OpenBLAS Haswell kernels and an AVX2 build). So at most 1% of the
// weights may leave parity_tolerance, and none may move by lr / 10 — a wrong shard or scale
// moves most weights, or moves them by whole steps.
constexpr double kTieFlipLoss = 1.25e-5;
constexpr double kLr = 1e-2;  // the job's

void expect_same_qat(const RunResult& want, const RunResult& got, const std::string& what,
                     const Parity& p = parity_tolerance(), double outside = 0.01) {
    // got may be a resumed run that logged only the last steps.
    ASSERT_FALSE(got.steps.empty()) << what << "\n" << got.log;
    ASSERT_EQ(got.steps.back(), int64_t(want.losses.size())) << what;
    for (size_t i = 0; i < got.losses.size(); ++i) {
        const double w = want.losses[size_t(got.steps[i] - 1)];
        EXPECT_NEAR(got.losses[i], w, (p.ltol + 4 * kTieFlipLoss) * w)
            << what << " step " << got.steps[i];
    }
    ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
    size_t off = 0, n = 0;
    double worst = 0;
    for (const auto& [name, w] : want.weights) {
        ASSERT_EQ(got.weights.at(name).size(), w.size()) << what << " " << name;
        for (size_t i = 0; i < w.size(); ++i, ++n) {
            const double d = std::fabs(got.weights.at(name)[i] - w[i]);
            off += d > p.watol + p.wtol * std::fabs(w[i]);
            worst = std::max(worst, d);
        }
    }
    EXPECT_LE(double(off), outside * double(n))
        << what << ": " << off << " of " << n << ", worst " << worst;
    EXPECT_LT(worst, kLr / 10) << what;
}

class QatTrain : public ParallelTrain {
  protected:
    // The output of a training run that must fail (a non-zero exit).
    std::string train_error(const std::string& sets) {
        const ShellResult r = run_shell(ete_cmd("train " + (dir_ / "job.toml").string() +
                                                " --out " + (dir_ / "bad").string() + sets) +
                                        " 2>&1");
        EXPECT_NE(r.code, 0) << r.out;
        return r.out;
    }
    // The output of an `ete` command that must succeed.
    static std::string ok(const std::string& args) {
        const ShellResult r = run_shell(ete_cmd(args) + " 2>&1");
        EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
        return r.out;
    }
    // `ete eval --json`'s loss of MODEL (and options) on 4 x 16 tokens of the job's shard.
    double eval_loss(const std::string& model) {
        const std::string out = ok("eval --model " + model + " --tokens " +
                                   (dir_ / "toks.bin").string() + " --batch 4 --seq 16 --json");
        const nlohmann::json j = nlohmann::json::parse(out.substr(out.rfind('{')));
        EXPECT_EQ(j["tokens"], 64) << out;
        return j["loss"].get<double>();
    }
};

// QAT (W8A8: weights per channel, every linear's input and every norm's output per tensor). While
// qat.warmup_steps last, the observers only watch: the run is bit-identical to plain training.
// From then on the fake quantization changes the numbers, by the size of an 8-bit grid's
// rounding. A resume from a checkpoint taken mid-warm-up (observer state in state.json) continues
// bit for bit.
TEST_F(QatTrain, WarmsUpUnchangedThenQuantizesAndResumesBitExactly) {
    const std::string qat =
        " --set qat.enabled=true --set qat.points=weight,linear_in,post_norm "
        "--set qat.warmup_steps=3 --set qat.observer=moving_average "
        "--set qat.averaging_constant=0.1";
    RunResult plain = train(1, ""), q = train(1, qat + " --set train.checkpoint_every=2");
    const std::string ckpt = last_out_ + "/checkpoints/step_00000002";
    ASSERT_EQ(q.losses.size(), 5u) << q.log;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(q.losses[i], plain.losses[i]) << "step " << i + 1;
    for (size_t i = 3; i < 5; ++i) {
        EXPECT_NE(q.losses[i], plain.losses[i]) << "step " << i + 1;
        EXPECT_NEAR(q.losses[i], plain.losses[i], 0.02 * plain.losses[i]) << "step " << i + 1;
    }
    EXPECT_NE(q.weights, plain.weights);
    const nlohmann::json st =
        nlohmann::json::parse(read_file(ckpt + "/state.json"))["extra"]["qat"];
    EXPECT_EQ(st.size(), 4u * 4 + 1) << st.dump();  // 4 sites a layer, and the final norm
    RunResult resumed = train(1, qat + " --resume " + ckpt);
    EXPECT_EQ(resumed.steps, (std::vector<int64_t>{3, 4, 5})) << resumed.log;
    EXPECT_EQ(resumed.losses, std::vector<double>(q.losses.begin() + 2, q.losses.end()));
    EXPECT_EQ(resumed.weights, q.weights);
}

// QAT on every layout: the observers' step ranges are reduced over all ranks (min and max are
// exact in any order), the weights' per-channel ranges over tp where a row-parallel linear splits
// the channel. Layouts still sum products in other orders, and an activation within that noise
// of a rounding tie of the 8-bit grid lands one step away: expect_same_qat. (Measured: pp
// alone bit for bit; losses 3.4e-6 on dp, 1.1e-5 on tp = 2; weights 8.4e-6 at most.)
TEST_F(QatTrain, EveryLayoutMatchesOneProcess) {
    const std::string qat =
        " --set qat.enabled=true --set qat.points=weight,linear_in,post_norm "
        "--set qat.warmup_steps=2";
    RunResult one = train(1, qat + " --set train.checkpoint_every=2");
    const auto observers = [&](const std::string& out) {
        return nlohmann::json::parse(
            read_file(out + "/checkpoints/step_00000002/state.json"))["extra"]["qat"];
    };
    const nlohmann::json one_obs = observers(last_out_);
    for (const auto& l : sweep({{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}})) {
        const std::string what = fmt::format("qat ({},{},{})", l[0], l[1], l[2]);
        RunResult got = train(l[0] * l[1] * l[2],
                              mesh(l[0], l[1], l[2]) + qat + " --set train.checkpoint_every=2");
        expect_same_qat(one, got, what);
        // The observers every layout saved: the same ranges, to fp32 summation noise along the
        // chain before them (parity_tolerance's ltol bounds the whole chain; layer 0's attention
        // input, which no sum over ranks precedes, exactly).
        const nlohmann::json obs = observers(last_out_);
        ASSERT_EQ(obs.size(), one_obs.size()) << what;
        EXPECT_EQ(obs["0.0"], one_obs["0.0"]) << what;
        for (const auto& [key, want] : one_obs.items())
            for (size_t i = 0; i < want.size(); ++i)
                EXPECT_NEAR(obs[key][i].get<double>(), want[i].get<double>(),
                            parity_tolerance().ltol * std::fabs(want[i].get<double>()))
                    << what << " observer " << key;
    }
    // A (2,2,2) checkpoint taken during the warm-up resumes on one process.
    const std::string ckpt = last_out_ + "/checkpoints/step_00000002";
    expect_same_qat(one, train(1, qat + " --resume " + ckpt), "qat (2,2,2) -> (1,1,1)");
    // ZeRO-2's gradient windows: QAT's range scales leave each weight gradient as backward
    // wrote it (no mask), so the windows reduce what one process sums.
    RunResult z2 = train(2, mesh(2, 1, 1) + qat + " --set parallel.zero_stage=2");
    expect_same_qat(one, z2, "qat dp=2 stage 2");
    EXPECT_NE(z2.log.find("ZeRO stage 2: gradients and optimizer state"), std::string::npos)
        << z2.log;
    // ZeRO-3: each group's fq(W) copies are rewritten from its window right after the group's
    // first gather of a step (the windows hold every weight's fp32 master then, even in bf16).
    // In bf16 at dp = 2 with one micro-batch a step, stage 3 gives stage 1's numbers bit for bit
    // (the same roundings of the same values, one addition per gradient sum).
    expect_same_qat(one, train(2, mesh(2, 1, 1) + qat + " --set parallel.zero_stage=3"),
                    "qat dp=2 stage 3");
    // Under tp (row-parallel ranges reduced over tp inside the gather) and pp. (Under the
    // sanitizers, which run this test ~10x slower, dp = 2 above and the bf16 pair stand for them.)
    if (!testing::under_sanitizers()) {
        expect_same_qat(one, train(4, mesh(2, 2, 1) + qat + " --set parallel.zero_stage=3"),
                        "qat (2,2,1) stage 3");
        expect_same_qat(one, train(4, mesh(2, 1, 2) + qat + " --set parallel.zero_stage=3"),
                        "qat (2,1,2) stage 3");
    }
    const std::string bf16 = qat + " --set train.precision=bf16 --set train.grad_accum=1";
    expect_same(train(2, mesh(2, 1, 1) + bf16 + " --set parallel.zero_stage=1"),
                train(2, mesh(2, 1, 1) + bf16 + " --set parallel.zero_stage=3"),
                "qat bf16 dp=2 stage 3 against stage 1", 0.0f, 0.0, 0.0f);
    // The projections' outputs and the residual stream. A pipeline (recomputing) changes no
    // sum: bit for bit. Quantizing the residual stream per tensor turns fp32 noise in an element
    // near a rounding tie into a step of the grid (~0.03 here) that every later layer sees, so a
    // changed summation order moves the run as much as splitting one process's batch differently
    // does (micro_batch 2 x grad_accum 4 instead of 4 x 2: losses 3.9e-5 relative apart, weights
    // 1.3e-3): tp and dp are held to that, not to fp32 noise. (Measured on tp = 2 and dp = 2:
    // losses 3.9e-5, weights 1.34e-3 = lr / 7.5.)
    const std::string outs = qat + " --set qat.points=attn_out,ffn_out,residual";
    const RunResult outs_one = train(1, outs);
    const RunResult outs_pp = train(2, mesh(1, 1, 2) + outs + " --set train.recompute=full");
    EXPECT_EQ(outs_pp.losses, outs_one.losses);
    EXPECT_EQ(outs_pp.weights, outs_one.weights);
    for (const auto& [dp, tp] : {std::pair{1, 2}, std::pair{2, 1}}) {
        const std::string what = fmt::format("qat outputs ({},{},1)", dp, tp);
        const RunResult got = train(2, mesh(dp, tp, 1) + outs);
        ASSERT_EQ(got.losses.size(), outs_one.losses.size()) << what << "\n" << got.log;
        for (size_t i = 0; i < got.losses.size(); ++i)
            EXPECT_NEAR(got.losses[i], outs_one.losses[i], 2e-4 * outs_one.losses[i])
                << what << " step " << i + 1;
        for (const auto& [name, w] : outs_one.weights)
            for (size_t i = 0; i < w.size(); ++i)
                ASSERT_NEAR(got.weights.at(name)[i], w[i], 3e-3) << what << " " << name;
    }
}

// QAT over LoRA (an f32 frozen base) and over QLoRA (NF4, the model widened so every shard is
// whole blocks of 32) on tp = 2, pp = 2 and dp x tp: the adapters shard with their base as in
// LoraEveryLayoutMatchesOneProcess, the fake-quantized weights of the frozen base are cut like
// the base, and the observers reduce over every rank. adam_eps = 1e-4 as there (adapter
// elements with ~zero gradients). Losses: expect_same_qat's fp32 parity plus tie flips. The
// adapters are few (28 tensors) and all downstream of the quantized inputs, so a tie flip (see
// above) reaches a larger part of them than of a whole model: re-splitting one process's batch
// (micro_batch 1 x grad_accum 8 instead of 4 x 2, the same sums in another order) moves up to
// 4.9% of the adapter elements outside fp32 parity, by lr / 31 at most (measured on Zen 4 with
// these points, 6.6% with linear_in alone); the layouts moved 1.7% (qlora at tp = 2), worst
// lr / 84. So up to 10% may leave parity and none by lr / 10, while a wrong shard, scale or
// observer moves the losses by far more than a flip and most elements by whole steps (~lr).
TEST_F(QatTrain, OverLoraAndQloraEveryLayoutMatchesOneProcess) {
    const std::string qat =
        " --set qat.enabled=true --set qat.points=weight,linear_in,post_norm "
        "--set qat.warmup_steps=2 --set lora.enabled=true --set lora.targets=all-linear "
        "--set lora.r=4 --set train.adam_eps=1e-4";
    const std::string nf4 =
        " --set lora.base_format=nf4 --set lora.nf4_blocksize=32 --set model.hidden_size=64 "
        "--set model.intermediate_size=64";
    for (const std::string& base : {std::string(" --set lora.base_format=f32"), nf4}) {
        const bool q = base == nf4;
        const RunResult one = train(1, qat + base);
        ASSERT_EQ(one.losses.size(), 5u) << one.log;
        EXPECT_EQ(one.weights.size(), 4u * 7 * 2);  // adapters only
        const Parity tol = q ? parity_tolerance(64, 64) : parity_tolerance();
        for (const auto& l : sweep({{1, 2, 1}, {1, 1, 2}, {2, 2, 1}}))
            expect_same_qat(
                one, train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + qat + base),
                fmt::format("qat over {} ({},{},{})", q ? "qlora" : "lora", l[0], l[1], l[2]), tol,
                0.10);
        // ZeRO-3: the base sharded too, each frozen weight's fq(W) (dequantized, for NF4)
        // written from its window once a phase.
        expect_same_qat(one, train(2, mesh(2, 1, 1) + qat + base + " --set parallel.zero_stage=3"),
                        fmt::format("qat over {} dp=2 stage 3", q ? "qlora" : "lora"), tol, 0.10);
    }
}

// The [qat] options on one process: layers left out by qat.skip_layers run in full precision (all
// of them: bit-identical to plain training); bf16, GPT-2 with per-tensor 8-bit weights and
// per-token activations, 4-bit per-group weights, a LoRA run over a dense frozen base and the
// attn_out, ffn_out and residual points all train with finite losses that fake quantization
// moves; with every point on, recomputing the layers in backward changes nothing (the masks a
// recompute cannot rebuild are kept); what cannot apply is a one-line error.
TEST_F(QatTrain, OptionsTrainOrSayWhyNot) {
    const std::string qat = " --set qat.enabled=true";
    RunResult plain = train(1, "");
    RunResult skipped = train(1, qat + " --set qat.skip_layers=0,1,-2,-1");
    EXPECT_EQ(skipped.losses, plain.losses);
    EXPECT_EQ(skipped.weights, plain.weights);
    const std::string bf16 = " --set train.precision=bf16";
    const std::string gpt2 =
        " --set model.arch=gpt2 --set model.num_kv_heads=4 "
        "--set qat.weight_granularity=tensor --set qat.act_granularity=token";
    const std::string w4 =
        " --set model.intermediate_size=48 --set qat.weight_bits=4 "
        "--set qat.weight_granularity=group --set qat.group_size=16";
    const std::string lora =
        " --set lora.enabled=true --set lora.base_format=f32 --set lora.targets=all-linear";
    const std::string qlora =
        " --set lora.enabled=true --set lora.base_format=nf4 --set lora.targets=all-linear";
    const std::string outputs = " --set qat.points=attn_out,ffn_out,residual";
    for (const std::string& o : {bf16, gpt2, w4, lora, qlora, outputs}) {
        const RunResult base = train(1, o), q = train(1, o + qat);
        ASSERT_EQ(q.losses.size(), 5u) << o << "\n" << q.log;
        for (double l : q.losses) EXPECT_TRUE(std::isfinite(l)) << o;
        EXPECT_NE(q.losses.back(), base.losses.back()) << o;
        EXPECT_NEAR(q.losses.back(), base.losses.back(), 0.05 * base.losses.back()) << o;
    }
    const std::string all =
        qat + " --set qat.points=weight,linear_in,post_norm,attn_out,ffn_out,residual";
    const RunResult kept = train(1, all),
                    recomputed = train(1, all + " --set train.recompute=full");
    EXPECT_EQ(recomputed.losses, kept.losses);
    EXPECT_EQ(recomputed.weights, kept.weights);
    // Every QAT buffer is backend memory: the guarded backend (memory the host cannot touch)
    // trains the same run bit for bit, on one process and with dp = 2 under ZeRO-1.
    const RunResult guarded = train(1, all + " --set train.backend=guarded");
    EXPECT_EQ(guarded.losses, kept.losses);
    EXPECT_EQ(guarded.weights, kept.weights);
    const std::string zero1 = all + " --set parallel.dp=2 --set parallel.zero1=true";
    expect_same(train(2, zero1), train(2, zero1 + " --set train.backend=guarded"),
                "qat zero1 guarded", 0.0f, 0.0);
    EXPECT_NE(train_error(qat + " --set qat.points=weight,mlp_out")
                  .find("ete: error: qat.points: 'mlp_out' is not a point"),
              std::string::npos);
    EXPECT_NE(train_error(qat + " --set qat.weight_bits=3")
                  .find("ete: error: qat.weight_bits = 3: "
                        "expected 4 or 8"),
              std::string::npos);
    EXPECT_NE(train_error(qat + " --set qat.group_size=12 --set qat.weight_granularity=group")
                  .find("ete: error: qat.group_size = 12: expected a multiple of 8"),
              std::string::npos);
}

// The learned scale factors a run's final/qat.json holds (qat.learnable_scale).
std::map<std::string, std::vector<float>> learned_factors(const std::string& run) {
    return nlohmann::json::parse(read_file(run + "/final/qat.json"))["weight_scale_factors"]
        .get<std::map<std::string, std::vector<float>>>();
}

void expect_near_factors(const std::map<std::string, std::vector<float>>& want,
                         const std::map<std::string, std::vector<float>>& got,
                         const std::string& what, float tol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (const auto& [name, w] : want) {
        ASSERT_EQ(got.at(name).size(), w.size()) << what << " " << name;
        for (size_t i = 0; i < w.size(); ++i)
            ASSERT_NEAR(got.at(name)[i], w[i], tol) << what << " " << name << "[" << i << "]";
    }
}

// LSQ (qat.learnable_scale): each quantized weight's scales are its range's times a trained
// factor that starts at 1, so until the first fake-quantized step has trained — the warm-up and
// that step's loss — the run is min/max QAT's bit for bit; then the optimizer moves the factors
// (every one, here) and the losses with them. They are in checkpoints (a resume from the warm-up
// or after it is bit exact) and in final/qat.json, not among the HF model's tensors; every layout
// learns the same factors; the integer export uses them and evaluates like the fake-quantized
// model.
TEST_F(QatTrain, LearnsTheWeightScales) {
    const std::string qat =
        " --set qat.enabled=true --set qat.points=weight,linear_in --set qat.warmup_steps=2";
    const std::string lsq = qat + " --set qat.learnable_scale=true";
    const RunResult minmax = train(1, qat), q = train(1, lsq + " --set train.checkpoint_every=2");
    const std::string run = last_out_;
    ASSERT_EQ(q.losses.size(), 5u) << q.log;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(q.losses[i], minmax.losses[i]) << "step " << i + 1;
    for (size_t i = 3; i < 5; ++i) {
        EXPECT_NE(q.losses[i], minmax.losses[i]) << "step " << i + 1;
        EXPECT_NEAR(q.losses[i], minmax.losses[i], 0.02 * minmax.losses[i]) << "step " << i + 1;
    }
    for (const auto& [name, w] : q.weights)
        EXPECT_EQ(name.find("_scale"), std::string::npos) << name << " in model.safetensors";
    // Fine-tuning a trained model (model.init_from): the factors, which its HF dir does not
    // hold, start at 1 there too.
    train(1, "");
    const std::string from = " --set model.init_from=" + last_out_ + "/final";
    const RunResult ft_minmax = train(1, qat + from), ft = train(1, lsq + from);
    ASSERT_EQ(ft.losses.size(), 5u) << ft.log;
    for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(ft.losses[i], ft_minmax.losses[i]) << "fine-tuning step " << i + 1;
    EXPECT_NE(ft.losses[4], ft_minmax.losses[4]);
    // Per group of input columns (4-bit): the same start, then learning.
    const std::string group =
        " --set model.intermediate_size=48 --set qat.weight_bits=4 "
        "--set qat.weight_granularity=group --set qat.group_size=16";
    const RunResult g_minmax = train(1, qat + group), g = train(1, lsq + group);
    ASSERT_EQ(g.losses.size(), 5u) << g.log;
    for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(g.losses[i], g_minmax.losses[i]) << "per group, step " << i + 1;
    EXPECT_NE(g.losses[4], g_minmax.losses[4]);
    for (const auto& [name, f] : learned_factors(last_out_))
        for (float v : f) ASSERT_NEAR(v, 1.0f, 0.5f) << name;
    const auto factors = learned_factors(run);
    ASSERT_EQ(factors.size(), 28u);  // 7 linears in each of 4 layers
    int moved = 0, total = 0;
    for (const auto& [name, f] : factors) {
        const size_t in = name.find("down_proj") != std::string::npos ? 45 : 32;
        ASSERT_EQ(f.size(), q.weights.at(name).size() / in) << name;  // one per output channel
        for (float v : f) {
            EXPECT_GT(v, 0.5f) << name;  // 3 steps of lr 1e-2 from 1
            EXPECT_LT(v, 1.5f) << name;
            moved += v != 1.0f;
            ++total;
        }
    }
    EXPECT_GT(moved, total * 9 / 10) << moved << " of " << total;
    for (const char* step : {"2", "4"}) {
        const std::string ckpt = run + "/checkpoints/step_0000000" + step;
        const RunResult resumed = train(1, lsq + " --resume " + ckpt);
        EXPECT_EQ(resumed.losses,
                  std::vector<double>(q.losses.begin() + (step[0] - '0'), q.losses.end()))
            << step;
        EXPECT_EQ(resumed.weights, q.weights) << step;
        EXPECT_EQ(learned_factors(last_out_), factors) << step;
    }
    // Every layout: fp32 noise in a scale's gradient moves its factor, and so the grid of every
    // weight it scales, a little; an element near a rounding tie or the clamp then lands one
    // step away or changes its mask bit, and its gradient changes (AdamW's first steps are about
    // lr whatever the gradient's size): expect_same_qat. (Measured: tp = 2 all
    // within 6.2e-6, pp bit for bit; dp = 2 0.17% off, by 1.2e-4 at most; per tensor at tp = 4
    // 0.08%, by 2.6e-5.)
    for (const auto& l : {std::array<int, 3>{2, 1, 1}, {1, 2, 1}, {1, 1, 2}}) {
        const std::string what = fmt::format("lsq ({},{},{})", l[0], l[1], l[2]);
        expect_same_qat(q, train(l[0] * l[1] * l[2], mesh(l[0], l[1], l[2]) + lsq), what);
        expect_near_factors(factors, learned_factors(last_out_), what, 1e-4f);
    }
    // Per tensor at tp = 4 over 2 kv heads: the k and v shards of a head on two ranks each, and
    // one scale summed over all four, each head counted once.
    const std::string tensor = lsq + " --set qat.weight_granularity=tensor";
    const RunResult t1 = train(1, tensor);
    const auto t1_factors = learned_factors(last_out_);
    expect_same_qat(t1, train(4, mesh(1, 4, 1) + tensor), "lsq tensor tp=4");
    expect_near_factors(t1_factors, learned_factors(last_out_), "lsq tensor tp=4", 1e-4f);
    // The integer model of the learned scales evaluates like the fake-quantized model.
    ok("export int8 --run " + run + " --out " + run + "/int8");
    const double fake = eval_loss(run + "/final --fake-quant");
    EXPECT_NEAR(eval_loss(run + "/int8"), fake, 1e-3 * fake);
    EXPECT_NE(train_error(lsq + " --set lora.enabled=true")
                  .find("ete: error: qat.learnable_scale = true: a LoRA run's base weights are "
                        "frozen"),
              std::string::npos);
    EXPECT_NE(train_error(lsq + " --set qat.points=linear_in")
                  .find("ete: error: qat.learnable_scale = true: expected qat.points to include "
                        "weight"),
              std::string::npos);
}

// The integer model end to end: a QAT run's final/ (with qat.json) exported by `ete export int8`
// evaluates, through `ete eval`'s contract, to the loss of the fake-quantized model it trained as
// (within 1e-3 relative, the bound; measured about 1e-7) and not to the plain fp32
// model's: closer to the fake-quantized loss than half its distance to the plain one (the 8-bit
// grids move this loss by ~3e-4 relative, a tie flip — see ExportsQatOverLoraWithItsAdapter —
// by ~1e-5, so that leaves room for ~10 of them); post-training quantization (`ete quantize
// --scheme w8a8|w4a8 --calib`) of the same model gives a dir of the same format; what cannot be
// exported is named.
TEST_F(QatTrain, ExportsAnIntegerModelThatEvaluatesLikeTheFakeQuantizedOne) {
    const std::string qat =
        " --set qat.enabled=true --set qat.points=weight,linear_in,post_norm "
        "--set qat.warmup_steps=2";
    train(1, qat);
    const std::string run = last_out_, toks = (dir_ / "toks.bin").string();
    const std::string exported = ok("export int8 --run " + run + " --out " + run + "/int8");
    EXPECT_NE(exported.find("28 weights in 8-bit integers"), std::string::npos) << exported;
    const std::string shown = ok("inspect " + run + "/int8 --summary");
    EXPECT_NE(shown.find("quantization: ete_int8 (integer model) | W8A8 | weights per channel | "
                         "inputs per tensor | linears all-linear | 17 frozen activation scales | "
                         "from qat"),
              std::string::npos)
        << shown;
    const double fake = eval_loss(run + "/final --fake-quant"), plain = eval_loss(run + "/final");
    const double integer = eval_loss(run + "/int8");
    EXPECT_NEAR(integer, fake, 1e-3 * fake);
    EXPECT_GT(std::fabs(integer - plain), 2 * std::fabs(integer - fake));
    for (const char* scheme : {"w8a8", "w4a8"}) {
        const std::string ptq = run + "/ptq_" + scheme;
        const std::string out =
            ok(std::string("quantize --scheme ") + scheme + " --model " + run + "/final --calib " +
               toks + " --calib-batches 3 --batch 4 --seq 16 --out " + ptq);
        EXPECT_NE(out.find("relative difference"), std::string::npos) << out;
        const nlohmann::json qc =
            nlohmann::json::parse(read_file(ptq + "/config.json"))["quantization_config"];
        EXPECT_EQ(qc["weight_bits"], scheme[1] == '4' ? 4 : 8);
        EXPECT_EQ(qc["source"]["from"], "ptq");
        EXPECT_TRUE(std::isfinite(eval_loss(ptq)));
    }
    // The LM head too (qat.linears lm_head): trained with fake quantization on every layout —
    // under tp = 2 the vocabulary of 61 is padded, and the head's per-channel scales are per row —
    // and exported into integers.
    const std::string head = qat + " --set qat.linears=all-linear,lm_head";
    const RunResult h1 = train(1, head);
    const std::string head_run = last_out_;
    expect_same_qat(h1, train(2, mesh(1, 2, 1) + head), "qat lm_head tp=2");
    expect_same_qat(h1, train(2, mesh(1, 1, 2) + head), "qat lm_head pp=2");
    EXPECT_NE(ok("export int8 --run " + head_run + " --out " + head_run + "/int8")
                  .find("29 weights in 8-bit integers"),
              std::string::npos);
    const double head_fake = eval_loss(head_run + "/final --fake-quant");
    EXPECT_NEAR(eval_loss(head_run + "/int8"), head_fake, 1e-3 * head_fake);
    // A tied head (GPT-2's: the token embedding, which the lookup reads unquantized), on every
    // layout (pp = 2: the last stage's tied copy) and in integers. Under tp = 2 a QAT run with
    // tied embeddings lands more activations a rounding tie away than an untied one, whether the
    // head is quantized or not (measured, weights: GPT-2 1.8e-4 with the head, 1.2e-5 without;
    // a tied Llama 2.3e-4 with, 1.4e-4 without; 1.8e-3 with the head's input quantized but not
    // its weight): held, like the outputs' points below, to 2e-4 relative on the losses and to
    // 3e-3 on the weights.
    const std::string tied = head + " --set model.arch=gpt2 --set model.num_kv_heads=4";
    const RunResult t1 = train(1, tied);
    const std::string tied_run = last_out_;
    expect_same(t1, train(2, mesh(1, 2, 1) + tied), "qat tied head tp=2", 0.0f, 2e-4, 3e-3f);
    expect_same_qat(t1, train(2, mesh(1, 1, 2) + tied), "qat tied head pp=2");
    // Training quantizes the tied head: the run differs from one whose head stays fp32.
    EXPECT_NE(t1.losses.back(),
              train(1, qat + " --set model.arch=gpt2 --set model.num_kv_heads=4").losses.back());
    EXPECT_NE(ok("export int8 --run " + tied_run + " --out " + tied_run + "/int8")
                  .find("17 weights in 8-bit integers"),
              std::string::npos);
    const double tied_fake = eval_loss(tied_run + "/final --fake-quant");
    const double tied_plain = eval_loss(tied_run + "/final");
    const double tied_int = eval_loss(tied_run + "/int8");
    // Within the 1e-3 (measured ~1e-9 in the Release build; 6.9e-5 under the sanitizer
    // build's -O1 fp32 sums, where an activation a rounding tie away lands one grid step off).
    EXPECT_NEAR(tied_int, tied_fake, 1e-3 * tied_fake);
    EXPECT_GT(std::fabs(tied_int - tied_plain), 10 * std::fabs(tied_int - tied_fake));
    auto error = [&](const std::string& args) {
        const ShellResult r = run_shell(ete_cmd(args) + " 2>&1");
        EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
        return r.out;
    };
    train(1, "");
    EXPECT_NE(error("export int8 --run " + last_out_ + " --out " + last_out_ + "/int8")
                  .find("/final' has no qat.json: expected the final model of a QAT run"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(last_out_ + "/int8"));
    train(1, qat + " --set lora.enabled=true --set lora.targets=all-linear");  // no base dir
    EXPECT_NE(error("export int8 --run " + last_out_ + " --out " + last_out_ + "/int8")
                  .find("/final' is a LoRA adapter dir whose base_model_name_or_path ('') is not "
                        "a model dir here: pass the base as --model and this dir as --adapter"),
              std::string::npos);
    train(1, " --set qat.enabled=true --set qat.points=weight,post_norm");
    EXPECT_NE(error("export int8 --run " + last_out_ + " --out " + last_out_ + "/int8")
                  .find("the integer model needs qat.points to include weight and linear_in"),
              std::string::npos);
    EXPECT_NE(error("quantize --scheme w8a8 --model " + run + "/final --out " + run + "/x")
                  .find("--calib SHARD is required"),
              std::string::npos);
    EXPECT_NE(error("eval --model " + run + "/int8 --adapter " + run + " --tokens " + toks +
                    " --batch 1 --seq 4")
                  .find("is an integer model: --adapter applies to"),
              std::string::npos);
    EXPECT_NE(error("train " + (dir_ / "job.toml").string() + " --out " + run + "/again" +
                    " --set model.init_from=" + run + "/int8")
                  .find("is an integer model (quant_method ete_int8): ete eval and ete generate "
                        "run it"),
              std::string::npos);
}

// QAT over LoRA and QLoRA: the run's final adapter dir keeps qat.json; `ete eval --fake-quant`
// runs base + adapter as it trained, and `ete export int8 --run` writes the integer base (an NF4
// base's dequantized values on the run's weight grid) with the adapter inside, which `ete eval`
// runs in fp32 on the fake-quantized input the integers come from: the same loss as the
// fake-quantized model, to fp32 rounding and tie flips (below). The adapters cover only some
// members of the fused groups (v_proj, up_proj), so the norms must not write integers there; and
// per-token inputs. `ete quantize --scheme w8a8 --adapter` does the same by PTQ.
//
// The bound: the integer model sums exact integers where the fake-quantized one sums fp32
// products, so an activation that lies within that fp32 noise of a tie of its 8-bit grid is
// rounded one step apart (a tie flip), and every later position and layer sees the step. One
// flip moves this model's loss by ~1e-5 relative (seen: 1.25e-5, with OpenBLAS's AVX-512
// kernels on the per-token NF4 run), and whether one happens depends on the kernels, so no
// fp32-rounding bound can hold on every CPU. The weights are 4-bit here, which moves the loss by
// ~7e-4 relative (|fake − plain|), and the integer model must stay within a tenth of that: room
// for ~6 flips, while a wrong grid, scale or a dropped adapter moves it by the whole effect.
TEST_F(QatTrain, ExportsQatOverLoraWithItsAdapter) {
    train(1, "");
    const std::string base = last_out_ + "/final", toks = (dir_ / "toks.bin").string();
    const double plain_base = eval_loss(base);
    for (const std::string& k : {std::string(" --set lora.base_format=f32"),
                                 std::string(" --set lora.base_format=nf4 "
                                             "--set qat.act_granularity=token")}) {
        SCOPED_TRACE(k);
        train(1,
              " --set qat.enabled=true --set qat.points=weight,linear_in,post_norm "
              "--set qat.warmup_steps=2 --set qat.weight_bits=4 --set lora.enabled=true "
              "--set lora.targets=v_proj,up_proj,o_proj --set model.init_from=" +
                  base + k);
        const std::string run = last_out_, adapter = base + " --adapter " + run + "/final";
        ASSERT_TRUE(fs::exists(run + "/final/qat.json"));
        const std::string exported = ok("export int8 --run " + run + " --out " + run + "/int8");
        EXPECT_NE(exported.find("28 weights in 4-bit integers"), std::string::npos) << exported;
        EXPECT_TRUE(fs::exists(run + "/int8/adapter/adapter_model.safetensors"));
        EXPECT_NE(ok("inspect " + run + "/int8 --summary").find("| from qat | with a LoRA adapter"),
                  std::string::npos);
        const double fake = eval_loss(adapter + " --fake-quant"), plain = eval_loss(adapter);
        const double integer = eval_loss(run + "/int8");
        EXPECT_GT(std::fabs(fake - plain), 2e-4 * plain);  // the 4-bit grid's effect (above)
        EXPECT_NEAR(integer, fake, 0.1 * std::fabs(fake - plain));
        // The adapter moved the loss by far more than the integer model's difference: a loader
        // that dropped it would fail above.
        EXPECT_GT(std::fabs(plain - plain_base), 1e-3 * plain_base);
        // --model BASE --adapter DIR names the same sources, and so does the adapter dir alone
        // (over the base it names), for eval too.
        ok("export int8 --model " + adapter + " --out " + run + "/int8b");
        EXPECT_EQ(read_file(run + "/int8b/model.safetensors"),
                  read_file(run + "/int8/model.safetensors"));
        EXPECT_EQ(eval_loss(run + "/final --fake-quant"), fake);
        // PTQ of base + adapter: the adapter kept beside the integers, in fp32 (W8A8 moves the
        // loss by ~1e-4 here, the adapter by ~1e-2).
        ok("quantize --scheme w8a8 --model " + adapter + " --calib " + toks +
           " --calib-batches 2 --batch 4 --seq 16 --out " + run + "/ptq");
        EXPECT_TRUE(fs::exists(run + "/ptq/adapter/adapter_config.json"));
        const double ptq = eval_loss(run + "/ptq");
        EXPECT_NEAR(ptq, plain, 1e-3 * plain);
        EXPECT_GT(std::fabs(ptq - plain_base), 5e-3 * plain_base);
        ok("quantize --scheme w8a8 --model " + run + "/final --calib " + toks +
           " --calib-batches 2 --batch 4 --seq 16 --out " + run + "/ptq2");  // the adapter alone
        EXPECT_EQ(read_file(run + "/ptq2/model.safetensors"),
                  read_file(run + "/ptq/model.safetensors"));
    }
}

}  // namespace
}  // namespace ete
