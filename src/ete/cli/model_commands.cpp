// ete/cli/model_commands.cpp — `ete quantize` and `ete export merged`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/cli/commands.h"
#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/io/bnb_nf4.h"
#include "ete/io/hf_model.h"
#include "ete/io/peft.h"
#include "ete/io/safetensors.h"
#include "ete/train/inference_model.h"

namespace ete {

namespace fs = std::filesystem;

int cmd_quantize(const QuantizeArgs& a) {
    if (a.scheme == "w8a8" || a.scheme == "w4a8") return cmd_quantize_int8(a);
    ETE_CHECK(a.scheme == "nf4", "ete quantize --scheme {}: expected nf4, w8a8 or w4a8", a.scheme);
    ETE_CHECK(a.calib.empty(), "ete quantize --calib: only the w8a8 and w4a8 schemes calibrate");
    ETE_CHECK(a.adapter.empty(),
              "ete quantize --adapter: only the w8a8 and w4a8 schemes keep an adapter (merge it "
              "first with ete export merged)");
    const double bits = quantize_model_dir(a.model_dir, a.out, {a.blocksize, a.double_quant});
    std::printf(
        "quantized %s -> %s: nf4, block %d, double quant %s | %.4f bits per quantized "
        "parameter\n",
        a.model_dir.c_str(), a.out.c_str(), a.blocksize, a.double_quant ? "on" : "off", bits);
    return 0;
}

namespace {

bool is_quantized_dir(const std::string& dir) {
    const auto j = read_json_file((fs::path(dir) / "config.json").string());
    return j.contains("quantization_config");
}

// W += scale · B[:, :r] · A[:r, :] for every adapter of `lora` (ETE layout, in double).
int merge_adapters(Transformer& lora, HostParams& merged) {
    const ParamStore& ps = lora.params();
    int n = 0;
    for (int l = 0; l < lora.config().num_layers; ++l) {
        for (auto [lin, ia] : lora.adapted_linears(l)) {
            const ParamSpec& sa = ps.specs()[size_t(ia)];
            const std::string module = sa.name.substr(0, sa.name.rfind(".lora_A"));
            const int ib = ps.index(module + ".lora_B.weight");
            const std::vector<float> A = ps.download(ia), B = ps.download(ib);
            const int64_t R = sa.shape[0], in = sa.shape[1];
            const int64_t out = ps.specs()[size_t(ib)].shape[0], r = lin->adapter().rank;
            const double scale = lin->adapter().scale;
            float* w = merged.param(module + ".weight");
            for (int64_t o = 0; o < out; ++o)
                for (int64_t i = 0; i < in; ++i) {
                    double d = 0;
                    for (int64_t k = 0; k < r; ++k)
                        d += double(B[size_t(o * R + k)]) * double(A[size_t(k * in + i)]);
                    w[o * in + i] = float(double(w[o * in + i]) + scale * d);
                }
            // Finite adapters (checked on load) can still overflow float here: nothing is saved.
            const int64_t bad = first_non_finite(w, out * in);
            ETE_CHECK(bad == out * in,
                      "export merged: '{}' + its adapter overflows to {} at element {}: the "
                      "adapter's values are too large to merge; nothing written",
                      module + ".weight", w[bad], bad);
            ++n;
        }
    }
    return n;
}

// max |a - b| and max |b|.
std::pair<double, double> drift(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0, m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
        m = std::max(m, std::fabs(double(b[i])));
    }
    return {d, m};
}

}  // namespace

int cmd_export_merged(const ExportMergedArgs& a) {
    ETE_CHECK(a.dtype != "nf4",
              "ete export merged --dtype nf4: merging into NF4 is refused. Re-quantizing W + ΔW "
              "rounds the adapter's small update away (QLoRA merges into 4 bits lose several "
              "points of quality); export f32 or bf16 and run the merged model in that, or keep "
              "base + adapter");
    ETE_CHECK(a.dtype == "f32" || a.dtype == "bf16",
              "ete export merged --dtype {}: expected f32 "
              "or bf16",
              a.dtype);
    const DType dtype = a.dtype == "bf16" ? DType::BF16 : DType::F32;
    auto be = make_cpu_backend();
    // Base + adapter, as trained (for a QLoRA adapter the base in NF4).
    std::unique_ptr<Transformer> lora =
        load_inference_model(*be, a.model_dir, a.adapter, a.allow_base_mismatch);
    const ModelConfig& cfg = lora->config();
    // The weights to merge into: dequant(NF4) when the base given is quantized (what the
    // adapter was trained against), else the base's own full-precision weights.
    HostParams merged(param_specs(cfg));
    load_hf_weights(a.model_dir, merged);
    const int n = merge_adapters(*lora, merged);
    if (dtype == DType::BF16)  // measure the model as it will be read back
        for (int64_t k = 0; k < merged.numel(); ++k)
            merged.data()[k] = bf16_to_f32(f32_to_bf16(merged.data()[k]));
    const fs::path tok = fs::path(a.model_dir) / "tokenizer.json";
    save_hf_model(a.out, cfg, merged, fs::exists(tok) ? tok.string() : "", kDefaultMaxShardBytes,
                  dtype);
    // Drift on a fixed probe batch: the merged model against base + adapter.
    Transformer plain(cfg, *be);
    plain.params().from_host(merged);
    const int B = 2, T = std::min(32, cfg.max_position_embeddings);
    std::vector<int32_t> ids(size_t(B * T));
    for (size_t i = 0; i < ids.size(); ++i)
        ids[i] = int32_t((i * 7919 + 13) % size_t(cfg.vocab_size));
    std::vector<float> want(ids.size() * size_t(cfg.vocab_size)), got(want.size());
    lora->setup(B, T);
    plain.setup(B, T);
    lora->forward_logits(ids.data(), B, T, want.data());
    plain.forward_logits(ids.data(), B, T, got.data());
    const auto [d, m] = drift(got, want);
    std::printf(
        "merged %d adapters into the %s base -> %s (%s) | drift: max |Δlogit| = %.3g "
        "(max |logit| %.3g) on a %dx%d probe batch against base + adapter\n",
        n, is_quantized_dir(a.model_dir) ? "dequantized NF4" : "full-precision", a.out.c_str(),
        a.dtype.c_str(), d, m, B, T);
    return 0;
}

}  // namespace ete
