// ete/cli/int8_commands.cpp — the integer model: `ete export int8` (from a QAT run) and
// `ete quantize --scheme w8a8|w4a8` (post-training calibration), both writing the int8 dir of
// io/int8_dir.h and checking it against the fake-quantized model it came from.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "ete/cli/commands.h"
#include "ete/core/log.h"
#include "ete/data/token_shard.h"
#include "ete/io/hf_model.h"
#include "ete/io/int8_dir.h"
#include "ete/io/peft.h"
#include "ete/model/lora_spec.h"
#include "ete/train/inference_model.h"

namespace ete {

namespace fs = std::filesystem;

namespace {

std::string file_in(const std::string& dir, const char* name) {
    const fs::path p = fs::path(dir) / name;
    return fs::exists(p) ? p.string() : "";
}

// B rows of T + 1 tokens of ids as inputs (the first T of each) and targets (the last T).
void split_rows(const std::vector<int32_t>& ids, int B, int T, std::vector<int32_t>& in,
                std::vector<int32_t>& tgt) {
    in.resize(size_t(B) * T);
    tgt.resize(in.size());
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            in[size_t(b) * T + t] = ids[size_t(b) * (T + 1) + t];
            tgt[size_t(b) * T + t] = ids[size_t(b) * (T + 1) + t + 1];
        }
}

// Mean loss of a model on B rows of T + 1 tokens of ids.
double mean_loss(Transformer& m, const std::vector<int32_t>& ids, int B, int T) {
    std::vector<int32_t> in, tgt;
    split_rows(ids, B, T, in, tgt);
    m.setup(B, T);
    return m.forward_loss(in.data(), tgt.data(), B, T) / double(B * T);
}

// The probe batch: from a shard when given, else deterministic ids.
std::vector<int32_t> probe_ids(const std::string& shard, int B, int T, int vocab) {
    std::vector<int32_t> ids(size_t(B) * (T + 1));
    if (!shard.empty()) {
        TokenShard s(shard);
        ETE_CHECK(s.size() >= ids.size(), "{}: holds {} tokens, a {}x{} probe needs {}", shard,
                  s.size(), B, T + 1, ids.size());
        s.read(0, ids.size(), ids.data());
        return ids;
    }
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % size_t(vocab));
    return ids;
}

// Loads what was written and compares its loss with the fake-quantized model's on the probe.
void check_written(Backend& be, Transformer& fake, const std::string& out, const Int8Model& m,
                   const std::vector<int32_t>& ids, int B, int T, const char* what) {
    std::unique_ptr<Transformer> int8 = load_int8_model(be, out);
    const double want = mean_loss(fake, ids, B, T), got = mean_loss(*int8, ids, B, T);
    std::printf(
        "%s -> %s: %zu weights in %d-bit integers (%.1f MiB) | probe loss %.6f, fake-quantized "
        "%.6f (relative difference %.2e) on %dx%d tokens\n",
        what, out.c_str(), m.weights.size(), m.spec.weight_bits,
        double(int8->int8_weight_bytes()) / (1 << 20), got, want,
        std::fabs(got - want) / std::max(std::fabs(want), 1e-30), B, T);
}

}  // namespace

namespace {

// The base dir and adapter dir (empty: a full QAT model) `ete export int8` reads: --model [with
// --adapter], or --run, whose final/ is a model dir or, for a run over LoRA, an adapter dir over
// the base its adapter_config.json names (as an adapter dir given as --model).
std::pair<std::string, std::string> export_sources(const ExportInt8Args& a) {
    ETE_CHECK(a.model_dir.empty() != a.run.empty(),
              "ete export int8: pass one of --model or --run");
    ETE_CHECK(a.run.empty() || a.adapter.empty(),
              "ete export int8: --adapter goes with --model BASE (--run finds its own adapter)");
    const std::string dir = a.run.empty() ? a.model_dir : (fs::path(a.run) / "final").string();
    return resolve_adapter_dir(dir, a.adapter);
}

// Every base weight as the run's QAT saw it (an NF4 base dequantized), in ETE layout.
HostParams base_values(const ModelConfig& cfg, const Transformer& model) {
    HostParams host(param_specs(cfg));
    const ParamStore& ps = model.params();
    for (int i = 0; i < host.size(); ++i) {
        const std::vector<float> v = ps.download(ps.index(host.specs()[size_t(i)].name));
        std::copy(v.begin(), v.end(), host.param(i));
    }
    return host;
}

}  // namespace

