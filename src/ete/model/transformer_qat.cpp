// ete/model/transformer_qat.cpp — quantization-aware training in the Transformer: which linears
// read a fake-quantized weight, and the activation sites' forward and backward (the runtime is
// model/qat_runtime.h).
#include <algorithm>

#include "ete/model/transformer.h"

namespace ete {

// The learned scale factors of parameter p (qat.learnable_scale: its QatScale parameter), or
// none.
LearnedScale Transformer::qat_learned_scale(int p) {
    ParamStore& ps = params_;
    const ParamSpec& w = ps.specs()[size_t(p)];
    const std::string name = qat_scale_name(w.name);
    if (!ps.has(name)) return {};
    const int k = ps.index(name);
    const QatSpec& q = qat_->spec();
    const int64_t out = w.global_shape[0], in = w.global_shape[1];
    LearnedScale s;
    s.value = ps.master(k).flat();
    s.grad = ps.grad(k).flat();
    s.elements = q.weight_granularity == QatGranularity::Tensor  ? out * in
                 : q.weight_granularity == QatGranularity::Group ? q.group_size
                                                                 : in;
    const int P = mp_.tp_size, parts = w.shard.max_parts;
    s.replicas = w.shard.dim == 0 && parts > 0 && P > parts ? P / parts : 1;
    return s;
}

// ZeRO-3: the weight just added (qat_->num_weights() - 1), read from parameter p, is rewritten
// when p's group is gathered (zero3_acquire).
void Transformer::qat_zero3_track(int p) {
    if (zero3_) qat_zero3_weights_[size_t(params_.group_of(p))].push_back(qat_->num_weights() - 1);
}

// lin reads a buffer of its own holding fq(W) of the given parameters (its rows, in order):
// those whose role qat.linears chooses are quantized, the others copied.
void Transformer::qat_add_linear(Linear& lin, const std::vector<int>& params, TpMode mode) {
    ParamStore& ps = params_;
    const std::vector<ParamRole> chosen = linear_roles(qat_->spec().linears, cfg_.arch);
    auto is_chosen = [&](int p) {
        return std::find(chosen.begin(), chosen.end(), ps.specs()[size_t(p)].role) != chosen.end();
    };
    if (std::none_of(params.begin(), params.end(), is_chosen)) return;
    const int64_t out = lin.out(), in = lin.in();
    qat_weights_.emplace_back(be_, size_t(out * in) * dtype_size(act_));
    const Mat buf{qat_weights_.back().data(), act_, out, in};
    int64_t row = 0;
    for (int p : params) {
        if (ps.is_nf4(p)) {  // a QLoRA base: fq(dequant(W)), frozen
            const Nf4View& w = ps.nf4(p);
            qat_->add_nf4_weight(ps.specs()[size_t(p)].name, w, buf.row_slice(row, w.rows),
                                 is_chosen(p), mode == TpMode::Row);
            qat_zero3_track(p);
            row += w.rows;
            continue;
        }
        const bool trainable = ps.trainable(p);
        CMat src = trainable ? CMat(ps.master(p)) : ps.value(p);
        qat_->add_weight(ps.specs()[size_t(p)].name, src, buf.row_slice(row, src.rows),
                         trainable ? ps.grad(p) : Mat{}, is_chosen(p), mode == TpMode::Row,
                         qat_learned_scale(p));
        qat_zero3_track(p);
        row += src.rows;
    }
    ETE_ASSERT(row == out);
    lin.set_weight(buf);
}

void Transformer::enable_qat(const QatSpec& spec) {
    check_qat_spec(spec, cfg_);
    ETE_CHECK(slots_.empty(), "enable_qat: call it before setup");
    qat_ = std::make_unique<QatRuntime>(spec, be_, cfg_.arch, cfg_.num_layers, tp_host_);
    install_qat_hooks();
    if (!spec.has(QatPoint::Weight)) return;
    ParamStore& ps = params_;
    if (zero3_) {  // the weights are read from their group's window, right after its gather
        qat_->defer_weight_updates();
        ps.gather_masters_only();
        qat_zero3_weights_.assign(size_t(ps.num_groups()), {});
    }
    const bool split = !cfg_.family().fused_tensors();  // a tensor per member
    using R = ParamRole;
    for (int i = 0; i < int(layers_.size()); ++i) {
        const int l = mp_.layer_begin + i;
        if (!spec.quantizes_layer(l, cfg_.num_layers)) continue;
        DecoderLayer& L = layers_[size_t(i)];
        auto at = [&](R r) { return ps.find(r, l); };
        // A fused group over a trainable base is one Linear spanning its members.
        auto group = [&](FusedLinear& f, std::vector<R> roles) {
            if (f.size() == 1) {
                std::vector<int> params;
                for (R r : roles) params.push_back(at(r));
                qat_add_linear(f.part(0), params, TpMode::Column);
            } else {
                for (int k = 0; k < f.size(); ++k)
                    qat_add_linear(f.part(k), {at(roles[size_t(k)])}, TpMode::Column);
            }
        };
        group(L.qkv, split ? std::vector<R>{R::Q, R::K, R::V} : std::vector<R>{R::Qkv});
        qat_add_linear(L.o, {at(R::AttnOut)}, TpMode::Row);
        group(L.fc, split ? std::vector<R>{R::Gate, R::Up} : std::vector<R>{R::Fc});
        qat_add_linear(L.proj, {at(R::Down)}, TpMode::Row);
    }
    if (spec.quantizes_head() && mp_.last_stage()) qat_add_head();
}

// The LM head reads fq(W) of its real rows (under tp: this rank's vocabulary columns, the
// padding left out, so a per-tensor range reduced over tp is the whole head's). A tied head
// quantizes the embedding's values, while the lookup reads them as they are; its gradient
// passes the STE mask whole (range scales: every value lies inside the grid).
void Transformer::qat_add_head() {
    ParamStore& ps = params_;
    const int h = head_param();
    const int64_t out = head_.out(), in = head_.in();
    qat_weights_.emplace_back(be_, size_t(out * in) * dtype_size(act_));
    const Mat buf{qat_weights_.back().data(), act_, out, in};
    const bool trainable = ps.trainable(h);
    const CMat src = (trainable ? CMat(ps.master(h)) : ps.value(h)).row_slice(0, out);
    const Mat g = trainable ? ps.grad(h) : Mat{};  // none in a model that only runs forward
    const Mat grad = g.empty() ? Mat{} : g.row_slice(0, out);
    qat_->add_weight(kLmHeadName, src, buf, grad, true, false, qat_learned_scale(h));
    qat_zero3_track(h);
    head_.set_weight(buf);
}

// Site `site` of global layer l (the final norm: l = num_layers) on x (N, cols) in place; mask:
// the site's saved mask buffer (allocated whenever the site is on).
void Transformer::qat_forward(int site, int l, Mat x, Vec mask) {
    if (!qat_ || !qat_->site_on(site, l)) return;
    // The integer linears quantize their input; but where an adapter reads it too, it reads fq(x)
    // as in training, and an integer linear quantizing fq(x) gets q(x) back (static scales
    // exactly; per token up to a rounding tie).
    if (int8() && qat_->linear_in(site) && !site_adapted(site, l)) return;
    ETE_ASSERT(!mask.empty());
    qat_->act_forward(site, l, x, mask.slice(0, QatRuntime::mask_bytes(x.rows, x.cols)),
                      qat_train_);
}

// Each site is a hook on the module whose tensor it is: the norms' outputs (ln1, ln2, the final
// norm), o_proj's and down_proj's inputs and outputs, the residual stream after each add.
void Transformer::install_qat_hooks() {
    qat_hooks_.clear();
    auto hook = [&](int site, int l) -> const ActHook* {
        if (!qat_->site_on(site, l)) return nullptr;
        qat_hooks_.push_back(std::make_unique<QatHook>(*this, site, l));
        return qat_hooks_.back().get();
    };
    for (int i = 0; i < int(layers_.size()); ++i) {
        DecoderLayer& L = layers_[size_t(i)];
        const int l = mp_.layer_begin + i;
        L.ln1.set_output_hook(hook(kQatLn1, l));
        L.ln2.set_output_hook(hook(kQatLn2, l));
        L.o.set_hooks(hook(kQatAtt, l), hook(kQatAttnOut, l));
        L.proj.set_hooks(hook(kQatAct, l), hook(kQatFfnOut, l));
        L.resid_mid_hook = hook(kQatResidMid, l);
        L.resid_out_hook = hook(kQatResidOut, l);
    }
    if (mp_.last_stage()) final_norm_.set_output_hook(hook(kQatFinalNorm, cfg_.num_layers));
}

bool Transformer::site_adapted(int site, int l) const {
    if (site == kQatFinalNorm || l == cfg_.num_layers) return head_.has_adapter();
    const DecoderLayer& L = layers_[size_t(l - mp_.layer_begin)];
    auto any = [](const FusedLinear& f) {
        for (int k = 0; k < f.size(); ++k)
            if (f.part(k).has_adapter()) return true;
        return false;
    };
    switch (site) {
        case kQatLn1:
            return any(L.qkv);
        case kQatAtt:
            return L.o.has_adapter();
        case kQatLn2:
            return any(L.fc);
        case kQatAct:
            return L.proj.has_adapter();
        default:
            return false;
    }
}

void Transformer::qat_backward(int site, int l, Mat d_x, CVec mask, CMat d_y) const {
    if (!qat_ || !qat_->site_on(site, l)) return;
    qat_->act_backward(site, l, d_x, d_y.empty() ? CMat(d_x) : d_y,
                       mask.slice(0, QatRuntime::mask_bytes(d_x.rows, d_x.cols)));
}

size_t Transformer::qat_weight_bytes() const {
    size_t bytes = 0;
    for (const DeviceBuffer& b : qat_weights_) bytes += b.bytes();
    return bytes + (qat_ ? qat_->weight_bytes() : 0);
}

CMat Transformer::o_input(const LayerActs& s, int N) const {
    return s.att_q.empty() ? rows(s.att, N) : rows(s.att_q, N);
}

}  // namespace ete
