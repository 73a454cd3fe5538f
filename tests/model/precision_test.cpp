// tests/model/precision_test.cpp — mixed precision against the PyTorch goldens: the tiny golden
// models trained in bf16 and fp16 (16-bit GEMM operands and saved activations, fp32 masters,
// gradients, statistics and optimizer) stay within tolerances derived from the 16-bit rounding
// unit of the fp32 golden, on the loss, on a layer's weight gradient and over 10 AdamW steps. The
// bf16 cases run on the GPU too where there is one (the "cuda" cases; skipped elsewhere).
//
// The tolerances, from the rounding unit u of the format (a value rounded to p significant bits
// is off by at most u = 2^-p relative: bf16 p = 8, u = 3.9e-3; fp16 p = 11, u = 4.9e-4):
// - loss: u/2. The mean over the tokens averages their independent errors, and the softmax
//   cancels the part common to a row's logits. Measured <= 1.4e-4 (bf16), 1.7e-5 (fp16).
// - a weight gradient, against its tensor's largest: gamma_prob(R, u) (numerics.h), R = 2·(5·L + 4)
//   the 16-bit roundings along its chain: 5·L + 4 from the embedding to a logit (per layer: norm
//   output, q|k|v, attention output, activation input and output; then the final norm, and the
//   weights), and as many again for the gradients' 16-bit GEMM operands on the way back. A
//   gradient sums products of rounded activations and rounded gradients, whose independent
//   errors add like sqrt(R): 0.13 (bf16), 0.016 (fp16) for L = 2. Measured <= 0.0127 (bf16),
//   0.0024 (fp16) under every kernel choice; a wrong term moves a gradient by O(1).
// - the loss after s AdamW steps: (s + 1)·u. Not a rounding bound but a training-dynamics one:
//   each step's update carries its gradient's 16-bit noise (~1% in bf16) into the weights, and
//   how much the later losses move depends on the trajectory. (A rounding estimate, the loss's
//   fall off by 2·gamma_prob(R, u) of itself, allows over 100% in bf16.) It catches a 16-bit path
//   that drifts (16-bit master weights, a broken scaler). Measured <= 0.74 of it at steps 4-5
//   for llama3_rope_tied (bf16 and fp16), <= 0.33 for the others.
//
// bf16 is also compared with PyTorch's own bf16 training of the same model (<variant>.bf16:
// torch.autocast on CPU with fp32 masters, tools/gen_model_goldens.py). PyTorch's run rounds at
// no more places than ETE's (its residual stream stays fp32), so each of the two lies within the
// bounds above of the fp32 golden and they lie within twice those of each other: loss u, every
// weight gradient 2·gamma_prob(R, u) of its tensor's largest, the AdamW losses 2·(s + 1)·u.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"
#include "numerics.h"

