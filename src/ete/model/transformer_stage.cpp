// ete/model/transformer_stage.cpp — one pipeline stage of one micro-batch (stage_forward /
// stage_backward in a slot), and the whole-model calls built on the same two steps.
#include "ete/model/transformer.h"

namespace ete {

// The attention shape of a (B, T) batch on this rank's heads; validates the host doc_start once
// for the whole call (the slot's backend copy replaces it in run_forward).
AttnDims Transformer::attn_dims(int B, int T, const int32_t* doc_start) const {
    ETE_CHECK(B <= B_ && T <= T_, "batch ({}, {}) exceeds the set-up size ({}, {})", B, T, B_, T_);
    check_doc_start(doc_start, B, T);
    return AttnDims{B, T, H_, KV_, cfg_.D(), {}};
}

Transformer::Slot& Transformer::slot_at(int slot, const char* op) {
    ETE_CHECK(slot >= 0 && slot < int(slots_.size()),
              "{}: slot {} is outside the {} slot(s) set up for pipeline stage {}", op, slot,
              slots_.size(), mp_.stage);
    return slots_[size_t(slot)];
}

void Transformer::require_single_stage(const char* op) const {
    ETE_CHECK(mp_.num_stages == 1,
              "{} runs the whole model, but this is pipeline stage {} of {}: use "
              "stage_forward/stage_backward",
              op, mp_.stage, mp_.num_stages);
    ETE_CHECK(!slots_.empty(), "{}: the model was not set up (call setup first)", op);
}

// The forward of this stage for one micro-batch in slot s. On the last stage also the final norm
// and, unless targets is null (logits only), the loss, with `backward` the head's backward up to
// d_lnf (so the stage's backward starts at the final norm). Host inputs, targets, doc_start.
double Transformer::run_forward(Slot& s, AttnDims d, const int32_t* inputs, const int32_t* targets,
                                const int32_t* doc_start, float d_scale, bool backward) {
    const int N = d.B * d.T, V = cfg_.vocab_size;
    if (doc_start) {
        // Copied: backward (and recompute) read the positions again after the caller moved on.
        be_.upload(s.doc.data, doc_start, sizeof(int32_t) * size_t(N));
        d.doc_start = s.doc.slice(0, N);
    }
    ETE_CHECK(!backward || !params_.grads_released(),
              "a training forward after the gradients were released (training is over)");
    s.dims = d;
    s.pending = false;
    s.dropout = backward && lora_.dropout > 0.0f;
    qat_train_ = backward || qat_calibrate_;
    use_dropout_of(s);
    zero3_stale();
    if (zero_reduce_ && backward &&
        mp_.last_stage()) {  // the head's gradient accumulates from here
        zero3_zero_grad(head_group_.id);
        if (mp_.first_stage() && head_param() == params_.find(ParamRole::TokenEmbed))
            zero3_zero_grad(embed_group_.id);  // the tied embedding is the head
    }
    if (mp_.first_stage()) {
        zero3_acquire(embed_group_.id, embed_group_.id + 1);
        for (int i = 0; i < N; ++i) {
            ETE_CHECK(inputs[i] >= 0 && inputs[i] < V,
                      "token id {} at position {} is outside the vocabulary [0, {})", inputs[i], i,
                      V);
        }
        be_.upload(s.ids.data, inputs, sizeof(int32_t) * size_t(N));
        embed_forward(rows(s.resid[0], N), s.ids.slice(0, N), d);
    }
    const int Ls = int(layers_.size());
    for (int i = 0; i < Ls; ++i) {
        zero3_acquire(layer_groups_[size_t(i)].id, layer_groups_[size_t(i)].id + 1);
        layer_forward(i, acts(s, i), rows(s.resid[size_t(i)], N), rows(s.resid[size_t(i) + 1], N),
                      d, s.qat_kept[size_t(i)]);
    }
    double loss = 0;
    if (mp_.last_stage()) {
        zero3_acquire(head_group_.id, -1);
        final_norm_forward(s, N);
        if (!targets) return 0.0;
        loss = head_forward(s, targets, N, d_scale, backward);
    }
    s.pending = backward;
    return loss;
}

// Gradient groups are finished (padding masked, hook called) from the last to the first.
void Transformer::run_backward(Slot& s) {
    const AttnDims d = s.dims;
    const int N = d.B * d.T;
    use_dropout_of(s);  // a recomputed layer draws the forward's masks again
    Mat d_resid = rows(mp_.first_stage() ? d_resid_ : s.d_in, N);
    if (mp_.last_stage()) {
        zero3_acquire(head_group_.id, head_group_.id - 1);
        final_norm_backward(s, d_resid, N);
        finish_group(head_group_);
    } else {
        be_.copy(d_resid, rows(s.d_out, N));
    }
    for (int i = int(layers_.size()) - 1; i >= 0; --i) {
        zero3_acquire(layer_groups_[size_t(i)].id, layer_groups_[size_t(i)].id - 1);
        zero3_zero_grad(layer_groups_[size_t(i)].id);
        layer_backward(i, s, d_resid, d);
        finish_group(layer_groups_[size_t(i)]);
    }
    if (mp_.first_stage()) {
        zero3_acquire(embed_group_.id, -1);
        if (!(mp_.last_stage() && head_param() == params_.find(ParamRole::TokenEmbed)))
            zero3_zero_grad(embed_group_.id);  // (a tied head wrote its part in the forward)
        embed_backward(d_resid, s.ids.slice(0, N), d);
        finish_group(embed_group_);
    }
    s.pending = false;
}

double Transformer::stage_forward(int slot, const int32_t* inputs, const int32_t* targets,
                                  const int32_t* doc_start, float d_scale) {
    Slot& s = slot_at(slot, "stage_forward");
    ETE_CHECK(!s.pending, "stage_forward: slot {} of stage {} still waits for its stage_backward",
              slot, mp_.stage);
    ETE_CHECK(targets || !mp_.last_stage(), "stage_forward: the last stage needs targets");
    return run_forward(s, attn_dims(B_, T_, doc_start), inputs, targets, doc_start, d_scale,
                       d_scale != 0.0f);
}

void Transformer::stage_backward(int slot) {
    Slot& s = slot_at(slot, "stage_backward");
    ETE_CHECK(s.pending,
              "stage_backward: slot {} of stage {} has no stage_forward with a gradient to finish",
              slot, mp_.stage);
    run_backward(s);
}

void Transformer::set_micro_batch(int slot, int64_t step, int64_t first_sample) {
    Slot& s = slot_at(slot, "set_micro_batch");
    ETE_CHECK(!s.pending, "set_micro_batch: slot {} of stage {} still waits for its backward", slot,
              mp_.stage);
    ETE_CHECK(step >= 0 && first_sample >= 0, "set_micro_batch: step {}, first sample {}", step,
              first_sample);
    s.step = step;
    s.first_sample = first_sample;
}

void Transformer::use_dropout_of(const Slot& s) {
    drop_ = {s.dropout, s.step, uint64_t(s.first_sample) * uint64_t(s.dims.T)};
}

Mat Transformer::stage_input(int slot) {
    ETE_CHECK(!mp_.first_stage(), "stage_input: stage 0 reads token ids, not an activation");
    return slot_at(slot, "stage_input").resid.front();
}

Mat Transformer::stage_output(int slot) {
    ETE_CHECK(!mp_.last_stage(),
              "stage_output: the last stage ends in the loss, not an activation");
    return slot_at(slot, "stage_output").resid.back();
}

Mat Transformer::stage_output_grad(int slot) {
    ETE_CHECK(!mp_.last_stage(), "stage_output_grad: the last stage starts backward from its loss");
    return slot_at(slot, "stage_output_grad").d_out;
}

Mat Transformer::stage_input_grad(int slot) {
    ETE_CHECK(!mp_.first_stage(), "stage_input_grad: stage 0 has no input activation");
    return slot_at(slot, "stage_input_grad").d_in;
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                     float d_scale, const int32_t* doc_start) {
    require_single_stage("forward_backward");
    // One AttnDims (and so one doc_start) for the forward and every recomputed layer forward.
    Slot& s = slots_[0];
    double loss =
        run_forward(s, attn_dims(B, T, doc_start), inputs, targets, doc_start, d_scale, true);
    run_backward(s);
    return loss;
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T,
                                 const int32_t* doc_start) {
    require_single_stage("forward_loss");
    return run_forward(slots_[0], attn_dims(B, T, doc_start), inputs, targets, doc_start, 0.0f,
                       false);
}

void Transformer::forward_logits(const int32_t* inputs, int B, int T, float* logits,
                                 const int32_t* doc_start) {
    require_single_stage("forward_logits");
    Slot& s = slots_[0];
    run_forward(s, attn_dims(B, T, doc_start), inputs, nullptr, doc_start, 0.0f, false);
    logits_forward(s.lnf, B * T, logits);
}

}  // namespace ete
