// ete/model/qat_runtime.h — quantization-aware training inside a Transformer (model/qat_spec.h,
// DESIGN.md §6): the fake-quantized weights, and the activation points' observers, scales and
// saved straight-through masks.
//
// Weights. A chosen linear of a quantized layer reads fq(W) from a buffer of its own in the
// compute dtype, rewritten at the start of every step (begin_step) from the fp32 weight, one HF
// tensor at a time: symmetric, with scales per output channel, per tensor or per group from the
// weight's current range (as torchao's QAT: weights need no history), reduced over tp where a
// channel or the tensor is split across ranks. The step's backward accumulates the gradient of
// fq(W); with learned scales finish_grads masks it once (the mask is constant over a step, so
// masking the sum of the micro-batches equals masking each). With the range's own scales every
// finite weight lies inside the grid, so the mask is all ones and is neither written nor applied.
// Before qat.warmup_steps the buffer holds W itself.
//
// Activations. A point fake-quantizes a tensor in place (the affine act_bits grid): per tensor
// with the scale of its observer, or per token (dynamic, scales from each row). Every forward of
// a training step adds its batch range to the step's range of that point (min and max, so a
// recomputed forward changes nothing); end_step folds the step's range — reduced over every rank
// by the caller, each rank contributing the layers it holds — into the observers. So every rank
// keeps every layer's observers, identical everywhere whatever the layout (what a checkpoint
// saves and a resume restores), and a step's scales come from the observations of the steps
// before it. Masks live in each micro-batch's saved activations.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/device_memory.h"
#include "ete/model/qat_spec.h"
#include "ete/parallel/communicator.h"
#include "ete/quant/observer.h"

namespace ete {

// The activation tensors a layer can fake-quantize (their points: model/qat_spec.h).
// The first kQatRecomputedSites live in a layer's saved activations (a recomputed layer
// recomputes their masks); the others' masks are kept per micro-batch.
enum QatSite {
    kQatLn1 = 0,   // attention norm output = q|k|v input (post_norm, linear_in)
    kQatAtt,       // attention output = o_proj input (linear_in)
    kQatLn2,       // MLP norm output = gate|up / c_fc input (post_norm, linear_in)
    kQatAct,       // MLP activation = down projection input (linear_in)
    kQatAttnOut,   // o_proj output, before the residual add (attn_out)
    kQatFfnOut,    // down projection output, before the residual add (ffn_out)
    kQatResidMid,  // the residual stream after the attention add (residual)
    kQatResidOut,  // the layer's output, after the MLP add (residual)
    kQatSites,
    kQatRecomputedSites = kQatAttnOut,
    kQatFinalNorm = kQatSites,  // the final norm's output (post_norm), one per model
};

// A weight's learned scales (qat.learnable_scale). Each scale is s = m · r, r the scale of the
// weight's current range (what min/max QAT uses) and m a trained factor starting at 1: LSQ's
// gradient (core/fake_quant.h's lsq_scale_slope, times 1/√(elements · qmax)) reaches m through r.
// Learning the factor rather than s itself keeps the step scale-free (AdamW moves a parameter
// by about lr a step whatever its size: a factor by lr relative, a scale of 1e-4 by far more than
// itself), as OmniQuant's learnable weight clipping does.
// The view: its QatScale parameter's master and gradient (this rank's rows of it), the elements
// each scale covers in the whole tensor, and how many tp ranks hold each row (a kv head
// replicated when tp exceeds the kv heads: a sum over tp counts it that often).
inline constexpr float kMinScaleFactor = 1e-3f;  // a scale 1000x below its range's, at least
struct LearnedScale {
    Vec value, grad;
    int64_t elements = 0;
    int replicas = 1;
    bool empty() const { return value.empty(); }
};

class QatRuntime {
  public:
    // layers: the model's global layer count; tp: the tp group (host buffers) or null.
    QatRuntime(const QatSpec& spec, Backend& be, Arch arch, int layers, Communicator* tp);

    const QatSpec& spec() const { return spec_; }
    bool fake_quant_on() const { return fq_on_; }
    // Whether site s of global layer l (or the final norm, l = layers) fake-quantizes at all.
    bool site_on(int s, int l) const;

    // --- weights ---
    // One HF tensor: src (rows, cols) its fp32 master or frozen value, dst the rows of the
    // linear's fq(W) buffer it fills, grad its gradient rows (empty = frozen). quantize = false:
    // dst is a plain copy (a member of a fused group that qat.linears does not choose).
    // split_cols: the columns are split over tp (a row-parallel linear).
    // learned: its scales are trained (LSQ; grad must not be empty): finish_grads writes their
    // factors' gradient; each factor is kept at least kMinScaleFactor.
    void add_weight(const std::string& name, CMat src, Mat dst, Mat grad, bool quantize,
                    bool split_cols, const LearnedScale& learned = {});
    // The same for a frozen NF4 weight (QAT over a QLoRA base: fq(dequant(W))): it is
    // dequantized into a dense buffer of dst's dtype whenever dst is rewritten (the view is read
    // then, so weights loaded after this call are seen).
    void add_nf4_weight(const std::string& name, const Nf4View& w, Mat dst, bool quantize,
                        bool split_cols);
    // Backend bytes the runtime holds for weights (an NF4 weight's dense copy, scales, masks).
    size_t weight_bytes() const;
    // Sets the phase of a step (0-based) and rewrites every fq(W) buffer — or, with deferred
    // rewrites, marks them stale for update_weights.
    void begin_step(int64_t step);
    // ZeRO-3: the weights' sources are readable only while their group's window holds them, so
    // begin_step leaves the rewrites to update_weights, which the model calls with a group's
    // weights (indices in the order added: num_weights() before each add) right after it
    // gathers the group; each is rewritten once after begin_step.
    void defer_weight_updates() { deferred_ = true; }
    int num_weights() const { return int(weights_.size()); }
    void update_weights(const std::vector<int>& which);
    // Masks each quantized trainable weight's gradient (after the step's backward and sync),
    // first writing its learned scales' gradient from it (summed over tp where a scale spans
    // ranks).
    void finish_grads();
    // A weight's learned scale factors as given (a finished run's, global = local on one
    // process: what evaluating or exporting its final model uses).
    void set_weight_scale_factors(const std::string& name, std::vector<float> factors);
    // The scales a weight with given factors was last rewritten with (empty if it has none).
    std::vector<float> weight_scales(const std::string& name) const;