int cmd_export_int8(const ExportInt8Args& a) {
    const auto [dir, adapter] = export_sources(a);
    ETE_CHECK(fs::absolute(dir) != fs::absolute(a.out) &&
                  (adapter.empty() || fs::absolute(adapter) != fs::absolute(a.out)),
              "ete export int8: --out must differ from the model and the adapter");
    auto be = make_cpu_backend();
    const QatState st = read_qat_state(adapter.empty() ? dir : adapter);
    std::unique_ptr<Transformer> fake =
        load_fake_quant_model(*be, dir, adapter, a.allow_base_mismatch);
    const ModelConfig& cfg = fake->config();
    check_int8_spec(st.spec, cfg);
    HostParams host(param_specs(cfg));
    if (adapter.empty())
        load_hf_weights(dir, host);
    else
        host = base_values(cfg, *fake);
    const Int8Model m = make_int8_model(st.spec, cfg, host, *fake->qat());
    nlohmann::json source = {{"from", "qat"}, {"model", fs::absolute(dir).string()}};
    if (!adapter.empty()) source["adapter"] = fs::absolute(adapter).string();
    auto either = [&](const char* name) {
        const std::string f = adapter.empty() ? "" : file_in(adapter, name);
        return f.empty() ? file_in(dir, name) : f;
    };
    save_int8_model(a.out, cfg, host, m, source, either("tokenizer.json"),
                    either("generation_config.json"), adapter);
    const int T = std::min(cfg.max_position_embeddings, 64);
    check_written(*be, *fake, a.out, m, probe_ids(a.probe, 2, T, cfg.vocab_size), 2, T,
                  ("exported " + (adapter.empty() ? dir : dir + " + " + adapter)).c_str());
    return 0;
}

int cmd_quantize_int8(const QuantizeArgs& a) {
    const auto [model_dir, adapter] = resolve_adapter_dir(a.model_dir, a.adapter);
    ETE_CHECK(a.scheme == "w8a8" || a.scheme == "w4a8",
              "ete quantize --scheme {}: expected nf4, w8a8 or w4a8", a.scheme);
    ETE_CHECK(!a.calib.empty(),
              "ete quantize --scheme {}: --calib SHARD is required (the batches the activation "
              "observers calibrate on)",
              a.scheme);
    ETE_CHECK(a.calib_batches > 0 && a.batch > 0,
              "ete quantize: --calib-batches and --batch must be positive");
    ETE_CHECK(fs::absolute(model_dir) != fs::absolute(a.out) &&
                  (adapter.empty() || fs::absolute(adapter) != fs::absolute(a.out)),
              "ete quantize: --out must differ from --model and --adapter");
    QatSpec spec;
    spec.enabled = true;
    spec.points = {QatPoint::Weight, QatPoint::LinearIn};
    spec.weight_bits = a.scheme == "w4a8" ? 4 : 8;
    spec.weight_granularity =
        qat_granularity_from_name(a.weight_granularity, "--weight-granularity");
    spec.act_granularity = qat_granularity_from_name(a.act_granularity, "--act-granularity");
    spec.group_size = a.group_size;
    spec.observer = observer_kind_from_name(a.observer, "--observer");
    spec.skip_layers = qat_layers_from_string(a.skip_layers);
    spec.linears = split_comma_list(a.linears);
    spec.warmup_steps = std::numeric_limits<int32_t>::max();  // observe only, never fake-quantize
    auto be = make_cpu_backend();
    std::unique_ptr<Transformer> model =
        load_inference_model(*be, model_dir, adapter, a.allow_base_mismatch);
    ETE_CHECK(!model->int8(), "ete quantize: '{}' is already an integer model", model_dir);
    const ModelConfig cfg = model->config();
    check_int8_spec(spec, cfg);
    model->enable_qat(spec);
    const int B = a.batch, T = a.seq > 0 ? a.seq : std::min(cfg.max_position_embeddings, 256);
    TokenShard shard(a.calib);
    const uint64_t row = uint64_t(T) + 1, need = uint64_t(a.calib_batches) * uint64_t(B) * row;
    ETE_CHECK(shard.size() >= need, "--calib '{}': holds {} tokens, {} batches of {}x{} need {}",
              a.calib, shard.size(), a.calib_batches, B, T + 1, need);
    // Calibration: each batch's ranges fold into the observers, as a training step's would.
    std::vector<int32_t> ids(size_t(B) * row), in, tgt;
    model->setup(B, T);
    model->set_qat_calibration(true);
    QatRuntime& qat = *model->qat();
    for (int k = 0; k < a.calib_batches; ++k) {
        qat.begin_step(k);
        shard.read(uint64_t(k) * ids.size(), ids.size(), ids.data());
        split_rows(ids, B, T, in, tgt);
        model->forward_loss(in.data(), tgt.data(), B, T);
        qat.end_step(qat.step_ranges());
    }
    model->set_qat_calibration(false);
    HostParams host(param_specs(cfg));
    if (adapter.empty())
        load_hf_weights(model_dir, host);
    else
        host = base_values(cfg, *model);
    const Int8Model m = make_int8_model(spec, cfg, host, qat);
    nlohmann::json source = {{"from", "ptq"},
                             {"model", fs::absolute(model_dir).string()},
                             {"calib", fs::absolute(a.calib).string()},
                             {"calib_batches", a.calib_batches},
                             {"batch", B},
                             {"seq", T}};
    if (!adapter.empty()) source["adapter"] = fs::absolute(adapter).string();
    save_int8_model(a.out, cfg, host, m, source, file_in(model_dir, "tokenizer.json"),
                    file_in(model_dir, "generation_config.json"), adapter);
    // The same calibrated scales with fake quantization: what the integers must reproduce.
    qat.set_inference();
    check_written(*be, *model, a.out, m, ids, B, T,
                  ("quantized " + model_dir + (adapter.empty() ? "" : " + " + adapter) + " (" +
                   a.scheme + ")")
                      .c_str());
    return 0;
}

}  // namespace ete
