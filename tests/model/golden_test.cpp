// tests/model/golden_test.cpp — whole-model checks against PyTorch goldens.
//
// tests/golden/*.safetensors are written by tools/gen_model_goldens.py (plain-torch Llama and
// GPT-2 with HF semantics, maths in float64). Each file holds the HF config, the parameters in
// HF layout, one batch, and the expected logits, mean loss, every parameter gradient and a
// 10-step AdamW trajectory (losses and final weights). Every variant runs on the ref, cpu and
// guarded backends, and on cuda where a GPU is present (skipped elsewhere), with the cpu
// tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/io/safetensors.h"
#include "ete/model/config.h"
#include "ete/model/param_store.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"

namespace ete {
namespace {

using json = nlohmann::json;

// Tolerances, as max |ete - golden| / max |golden| over a tensor (|Δ| / |golden| for a scalar).
// The goldens are exact (float64) maths on the stored f32 weights, so these bound ETE's own f32
// rounding; measured worst cases (ref / cpu) are in the comments.
struct Tolerances {
    double logits, loss, grad;
};
// ref: plain f32 loops. Measured logits 1.6e-7, loss 5e-8, gradients 6.4e-7.
constexpr Tolerances kRefTol{2e-6, 1e-6, 1e-5};
// cpu: blocked GEMMs, SIMD reductions and approximate exp/tanh reorder and perturb every sum.
// Measured logits 3.5e-7, loss 4e-8, gradients 1.2e-6.
constexpr Tolerances kCpuTol{1e-5, 1e-5, 1e-4};

// The 10 AdamW steps amplify rounding the same way on both backends (measured: the weights of
// PyTorch's own f32 run of this trajectory deviate from the float64 golden as much as ETE's do),
// so one set:
// - losses: measured worst 1.2e-6 relative;
constexpr double kAdamWLossTol = 2e-5;
// - the update final - initial, relative to its max over the tensor, for elements whose initial
//   gradient is at least kWellConditioned x the tensor's max |grad|: measured worst 6e-4 (GPT-2
//   c_fc, where the trajectory itself is sensitive). A weight decay applied to the wrong group
//   would be off by 10 lr wd |p| = 5e-3 or more of the update for any bias, norm or matrix here.
constexpr double kUpdateTol = 2e-3;
constexpr double kWellConditioned = 1e-3;
// - other elements: Adam divides each gradient by its own RMS, so a gradient that is rounding
//   noise (GPT-2's key bias has an exactly zero gradient: softmax ignores a per-query shift)
//   still takes O(lr) steps in f32 and none in float64. Measured worst 4% of the tensor's update.
constexpr double kIllConditionedTol = 0.1;

// Names in a golden file that are not parameters.
const std::set<std::string> kDataNames = {"inputs", "targets", "logits", "loss", "adamw_losses"};

std::string golden_path(const std::string& variant) {
    return std::string(ETE_SOURCE_DIR) + "/tests/golden/" + variant + ".safetensors";
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
    Tensor t = f.to_f32(name);
    return std::vector<float>(t.f32(), t.f32() + t.numel());
}

// max |a - b| / max |b|: a tensor-wide relative error that does not blow up on tiny elements.
double rel_max_err(const float* a, const float* b, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
        err = std::max(err, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return scale > 0 ? err / scale : err;
}

// Error of an optimizer update (got - p0 vs want - p0) relative to max |want - p0|, split by
// whether the element's initial gradient g0 is well-conditioned for Adam (see kWellConditioned).
struct UpdateError {
    double well = 0, ill = 0;
};

UpdateError update_error(const float* got, const float* want, const float* p0, const float* g0,
                         int64_t n) {
    double scale = 0, g_max = 0;
    for (int64_t k = 0; k < n; ++k) {
        scale = std::max(scale, std::abs(double(want[k]) - p0[k]));
        g_max = std::max(g_max, std::abs(double(g0[k])));
    }
    if (scale == 0) scale = 1;  // nothing moved: compare absolute errors
    UpdateError e;
    for (int64_t k = 0; k < n; ++k) {
        double err = std::abs((double(got[k]) - p0[k]) - (double(want[k]) - p0[k])) / scale;
        double& slot = std::abs(double(g0[k])) >= kWellConditioned * g_max ? e.well : e.ill;
        slot = std::max(slot, err);
    }
    return e;
}

struct Case {
    std::string variant, backend;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.variant << "/" << c.backend;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return info.param.variant + "_" + info.param.backend;
}

class GoldenTest : public ::testing::TestWithParam<Case> {
  protected:
    void SetUp() override {
        if (GetParam().backend == "cuda" && !cuda_unavailable_reason().empty())
            GTEST_SKIP() << cuda_unavailable_reason();
        file_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(golden_path(variant())));
        const auto& meta = file_->metadata();
        ASSERT_TRUE(meta.count("config") && meta.count("adamw")) << "golden metadata";
        cfg_ = config_from_hf_json(json::parse(meta.at("config")), golden_path(variant()));
        adamw_ = json::parse(meta.at("adamw"));
        Tensor in = file_->to_tensor("inputs"), tg = file_->to_tensor("targets");
        ASSERT_EQ(in.ndim(), 2);
        ASSERT_EQ(in.shape(), tg.shape());
        B_ = int(in.dim(0));
        T_ = int(in.dim(1));
        inputs_.assign(in.i32(), in.i32() + in.numel());
        targets_.assign(tg.i32(), tg.i32() + tg.numel());
        count_ = int(std::count_if(targets_.begin(), targets_.end(),
                                   [](int32_t t) { return t != kIgnoreIndex; }));
        ASSERT_GT(count_, 0);
        ASSERT_LT(count_, B_ * T_) << "goldens should contain ignored targets";

        backend_ = make_backend(GetParam().backend);
        model_ = std::make_unique<Transformer>(cfg_, *backend_);
        model_->setup(B_, T_);
        store().from_host(load(""));
    }

    const std::string& variant() const { return GetParam().variant; }
    // The guarded backend runs the cpu kernels.
    const Tolerances& tol() const { return GetParam().backend == "ref" ? kRefTol : kCpuTol; }
    ParamStore& store() { return model_->params(); }

    // Copies `prefix + name` for every spec from the file into host params, HF -> ETE layout.
    void load_into(HostParams& dst, const std::string& prefix) {
        for (int i = 0; i < int(dst.specs().size()); ++i) {
            std::vector<float> v = read_f32(*file_, prefix + dst.specs()[size_t(i)].name);
            param_from_hf(dst, i, v.data());
        }
    }
    HostParams load(const std::string& prefix) {
        HostParams h(store().specs());
        load_into(h, prefix);
        return h;
    }

    double forward_backward_mean() {
        store().zero_grads();
        double sum =
            model_->forward_backward(inputs_.data(), targets_.data(), B_, T_, 1.0f / float(count_));
        return sum / count_;
    }

    std::unique_ptr<SafetensorsFile> file_;
    ModelConfig cfg_;
    json adamw_;
    int B_ = 0, T_ = 0, count_ = 0;
    std::vector<int32_t> inputs_, targets_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Transformer> model_;
};

// The file's parameter names and HF shapes are exactly the ParamSpec table, both ways, and so are
// its grad.* and final.* entries.
TEST_P(GoldenTest, ParamTableMatchesFile) {
    std::set<std::string> spec_names;
    for (const ParamSpec& s : store().specs()) {
        spec_names.insert(s.name);
        for (const char* prefix : {"", "grad.", "final."}) {
            ASSERT_TRUE(file_->has(prefix + s.name)) << prefix + s.name << " missing from file";
            const SafetensorsEntry& e = file_->info(prefix + s.name);
            EXPECT_EQ(e.dtype, DType::F32) << prefix + s.name;
            EXPECT_EQ(e.shape, hf_shape(s)) << prefix + s.name << " HF shape";
        }
    }
    for (const std::string& n : file_->names()) {
        if (kDataNames.count(n)) continue;
        std::string base = n.rfind("grad.", 0) == 0    ? n.substr(5)
                           : n.rfind("final.", 0) == 0 ? n.substr(6)
                                                       : n;
        EXPECT_TRUE(spec_names.count(base)) << "file tensor '" << n << "' is not in ParamSpec";
    }
    // The tied variants must not have a separate head; the untied one must.
    EXPECT_EQ(store().has("lm_head.weight"), cfg_.arch == Arch::Llama && !cfg_.tie_word_embeddings);
}

// The HF layout round trip: param_to_hf reproduces the file's bytes (covers the Conv1D transpose).
TEST_P(GoldenTest, ParamToHfRoundTrips) {
    HostParams h = store().to_host();
    for (int i = 0; i < int(store().specs().size()); ++i) {
        const ParamSpec& s = store().specs()[size_t(i)];
        std::vector<float> want = read_f32(*file_, s.name), got(want.size());
        param_to_hf(h, i, got.data());
        EXPECT_EQ(got, want) << s.name;
    }
}

TEST_P(GoldenTest, LogitsMatch) {
    int V = cfg_.vocab_size;
    std::vector<float> want = read_f32(*file_, "logits");
    ASSERT_EQ(file_->info("logits").shape, (Shape{B_, T_, V}));
    std::vector<float> got(want.size());
    model_->forward_logits(inputs_.data(), B_, T_, got.data());
    double err = rel_max_err(got.data(), want.data(), int64_t(got.size()));
    EXPECT_LE(err, tol().logits) << "logits";
    RecordProperty("logits_err", fmt::format("{:.3g}", err));
}

TEST_P(GoldenTest, LossAndEveryGradientMatch) {
    ASSERT_EQ(file_->info("loss").shape, Shape{});
    double want = read_f32(*file_, "loss")[0];
    double loss = forward_backward_mean();
    EXPECT_LE(std::abs(loss - want) / want, tol().loss) << "loss " << loss << " vs " << want;
    RecordProperty("loss_err", fmt::format("{:.3g}", std::abs(loss - want) / want));

    // forward_loss agrees with the training path.
    double fwd = model_->forward_loss(inputs_.data(), targets_.data(), B_, T_) / count_;
    EXPECT_LE(std::abs(fwd - want) / want, tol().loss) << "forward_loss";

    HostParams golden = load("grad.");
    double worst = 0;
    for (int i = 0; i < int(store().specs().size()); ++i) {
        const ParamSpec& s = store().specs()[size_t(i)];
        int64_t n = shape_numel(s.shape);
        std::vector<float> g = store().download_grad(i);
        double err = rel_max_err(g.data(), golden.param(i), n);
        EXPECT_LE(err, tol().grad) << "grad." << s.name;
        worst = std::max(worst, err);
    }
    RecordProperty("worst_grad_err", fmt::format("{:.3g}", worst));
}

TEST_P(GoldenTest, AdamWTrajectoryMatches) {
    AdamWConfig oc;
    oc.lr = adamw_.at("lr").get<double>();
    oc.beta1 = adamw_.at("beta1").get<double>();
    oc.beta2 = adamw_.at("beta2").get<double>();
    oc.eps = adamw_.at("eps").get<double>();
    oc.weight_decay = adamw_.at("weight_decay").get<double>();
    double clip = adamw_.at("clip_grad_norm").get<double>();
    int steps = adamw_.at("steps").get<int>();
    std::vector<float> want_losses = read_f32(*file_, "adamw_losses");
    ASSERT_EQ(int(want_losses.size()), steps);

    AdamW opt(store(), *backend_, oc);
    double worst_loss = 0;
    for (int s = 0; s < steps; ++s) {
        double loss = forward_backward_mean();
        double err = std::abs(loss - want_losses[size_t(s)]) / want_losses[size_t(s)];
        EXPECT_LE(err, kAdamWLossTol)
            << "step " << s << ": loss " << loss << " vs " << want_losses[size_t(s)];
        worst_loss = std::max(worst_loss, err);
        clip_grad_norm(store(), *backend_, clip);
        opt.step(oc.lr);
    }
    // The trajectory must actually have moved the loss, or the comparison proves little.
    EXPECT_LT(want_losses.back(), 0.5 * want_losses.front());

    HostParams initial = load(""), golden = load("final."), grad0 = load("grad.");
    HostParams got = store().to_host();
    UpdateError worst;
    for (int i = 0; i < int(store().specs().size()); ++i) {
        const ParamSpec& s = store().specs()[size_t(i)];
        UpdateError e = update_error(got.param(i), golden.param(i), initial.param(i),
                                     grad0.param(i), shape_numel(s.shape));
        EXPECT_LE(e.well, kUpdateTol) << "final." << s.name << " (update)";
        EXPECT_LE(e.ill, kIllConditionedTol) << "final." << s.name << " (update, tiny gradient)";
        worst.well = std::max(worst.well, e.well);
        worst.ill = std::max(worst.ill, e.ill);
    }
    RecordProperty("worst_adamw_loss_err", fmt::format("{:.3g}", worst_loss));
    RecordProperty("worst_update_err", fmt::format("{:.3g}", worst.well));
    RecordProperty("worst_ill_update_err", fmt::format("{:.3g}", worst.ill));
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest,
                         ::testing::Values(Case{"llama_gqa", "ref"}, Case{"llama_gqa", "cpu"},
                                           Case{"gpt2", "ref"}, Case{"gpt2", "cpu"},
                                           Case{"llama3_rope_tied", "ref"},
                                           Case{"llama3_rope_tied", "cpu"},
                                           Case{"llama_gqa", "guarded"}, Case{"gpt2", "guarded"},
                                           Case{"llama3_rope_tied", "guarded"},
                                           Case{"llama_gqa", "cuda"}, Case{"gpt2", "cuda"},
                                           Case{"llama3_rope_tied", "cuda"}),
                         case_name);

}  // namespace
}  // namespace ete
