// tests/model/packing_test.cpp — packed sequences through the whole Transformer: a row holding
// documents A | B | padding (doc_start) must give the losses and gradients of A and B run as rows
// of their own, for Llama (GQA, RoPE) and GPT-2 (learned positions), with and without recompute;
// and an invalid doc_start is a one-line ete::Error before anything is computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ete/core/rng.h"
#include "ete/model/transformer.h"
#include "numerics.h"
#include "parallel_util.h"
#include "test_util.h"

namespace ete {
namespace packing_test {

// Tiny models with sizes that are not powers of two; Llama uses GQA (4 query, 2 kv heads), and so
// do Qwen2 (q/k/v biases, a window of 3 on layer 1), Mistral (a window of 4 on both layers) and
// Qwen3 (q/k norms, a window of 3 on layer 1), whose windows are shorter than the documents.
ModelConfig tiny_config(Arch arch) {
    if (arch == Arch::Gemma2 || arch == Arch::Gemma3)  // local layers with a window of 3
        return testing::gemma_like(tiny_config(Arch::Llama), arch, 3);
    if (arch == Arch::Phi3)  // D = 10: RoPE on 6 dims
        return testing::phi3_like(tiny_config(Arch::Llama), 4, 0.6);
    if (arch != Arch::Llama && arch != Arch::GPT2) {
        ModelConfig c = tiny_config(Arch::Llama);
        c.arch = arch;
        c.sliding_window = arch == Arch::Mistral ? 4 : 3;
        c.window_from_layer = arch == Arch::Mistral ? 0 : 1;
        return c;
    }
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 61;
    c.hidden_size = 40;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = arch == Arch::Llama ? 2 : 4;
    c.intermediate_size = arch == Arch::Llama ? 56 : 4 * 40;
    c.max_position_embeddings = 24;
    c.norm_eps = arch == Arch::Llama ? 1e-6 : 1e-5;
    c.tie_word_embeddings = arch == Arch::GPT2;
    c.initializer_range = 0.2;  // far from the linear regime, so attention mixing matters
    return c;
}

std::unique_ptr<Transformer> make_model(const ModelConfig& c, Backend& be, int B, int T,
                                        Recompute r = Recompute::None) {
    auto m = std::make_unique<Transformer>(c, be);
    m->params().init(11);
    // Norm weights and biases off their exact 1/0 init so every gradient path carries signal.
    ParamStore& ps = m->params();
    for (int i = 0; i < int(ps.specs().size()); ++i) {
        const ParamSpec& s = ps.specs()[size_t(i)];
        if (s.kind != ParamKind::Norm && s.kind != ParamKind::Bias) continue;
        CounterRng rng(5, s.name);
        std::vector<float> v = ps.download(i);
        for (int64_t k = 0; k < shape_numel(s.shape); ++k)
            v[size_t(k)] += 0.1f * rng.normal(uint64_t(k));
        ps.upload(i, v.data());
    }
    m->setup(B, T, r);
    return m;
}

double rel_max_err(const float* a, const float* b, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
        err = std::max(err, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return scale > 0 ? err / scale : err;
}

constexpr int kLenA = 5, kLenB = 9, kPad = 4;
constexpr int kPackedT = kLenA + kLenB + kPad;  // one row: A | B | padding
constexpr int kSplitT = kLenB;                  // two rows: A + padding, B
constexpr int32_t kPadToken = 0;

// The two layouts of the same data. Targets are the next token inside a document; the last
// position of each document and all padding are ignored, so both layouts have the same 12 terms.
struct Batches {
    std::vector<int32_t> packed_in, packed_tgt, doc_start;  // (1, kPackedT)
    std::vector<int32_t> split_in, split_tgt;               // (2, kSplitT)
    int targets = 0;
};

Batches make_batches(int V) {
    std::vector<int32_t> a(kLenA), b(kLenB);
    for (int i = 0; i < kLenA; ++i) a[size_t(i)] = int32_t((i * 17 + 3) % V);
    for (int i = 0; i < kLenB; ++i) b[size_t(i)] = int32_t((i * 29 + 8) % V);
    auto targets_of = [](const std::vector<int32_t>& doc, int width) {
        std::vector<int32_t> t(size_t(width), kIgnoreIndex);
        for (size_t i = 0; i + 1 < doc.size(); ++i) t[i] = doc[i + 1];
        return t;
    };
    Batches x;
    std::vector<int32_t> ta = targets_of(a, kLenA), tb = targets_of(b, kLenB);
    x.packed_in = a;
    x.packed_in.insert(x.packed_in.end(), b.begin(), b.end());
    x.packed_in.insert(x.packed_in.end(), kPad, kPadToken);
    x.packed_tgt = ta;
    x.packed_tgt.insert(x.packed_tgt.end(), tb.begin(), tb.end());
    x.packed_tgt.insert(x.packed_tgt.end(), kPad, kIgnoreIndex);
    x.doc_start.assign(kLenA, 0);
    x.doc_start.insert(x.doc_start.end(), kLenB, kLenA);
    x.doc_start.insert(x.doc_start.end(), kPad, kLenA + kLenB);  // padding: a document of its own
    x.split_in = a;
    x.split_in.insert(x.split_in.end(), kSplitT - kLenA, kPadToken);
    x.split_in.insert(x.split_in.end(), b.begin(), b.end());
    x.split_tgt = targets_of(a, kSplitT);
    x.split_tgt.insert(x.split_tgt.end(), tb.begin(), tb.end());
    x.targets = kLenA - 1 + kLenB - 1;
    return x;
}

struct Case {
    Arch arch;
    const char* backend;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << arch_name(c.arch) << "/" << c.backend;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return arch_name(info.param.arch) + "_" + info.param.backend;
}

// Packed and split runs do the same per-row arithmetic; padding rows add exact zeros to every sum
// over rows. ref sums in a fixed order, so it matches to the last bit (1e-12 only to keep the
// check relative). cpu GEMMs block 1x18 and 2x9 rows differently and sum each weight gradient's
// 18 tokens in another order: two summation orders along the model's chain of reductions
// (decoder_chain: 2 layers, C = 40, head dim 10, T = 18, F = 56 or 160, V = 61, 18 tokens),
// within reorder_prob of it (numerics.h: 2.8e-5 for Llama), times √18 for the cancellation of
// a gradient's 18 per-token terms against the tensor's largest element. (Measured: 2.4e-8 with
// OpenBLAS's AVX-512 kernels, 1.3e-6 with its Haswell ones; the bound is 1.2e-4.) Without
// doc_start the summed loss moves by 0.8% (Llama) and 11% (GPT-2).
double tolerance(const char* backend, const ModelConfig& c) {
    if (std::string(backend) == "ref") return 1e-12;  // guarded runs the cpu kernels
    return testing::reorder_prob(testing::model_chain(c, kPackedT, kPackedT)) *
           std::sqrt(double(kPackedT));
}

class PackingTest : public ::testing::TestWithParam<Case> {
  protected:
    void SetUp() override {
        cfg_ = tiny_config(GetParam().arch);
        be_ = make_backend(GetParam().backend);
        x_ = make_batches(cfg_.vocab_size);
        d_scale_ = 1.0f / float(x_.targets);
        tol_ = tolerance(GetParam().backend, cfg_);
    }

    // Loss and gradients of the split layout (no doc_start), the reference for the packed one.
    std::unique_ptr<Transformer> run_split(double* loss) {
        auto m = make_model(cfg_, *be_, 2, kSplitT);
        *loss = m->forward_backward(x_.split_in.data(), x_.split_tgt.data(), 2, kSplitT, d_scale_);
        return m;
    }

    void expect_same_grads(Transformer& got, Transformer& want) {
        for (int i = 0; i < int(want.params().specs().size()); ++i) {
            const ParamSpec& s = want.params().specs()[size_t(i)];
            std::vector<float> g = got.params().download_grad(i);
            std::vector<float> w = want.params().download_grad(i);
            EXPECT_LE(rel_max_err(g.data(), w.data(), shape_numel(s.shape)), tol_) << s.name;
        }
    }

    ModelConfig cfg_;
    std::unique_ptr<Backend> be_;
    Batches x_;
    float d_scale_ = 0;
    double tol_ = 0;
};

// The key invariant: A | B | padding in one row with doc_start == A and B as separate rows.
TEST_P(PackingTest, PackedRowMatchesSeparateRows) {
    double split_loss = 0;
    auto split = run_split(&split_loss);
    auto packed = make_model(cfg_, *be_, 1, kPackedT);
    double loss = packed->forward_backward(x_.packed_in.data(), x_.packed_tgt.data(), 1, kPackedT,
                                           d_scale_, x_.doc_start.data());
    EXPECT_NEAR(loss, split_loss, tol_ * split_loss);
    expect_same_grads(*packed, *split);

    // Without doc_start, B attends to A (and, for GPT-2, sits at positions 5..13): another loss.
    auto leaky = make_model(cfg_, *be_, 1, kPackedT);
    double leaked =
        leaky->forward_loss(x_.packed_in.data(), x_.packed_tgt.data(), 1, kPackedT, nullptr);
    EXPECT_GT(std::abs(leaked - split_loss), 1e-3 * split_loss);
}

// Recompute re-runs each layer's forward in backward with the same doc_start: bit-identical to
// keeping the activations, and so equal to the split rows too.
TEST_P(PackingTest, PackedRowWithRecomputeFullMatches) {
    double split_loss = 0;
    auto split = run_split(&split_loss);
    auto kept = make_model(cfg_, *be_, 1, kPackedT, Recompute::None);
    auto recomputed = make_model(cfg_, *be_, 1, kPackedT, Recompute::Full);
    double lk = kept->forward_backward(x_.packed_in.data(), x_.packed_tgt.data(), 1, kPackedT,
                                       d_scale_, x_.doc_start.data());
    double lr = recomputed->forward_backward(x_.packed_in.data(), x_.packed_tgt.data(), 1, kPackedT,
                                             d_scale_, x_.doc_start.data());
    EXPECT_EQ(lr, lk);
    EXPECT_EQ(recomputed->params().download_grads(), kept->params().download_grads());
    EXPECT_NEAR(lr, split_loss, tol_ * split_loss);
    expect_same_grads(*recomputed, *split);
}

// forward_loss and forward_logits honour doc_start too: document B's logits in the packed row are
// those of B's own row, and the loss equals forward_backward's.
TEST_P(PackingTest, ForwardOnlyPathsMatchSeparateRows) {
    auto split = make_model(cfg_, *be_, 2, kSplitT);
    auto packed = make_model(cfg_, *be_, 1, kPackedT);
    const int V = cfg_.vocab_size;
    std::vector<float> split_logits(size_t(2) * kSplitT * V), logits(size_t(kPackedT) * V);
    split->forward_logits(x_.split_in.data(), 2, kSplitT, split_logits.data());
    packed->forward_logits(x_.packed_in.data(), 1, kPackedT, logits.data(), x_.doc_start.data());
    EXPECT_LE(rel_max_err(logits.data(), split_logits.data(), int64_t(kLenA) * V), tol_) << "A";
    EXPECT_LE(rel_max_err(logits.data() + size_t(kLenA) * V,
                          split_logits.data() + size_t(kSplitT) * V, int64_t(kLenB) * V),
              tol_)
        << "B";
    double split_loss = split->forward_loss(x_.split_in.data(), x_.split_tgt.data(), 2, kSplitT);
    double loss = packed->forward_loss(x_.packed_in.data(), x_.packed_tgt.data(), 1, kPackedT,
                                       x_.doc_start.data());
    EXPECT_NEAR(loss, split_loss, tol_ * split_loss);
}

// A bad doc_start throws before anything runs: no gradient is touched.
TEST_P(PackingTest, InvalidDocStartThrowsNamingRowAndPosition) {
    auto m = make_model(cfg_, *be_, 2, kSplitT);
    std::vector<int32_t> in(size_t(2) * kSplitT, 1), tgt(in.size(), 2);
    std::vector<int32_t> future(in.size(), 0), jump(in.size(), 0);
    future[size_t(kSplitT) + 3] = 6;  // row 1, position 3 claims a document starting at 6 > 3
    for (int t = 4; t < kSplitT; ++t) jump[size_t(t)] = 4;
    jump[7] = 2;  // row 0, position 7 jumps back inside the document that starts at 4
    EXPECT_EQ(error_of([&] {
                  m->forward_backward(in.data(), tgt.data(), 2, kSplitT, 1.0f, future.data());
              }),
              "doc_start[row 1, position 3] = 6: expected 0 (the document of position 2) or 3 (a "
              "new document)");
    EXPECT_EQ(error_of([&] { m->forward_loss(in.data(), tgt.data(), 2, kSplitT, jump.data()); }),
              "doc_start[row 0, position 7] = 2: expected 4 (the document of position 6) or 7 (a "
              "new document)");
    std::vector<float> logits(in.size() * size_t(cfg_.vocab_size));
    EXPECT_NE(
        error_of([&] { m->forward_logits(in.data(), 2, kSplitT, logits.data(), jump.data()); }),
        "<no error>");
    std::vector<float> g = m->params().download_grads();
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; }));
}

INSTANTIATE_TEST_SUITE_P(Models, PackingTest,
                         ::testing::Values(Case{Arch::Llama, "cpu"}, Case{Arch::GPT2, "cpu"},
                                           Case{Arch::Llama, "ref"}, Case{Arch::GPT2, "ref"},
                                           Case{Arch::Llama, "guarded"},
                                           Case{Arch::GPT2, "guarded"}, Case{Arch::Qwen2, "cpu"},
                                           Case{Arch::Mistral, "cpu"}, Case{Arch::Mistral, "ref"},
                                           Case{Arch::Qwen3, "cpu"}, Case{Arch::Gemma2, "cpu"},
                                           Case{Arch::Gemma3, "cpu"}, Case{Arch::Gemma2, "ref"},
                                           Case{Arch::Phi3, "cpu"}, Case{Arch::Phi3, "ref"}),
                         case_name);

}  // namespace packing_test
}  // namespace ete