    // --- activations ---
    // x (N, cols) in place at site s of global layer l. train: observe and keep the mask (mask:
    // U8 of fake_quant_mask_bytes(N, cols)); otherwise (evaluation) only fake-quantize.
    // split: the columns are split over tp (the step range is reduced there by the caller).
    void act_forward(int s, int l, Mat x, Vec mask, bool train);
    // d_x (N, cols) = d_y through the straight-through mask of that forward (d_y may be d_x).
    void act_backward(int s, int l, Mat d_x, CMat d_y, CVec mask) const;
    // Bytes of one site's mask for N rows of `cols`.
    static int64_t mask_bytes(int64_t N, int64_t cols) { return fake_quant_mask_bytes(N, cols); }

    // The step's ranges of every static point of every layer, packed for one MIN all-reduce:
    // [lo..., -hi...]; +inf for what this rank did not observe.
    std::vector<float> step_ranges() const;
    // Folds the reduced step ranges into the observers (when the step observes) and sets the
    // scales for the next step; clears the step ranges.
    void end_step(const std::vector<float>& reduced);

    // The observers, for a checkpoint (JSON: one array per point) and its resume.
    nlohmann::json state() const;
    void restore(const nlohmann::json& state, const std::string& what);

    // --- inference (the fake-quant model, and the int8 model's other points) ---
    // Fake quantization on (weights rewritten) with the scales as they stand, observers off,
    // for good.
    void set_inference();
    // Whether qat.linears chooses a linear reading site s (kQatLn1..kQatAct) at linear_in.
    // The final norm's site (kQatFinalNorm) is the LM head's input.
    bool linear_in(int s) const {
        if (s == kQatFinalNorm) return linear_in_head_;
        return s >= 0 && s < kQatRecomputedSites && linear_in_[size_t(s)];
    }
    // A static point's observer has seen a step / its scale and zero point (site, global layer;
    // the final norm: kQatFinalNorm).
    bool point_observed(int s, int l) const;
    std::pair<float, float> point_params(int s, int l) const;
    // Fixes a static point's scale and zero point (the int8 model's frozen activation scales).
    void set_point_params(int s, int l, float scale, float zero);

  private:
    struct Weight {
        std::string name;
        CMat src;
        Mat dst, grad;
        bool quantize = false, split_cols = false;
        int64_t group = 0;        // columns per block
        bool per_tensor = false;  // one scale for the tensor
        int phase = -1;           // fq_on_ when dst was last written (-1: never)
        bool stale = false;       // deferred: begin_step came, the rewrite has not
        DeviceBuffer lo, hi, scale, zero, mask;
        const Nf4View* nf4 = nullptr;  // src is its dequantized copy, in `dense`
        DeviceBuffer dense;
        LearnedScale learned;        // trained scale factors (qat.learnable_scale), or empty
        std::vector<float> factors;  // set_weight_scale_factors, or empty
        std::vector<float> range;    // the range's scales of the last rewrite (with factors)
        int64_t scale_count() const { return per_tensor ? 1 : src.rows * (src.cols / group); }
        // Whether its gradient goes through a straight-through mask: a trainable weight whose
        // scales are not its range's (learned or given factors).
        bool masked() const {
            return quantize && !grad.empty() && (!learned.empty() || !factors.empty());
        }
    };
    // A static activation point: its observer and this step's range.
    struct Point {
        Observer obs;
        float step_lo, step_hi;
        bool fixed = false;  // set_point_params: these, not the observer's
        float scale = 1.0f, zero = 0.0f;
    };
    int point_index(int s, int l) const {
        return s == kQatFinalNorm ? layers_ * kQatSites : l * kQatSites + s;
    }
    void update_weight(Weight& w);
    // The range's scales of w into w.scale (reduced over tp where they span ranks).
    void range_scales(Weight& w);
    bool reduce_range_over_tp(const Weight& w) const;
    // w.scale = factor · range's scale (at least kMinScale), the factors learned or given.
    void factor_scales(Weight& w);
    void learned_grad(Weight& w);
    void ensure_scratch(int64_t n);
    void upload_scales();

    QatSpec spec_;
    Backend& be_;
    // linear_in of each site: whether qat.linears chooses a linear reading it.
    std::array<bool, kQatSites> linear_in_{};
    bool linear_in_head_ = false;
    int layers_;
    Communicator* tp_;
    bool fq_on_ = false, observe_ = false;
    std::vector<Weight> weights_;
    bool deferred_ = false;
    std::vector<Point> points_;  // (layers + 1) x kQatSites; the final norm at [layers][0]
    DeviceBuffer scales_;        // 2 floats per point: scale, zero (per-tensor points)
    DeviceBuffer lo_, hi_, tok_s_, tok_z_;  // (N) scratch: row ranges, per-token parameters
    int64_t scratch_n_ = 0;
};

}  // namespace ete