namespace ete {
namespace precision_test {

using json = nlohmann::json;

std::string golden_path(const std::string& variant) {
    return std::string(ETE_SOURCE_DIR) + "/tests/golden/" + variant + ".safetensors";
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
    Tensor t = f.to_f32(name);
    return std::vector<float>(t.f32(), t.f32() + t.numel());
}

double rounding_unit(DType t) {
    return t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

struct Case {
    std::string variant;
    DType dtype;
    std::string backend = "cpu";  // "cuda": on a GPU (tools/gpu_check.sh), skipped elsewhere
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
    return i.param.variant + (i.param.dtype == DType::BF16 ? "_bf16" : "_fp16") +
           (i.param.backend == "cpu" ? "" : "_" + i.param.backend);
}

class Precision : public ::testing::TestWithParam<Case> {
  protected:
    void SetUp() override {
        if (GetParam().backend == "cuda" && !cuda_unavailable_reason().empty())
            GTEST_SKIP() << cuda_unavailable_reason();
        file_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(golden_path(variant())));
        cfg_ = config_from_hf_json(json::parse(file_->metadata().at("config")), "golden");
        adamw_ = json::parse(file_->metadata().at("adamw"));
        Tensor in = file_->to_tensor("inputs"), tg = file_->to_tensor("targets");
        B_ = int(in.dim(0));
        T_ = int(in.dim(1));
        inputs_.assign(in.i32(), in.i32() + in.numel());
        targets_.assign(tg.i32(), tg.i32() + tg.numel());
        for (int32_t t : targets_) count_ += t != kIgnoreIndex;
        be_ = make_backend(GetParam().backend);
        model_ = std::make_unique<Transformer>(cfg_, *be_, ModelParallel{}, GetParam().dtype);
        model_->setup(B_, T_);
        HostParams h(model_->params().specs());
        for (int i = 0; i < h.size(); ++i) {
            std::vector<float> v = read_f32(*file_, h.specs()[size_t(i)].name);
            param_from_hf(h, i, v.data());
        }
        model_->params().from_host(h);
    }
    const std::string& variant() const { return GetParam().variant; }
    double u() const { return rounding_unit(GetParam().dtype); }
    // gamma_prob(R, u) with R = 2·(5·L + 4) 16-bit roundings (see the file header).
    double grad_tolerance() const {
        return testing::gamma_prob(2.0 * (5.0 * cfg_.num_layers + 4.0), u());
    }
    double loss() {
        model_->params().zero_grads();
        return model_->forward_backward(inputs_.data(), targets_.data(), B_, T_,
                                        1.0f / float(count_)) /
               count_;
    }
    // The loss before each of the golden's AdamW steps (same batch every step, as the script).
    std::vector<double> adamw_losses(size_t steps) {
        AdamWConfig oc;
        oc.lr = adamw_.at("lr").get<double>();
        oc.beta1 = adamw_.at("beta1").get<double>();
        oc.beta2 = adamw_.at("beta2").get<double>();
        oc.eps = adamw_.at("eps").get<double>();
        oc.weight_decay = adamw_.at("weight_decay").get<double>();
        const double clip = adamw_.at("clip_grad_norm").get<double>();
        AdamW opt(model_->params(), *be_, oc);
        std::vector<double> out;
        for (size_t s = 0; s < steps; ++s) {
            out.push_back(loss());
            clip_grad_norm(model_->params(), *be_, clip);
            opt.step(oc.lr);
        }
        return out;
    }
    // max |g - want| / max |ref| over a parameter's gradient, the goldens in HF layout.
    double grad_error(int i, const std::vector<float>& want_hf, const std::vector<float>& ref_hf) {
        const ParamStore& ps = model_->params();
        std::vector<float> g = ps.download_grad(i), want(g.size()), ref(g.size());
        const ParamSpec& spec = ps.specs()[size_t(i)];
        param_from_hf(spec, want_hf.data(), want.data());
        param_from_hf(spec, ref_hf.data(), ref.data());
        double e = 0, scale = 0;
        for (size_t k = 0; k < g.size(); ++k) {
            e = std::max(e, std::abs(double(g[k]) - want[k]));
            scale = std::max(scale, std::abs(double(ref[k])));
        }
        return e / scale;
    }

    std::unique_ptr<SafetensorsFile> file_;
    ModelConfig cfg_;
    json adamw_;
    int B_ = 0, T_ = 0, count_ = 0;
    std::vector<int32_t> inputs_, targets_;
    std::unique_ptr<Backend> be_;
    std::unique_ptr<Transformer> model_;
};

// The loss, and the weight gradient of the first layer's q|k|v (or c_attn) and of the last
// layer's down projection, against the fp32 golden.
TEST_P(Precision, LossAndLayerGradientsNearTheFp32Golden) {
    const double want = read_f32(*file_, "loss")[0];
    const double got = loss();
    const double err = std::abs(got - want) / want;
    EXPECT_LE(err, u() / 2) << "loss " << got << " vs " << want;
    RecordProperty("loss_err", fmt::format("{:.3g}", err));
    // The 16-bit path really rounds: the same weights in fp32 give another loss.
    Transformer f32(cfg_, *be_);
    f32.setup(B_, T_);
    f32.params().from_host(model_->params().to_host());
    EXPECT_NE(f32.forward_loss(inputs_.data(), targets_.data(), B_, T_) / count_, got);
    EXPECT_EQ(model_->params().weight(0).dtype, GetParam().dtype);
    const ParamStore& ps = model_->params();
    for (int i : {ps.find(cfg_.family().layout == Layout::Llama ? ParamRole::Q : ParamRole::Qkv, 0),
                  ps.find(ParamRole::Down, cfg_.num_layers - 1)}) {
        const std::string& name = ps.specs()[size_t(i)].name;
        const std::vector<float> gold = read_f32(*file_, "grad." + name);
        const double e = grad_error(i, gold, gold);
        EXPECT_LE(e, grad_tolerance()) << name;
        RecordProperty("grad_err_" + name, fmt::format("{:.3g}", e));
    }
}

// bf16 against PyTorch's bf16 autocast training of the same model: the loss, every weight
// gradient and the ten AdamW losses (bounds in the file header).
TEST_P(Precision, Bf16AgreesWithPyTorchAutocast) {
    if (GetParam().dtype != DType::BF16) GTEST_SKIP() << "the PyTorch goldens are bf16";
    const SafetensorsFile pt = SafetensorsFile::open(golden_path(variant() + ".bf16"));
    const double fp32 = read_f32(*file_, "loss")[0], torch_loss = read_f32(pt, "loss")[0];
    const double got = loss();
    EXPECT_LE(std::abs(got - torch_loss) / fp32, u()) << got << " vs PyTorch " << torch_loss;
    EXPECT_NE(torch_loss, fp32);  // PyTorch's run rounds too
    RecordProperty("loss_err_ete_fp32", fmt::format("{:.3g}", std::abs(got - fp32) / fp32));
    RecordProperty("loss_err_torch_fp32",
                   fmt::format("{:.3g}", std::abs(torch_loss - fp32) / fp32));
    const ParamStore& ps = model_->params();
    double worst = 0;
    for (int i = 0; i < ps.size(); ++i) {
        const std::string& name = ps.specs()[size_t(i)].name;
        const double e =
            grad_error(i, read_f32(pt, "grad." + name), read_f32(*file_, "grad." + name));
        EXPECT_LE(e, 2 * grad_tolerance()) << name;
        worst = std::max(worst, e);
    }
    RecordProperty("worst_grad_err_torch", fmt::format("{:.3g}", worst));
    const std::vector<float> want = read_f32(pt, "adamw_losses"),
                             ref = read_f32(*file_, "adamw_losses");
    const std::vector<double> losses = adamw_losses(want.size());
    for (size_t s = 0; s < want.size(); ++s)
        EXPECT_LE(std::abs(losses[s] - want[s]) / ref[s], 2 * u() * double(s + 1)) << "step " << s;
}

// Ten AdamW steps: every loss stays near the fp32 golden trajectory, within (s + 1)·u.
TEST_P(Precision, TenAdamWStepsFollowTheGolden) {
    // Gemma 3 in bf16 is held to PyTorch's bf16 trajectory (Bf16AgreesWithPyTorchAutocast), not
    // to this heuristic one: its loss and gradients lie within their rounding bounds (loss 0.12 of
    // u/2), but its trajectory reaches 1.15x the bound at step 3, back to 0.38x at step 9. Its q/k
    // norms' outputs are rounded to bf16 before RoPE (PyTorch's autocast keeps them fp32), two
    // more roundings on every attention score of three layers than the other families have.
    if (variant() == "gemma3_local_global" && GetParam().dtype == DType::BF16)
        GTEST_SKIP() << "bf16 Gemma 3 follows PyTorch's bf16 trajectory instead";
    const std::vector<float> want = read_f32(*file_, "adamw_losses");
    const std::vector<double> losses = adamw_losses(want.size());
    double worst = 0;
    for (size_t s = 0; s < want.size(); ++s) {
        const double err = std::abs(losses[s] - want[s]) / want[s];
        EXPECT_LE(err, u() * double(s + 1)) << "step " << s;
        worst = std::max(worst, err);
    }
    EXPECT_LT(want.back(), 0.5 * want.front());  // the trajectory learns
    RecordProperty("worst_adamw_loss_err", fmt::format("{:.3g}", worst));
}

INSTANTIATE_TEST_SUITE_P(
    Goldens, Precision,
    ::testing::Values(Case{"llama_gqa", DType::BF16}, Case{"gpt2", DType::BF16},
                      Case{"llama3_rope_tied", DType::BF16}, Case{"llama_gqa", DType::F16},
                      Case{"gpt2", DType::F16}, Case{"llama3_rope_tied", DType::F16},
                      Case{"qwen2_bias", DType::BF16}, Case{"mistral_window", DType::BF16},
                      Case{"qwen2_bias", DType::F16}, Case{"mistral_window", DType::F16},
                      Case{"qwen3_qk_norm", DType::BF16}, Case{"qwen3_qk_norm", DType::F16},
                      Case{"gemma2_softcap", DType::BF16}, Case{"gemma3_local_global", DType::F16},
                      Case{"gemma3_local_global", DType::BF16}, Case{"phi3_longrope", DType::BF16},
                      Case{"llama_gqa", DType::BF16, "cuda"}, Case{"gpt2", DType::BF16, "cuda"},
                      Case{"llama3_rope_tied", DType::BF16, "cuda"}),
    case_name);

}  // namespace precision_test
}  // namespace ete
