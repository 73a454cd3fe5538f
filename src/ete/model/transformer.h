// ete/model/transformer.h — a decoder-only transformer (Llama or GPT-2) with explicit backward,
// tensor-parallel (Megatron) and cut into pipeline stages (DESIGN.md §4), assembled from
// nn::Linear and nn::Norm layers over a ParamStore.
//
// Dimension letters: B batch, T time, C hidden, H query heads, KV key/value heads, D head dim,
// S = (H + 2KV)·D fused qkv width, F MLP width, V vocab, L layers, N = B·T rows. Under tensor
// parallelism over P ranks H, KV, S, F and V are this rank's (H/P, KV/P — or 1 when P > KV —,
// padded F/P and V/P).
//
// Memory. Parameters, gradients and activations are backend memory: this class never touches
// their bytes, it only hands views to backend ops and moves host data (token ids, targets,
// document starts, the per-row loss sums) in and out with upload/download. Activations live in
// one backend block carved by an Arena, sized by setup(B, T, plan, slots): the training loop never
// allocates. A recomputed layer keeps only its input (the residual stream) and re-runs its
// forward into a shared scratch before its backward. Each pipeline slot (a micro-batch in flight)
// has its own saved activations; backward scratch is shared.
//
// Precision (DESIGN.md §3b). The compute dtype A (F32, BF16 or F16) is the dtype of the GEMM
// operands: weights (the ParamStore's compute copy), the saved activations that feed GEMMs
// (norm outputs, q|k|v, attention output, MLP activations) and the activation gradients between
// GEMMs. The residual stream and its gradient, norm statistics, the log-sum-exp, logits, losses
// and every parameter gradient stay F32; GEMM products accumulate in fp32.
//
// Tensor parallelism (tp_size > 1): q|k|v and gate|up are column-parallel Linears (this rank's
// heads and MLP columns), o_proj/down_proj row-parallel ones; their conjugate collectives are
// nn/tp_regions.h. Embedding and LM head are vocab-parallel; the cross-entropy is fused across
// ranks and never gathers full logits. Activations on the residual stream, the loss and the
// gradients of replicated parameters are identical on every tp rank. With tp_size 1 nothing is
// communicated.
//
// GQA with P > KV (P a multiple of KV): rank r holds kv head r / (P/KV), the one all its H/P
// query heads use, so attention stays local. The P/KV ranks holding a kv head (its kv group)
// each compute a partial k|v gradient from their own query heads; the group sums them per
// micro-batch before the layer's gradients are reported, so the copies stay identical. Their
// partial d(ln1) terms need no change: the tp all-reduce of d(ln1) adds them up to the whole.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/arena.h"
#include "ete/model/config.h"
#include "ete/model/int8_model.h"
#include "ete/model/lora_spec.h"
#include "ete/model/model_parallel.h"
#include "ete/model/param_store.h"
#include "ete/model/qat_runtime.h"
#include "ete/nn/fused_linear.h"
#include "ete/nn/head_norm.h"
#include "ete/nn/int8_linear.h"
#include "ete/nn/linear.h"
#include "ete/nn/norm.h"
#include "ete/parallel/communicator.h"

namespace ete {

enum class Recompute { None, Full };

// Which layers recompute their activations in backward, from "none", "full" or a list of layer
// indices and ranges such as "0-3,6" (memory is then spent only on the layers not listed).
std::vector<bool> recompute_plan(const std::string& spec, int num_layers);

// One decoder layer's parameters as layers (views into the ParamStore). A trainable base runs
// q|k|v and gate|up as one Linear each; a frozen one (LoRA) member by member.
struct DecoderLayer {
    Norm ln1, ln2;
    FusedLinear qkv;           // (S, C) column-parallel: q | k | v
    Linear o;                  // (C, H·D) row-parallel
    FusedLinear fc;            // Llama (2F, C) gate | up; GPT-2 (F, C); column-parallel
    Linear proj;               // (C, F) row-parallel
    HeadNorm qk;               // Qwen3's and Gemma 3's per-head q and k norms, or disabled
    Norm post_attn, post_ffn;  // Gemma's norms of o_proj's and down_proj's outputs, or unset
    // Hooks on the residual stream after the attention add and after the MLP add (the layer's
    // output): QAT's residual points (nn/act_hook.h), or null.
    const ActHook* resid_mid_hook = nullptr;
    const ActHook* resid_out_hook = nullptr;
};

// The places a layer can hold LoRA adapters: the members of qkv (up to 3), o, the members of fc
// (up to 2), proj.
enum LoraSite { kSiteQkv = 0, kSiteO = 3, kSiteFc = 4, kSiteProj = 6, kLoraSites = 7 };

// What one layer's forward saves for its backward.
struct LayerActs {
    Mat ln1;                 // (N, C) A
    Vec ln1_mean, ln1_rstd;  // (N) F32; mean: LayerNorm only
    Mat qkv;                 // (N, S) A, after RoPE
    HeadNormActs qk_norm;    // Qwen3: q and k heads before their norms
    Mat att;                 // (N, H·D) A
    Vec lse;                 // (B·H·T) F32
    Mat resid_mid;           // (N, C) F32 residual after attention
    Mat ln2;                 // (N, C) A
    Vec ln2_mean, ln2_rstd;  // (N) F32
    Mat fc;                  // (N, 2F) Llama gate|up; (N, F) GPT-2 pre-activation; A
    Mat act;                 // (N, F) A
    // Gemma: o_proj's and down_proj's outputs (summed over tp) before their post norms, F32.
    Mat attn_o, ffn_o;                   // (N, C)
    Vec attn_rstd, ffn_rstd;             // (N) F32
    std::array<Mat, kLoraSites> lora_u;  // (N, r_max) A per adapter (LoraActs::u), or empty
    // QAT (model/qat_runtime.h): the straight-through masks of the fake-quantized sites (U8), and
    // the o_proj input fq(att) when it is one (att itself stays for attention's backward).
    std::array<Vec, kQatRecomputedSites> qat_mask;
    Mat att_q;  // (N, H·D) A, or empty
};

class Transformer {
  public:
    // Called at most once per micro-batch backward for each contiguous range of the flat
    // gradient buffer (ParamStore offsets) whose gradient became final.
    using GradReadyHook = std::function<void(int64_t offset, int64_t count)>;

    // mp = {}: the whole model on one process. compute: the compute dtype (train.precision).
    // lora enabled: a frozen base with adapters (model/lora_spec.h), the adapters the only
    // trainable parameters. qat: the spec enable_qat will be given when it learns the weights'
    // scales (qat.learnable_scale: they are parameters, model/param_spec.h). gradients = false:
    // a model that only runs forward (no gradient buffer; backward refuses to run). Throws
    // ete::Error on an invalid ModelParallel or LoRA spec.
    Transformer(const ModelConfig& config, Backend& backend, const ModelParallel& mp = {},
                DType compute = DType::F32, const LoraSpec& lora = {}, const QatSpec& qat = {},
                bool gradients = true);
    ~Transformer();

    const ModelConfig& config() const { return cfg_; }
    const ModelParallel& model_parallel() const { return mp_; }  // layer_end resolved
    const LoraSpec& lora() const { return lora_; }
    // The linears of local layer i with an adapter, each with the parameter index of its A (for
    // rank changes: dynamic rank, a PEFT rank_pattern).
    std::vector<std::pair<Linear*, int>> adapted_linears(int i);
    ParamStore& params() { return params_; }
    const ParamStore& params() const { return params_; }
    Backend& backend() { return be_; }
    DType compute_dtype() const { return act_; }

    // Quantization-aware training (model/qat_runtime.h): fake quantization at the spec's points
    // of this stage's layers. Call before setup (it adds the masks to the activations); throws
    // naming the qat.* key a spec cannot apply to this model (an NF4 weight, a group size the
    // shard's columns do not divide). The trainer drives the steps through qat().
    void enable_qat(const QatSpec& spec);
    QatRuntime* qat() { return qat_.get(); }
    const QatRuntime* qat() const { return qat_.get(); }
    // The weight buffers enable_qat allocated: the fake-quantized copies, and the runtime's
    // masks, ranges, scales and (QLoRA) dense copies of NF4 weights.
    size_t qat_weight_bytes() const;
    // The integer model (model/int8_model.h; docs/qat.md): its quantized linears multiply
    // integer weights by their quantized inputs (nn/int8_linear.h), its other activation points
    // fake-quantize with the frozen scales. For inference, on the whole model in one process;
    // call before setup. The dense copies of the quantized weights are not read.
    void enable_int8(const Int8Model& m);
    // Post-training calibration: forward-only passes observe the QAT points as a training
    // forward would (the caller folds each batch in with qat()->end_step).
    void set_qat_calibration(bool on) { qat_calibrate_ = on; }
    bool int8() const { return !int8_weights_.empty(); }
    size_t int8_linears() const { return int8_weights_.size(); }
    size_t int8_weight_bytes() const;

    // ZeRO-3's groups of this stage's parameters (embeddings, each layer, head; flat ranges) and
    // the window each is gathered into (model/transformer_zero3.cpp); for the memory estimate too.
    std::vector<ParamStore::ShardGroup> zero3_groups(bool reshard) const;

    // Allocates activations for batches up to (B, T) and `slots` micro-batches in flight (the
    // stage API; 1F1B needs min(num_stages - stage, micro-batches)); `plan` (size L, global layer
    // indices) flags the layers that recompute. Call again to resize.
    void setup(int B, int T, Recompute recompute = Recompute::None);
    void setup(int B, int T, const std::vector<bool>& plan, int slots = 1);
    // The bytes setup(B, T, plan, slots) would allocate for activations, allocating nothing (a
    // memory check before a huge batch is attempted).
    size_t plan_activation_bytes(int B, int T, const std::vector<bool>& plan, int slots = 1);
    int max_batch() const { return B_; }
    int max_seq() const { return T_; }
    int slots() const { return int(slots_.size()); }
    size_t activation_bytes() const { return arena_.capacity(); }

    // --- The whole model in one call (a single pipeline stage; any tp). Host arguments. ---
    // One micro-batch forward + backward. inputs/targets are (B, T) with B, T up to the set-up
    // size; gradients accumulate into params().grads(); d_scale scales the loss gradient
    // (1 / target tokens in the step). Returns the sum of per-token losses over non-ignored
    // targets. doc_start (B, T) or null packs several documents per row (AttnDims in backend.h):
    // no attention across a document boundary, positions restart at each document. It is checked
    // (ete::Error naming the row and position). Runs in slot 0.
    double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                            float d_scale, const int32_t* doc_start = nullptr);
    // Forward only: sum of per-token losses (ignored targets contribute 0).
    double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T,
                        const int32_t* doc_start = nullptr);
    // Forward only: logits (B·T, V) for every position into host memory; under tp the shards are
    // all-gathered (every tp rank gets the full logits).
    void forward_logits(const int32_t* inputs, int B, int T, float* logits,
                        const int32_t* doc_start = nullptr);

    // --- The pipeline-stage API: one stage of one micro-batch, in slot `slot`. ---
    // Batches are exactly the set-up (B, T). Stage 0 reads token ids `inputs` (B·T, host); other
    // stages read stage_input(slot). Non-last stages leave their output in stage_output(slot).
    // The last stage computes the loss of `targets` (B·T, host) and returns the sum of token
    // losses (0 on other stages); it also runs the LM head's backward at once (the head's weight
    // gradient accumulates here, d_lnf is kept for stage_backward). d_scale == 0 (on every
    // stage) is a forward-only evaluation: nothing accumulates and stage_backward(slot) throws.
    // A slot whose backward is due refuses another forward. doc_start (host) is given to every
    // stage's call of a micro-batch and copied, so the caller may reuse its buffers at once.
    double stage_forward(int slot, const int32_t* inputs, const int32_t* targets,
                         const int32_t* doc_start, float d_scale);
    // LoRA dropout (lora.dropout > 0): the micro-batch that slot's next training forward runs —
    // the optimizer step and the global index of its first sample (batch row r is sample
    // first_sample + r) — so a token's masks depend on its place in the global batch, never on
    // the layout. Forward-only runs (evaluation) apply no dropout. Until called, a slot's
    // micro-batch is step 0, first sample 0.
    void set_micro_batch(int slot, int64_t step, int64_t first_sample);
    // The last stage starts from its loss; the others read d(output) from
    // stage_output_grad(slot). Non-first stages leave d(input) in stage_input_grad(slot).
    // Parameter gradients accumulate (+=). Calls the grad-ready hook as gradients become final.
    void stage_backward(int slot);
    // (B·T, C) F32 buffers of a slot in backend memory, for the executor to receive into / send
    // from. The input and output stay valid and untouched until the slot's next stage_forward.
    // The gradients are shared between slots (allocate_slots): stage_input_grad is one buffer
    // for every slot, valid until the next stage_backward of any slot; stage_output_grad is one
    // of two (three for an odd number of slots), never slot s's and slot s + 1's (mod slots):
    // write a slot's just before its stage_backward. Asking a stage for one it does not have
    // (stage 0's input) throws.
    Mat stage_input(int slot);
    Mat stage_output(int slot);
    Mat stage_output_grad(int slot);
    Mat stage_input_grad(int slot);

    // During every backward (stage_backward and forward_backward): after each layer (its
    // parameters), after the head (final norm and LM head or tied copy) and at the end
    // (embeddings; a tied single-stage embedding, which is also the head, only here). Ranges
    // come in decreasing offsets, contiguous, so one backward reports each element of the buffer
    // exactly once, padding already zeroed, the value final for this micro-batch — the LM head's
    // weight gradient accumulates in the last stage's forwards, so it is final for the step at
    // the backward after the step's last forward (1F1B: the last micro-batch's). An empty
    // function removes the hook.
    void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
    // ZeRO-3: called after each gather of a group has started its broadcasts (fault drills:
    // ETE_FAULT kill_gather). An empty function removes it.
    void set_gather_hook(std::function<void()> hook) { gather_hook_ = std::move(hook); }

  private:
    // One micro-batch in flight: its saved activations and stage-boundary buffers.
    struct Slot {
        std::vector<Mat> resid;       // L_s + 1 (N, C) F32: input of local layer i; [L_s] = output
        std::vector<LayerActs> acts;  // one per kept layer of this stage
        Mat lnf;                      // (N, C) A, last stage
        Vec lnf_mean, lnf_rstd;       // (N) F32
        Vec lnf_mask;                 // QAT: the final norm's mask (U8), or empty
        // QAT, per local layer: the masks of the sites a recompute does not rebuild (the
        // projections' outputs and the residual stream; model/qat_runtime.h), or empty.
        std::vector<std::array<Vec, kQatSites>> qat_kept;
        Mat d_lnf;        // (N, C) F32 from the head; the shared d_ln_ when slots == 1
        Mat d_out;        // (N, C) non-last stages: stage_output_grad (shared: allocate_slots)
        Mat d_in;         // (N, C) non-first stages: stage_input_grad, d_resid (one for all slots)
        Vec ids;          // (N) I32 stage 0: the token ids
        Vec doc;          // (N) I32 copy of doc_start
        AttnDims dims{};  // of the last forward (doc_start -> doc or empty)
        bool pending = false;  // forward done, backward due
        // LoRA dropout: the micro-batch's identity (set_micro_batch) and whether its last
        // forward trained (masks on) or evaluated (off).
        int64_t step = 0, first_sample = 0;
        bool dropout = false;
    };
    // The micro-batch whose layers run now, for the adapters' dropout masks: row i of the batch
    // is global token row0 + i.
    struct DropoutContext {
        bool on = false;
        int64_t step = 0;
        uint64_t row0 = 0;
    };
    // Contiguous gradient range reported by the hook, and the padding runs to zero in it.
    struct GradGroup {
        int64_t offset = 0, count = 0;
        int id = 0;                // its place in group_params() (ZeRO-3's group in the ParamStore)
        std::vector<Vec> padding;  // views of padding elements of the gradient buffer
    };

    // Activation planning (transformer_memory.cpp).
    void allocate(Arena& a);
    LayerActs layer_acts(Arena& a) const;
    void allocate_slots(Arena& a, int kept);
    void allocate_backward(Arena& a);
    void upload_rope_tables(int T);
    // The builder (transformer_build.cpp): each layer from the family's row.
    struct FusedMember {  // a member of q|k|v or gate|up: weight and bias roles, local rows
        ParamRole w, b;
        int64_t rows;
    };
    Linear make_linear(int w, int b, int64_t out, int64_t in, TpMode mode);
    FusedLinear make_fused(int l, const std::vector<FusedMember>& members);
    Norm make_norm(int w, int b);
    Vec norm_scratch() const;  // Gemma: where the (1 + w) weights are built, else empty
    DecoderLayer build_layer(int l);
    void build_layers();
    void build_grad_groups();
    std::vector<std::pair<int, int>> group_params() const;
    std::pair<int64_t, int64_t> flat_range(int a, int b) const;
    void finish_group(const GradGroup& g);
    // ZeRO-3 (transformer_zero3.cpp; ModelParallel::zero3). shard_zero3 gives the ParamStore its
    // groups and windows (before any layer is built). A window holds one group's gathered
    // parameters at a time (zero3_held_: the group, or -1): zero3_acquire(g) gathers group g's
    // parameters from the replicas' shards into its window unless it holds them already;
    // zero3_stale forgets every window (a forward starts: the masters may have changed since).
    // acquire also starts gathering `next` (the group that runs after g in this pass, or -1) into
    // its window, when that is not g's: the prefetch lands while g computes
    // (zero3_pending_: each window's broadcasts in flight).
    // zero3_zero_grad(g) clears g's window gradient before a micro-batch writes it, and
    // zero3_reduce(g) sums it over the replicas into the owners' shard gradients.
    // ZeRO-2 (ModelParallel::zero2): shard_zero2 gives the ParamStore gradient windows only; the
    // zero_grad and reduce calls then work as at stage 3 (zero_reduce_: the group they reduce
    // over, stage 2 or 3), the gathers do nothing.
    void shard_zero3();
    void shard_zero2();
    void zero3_acquire(int g, int next);
    void zero3_start_gather(int g);
    void zero3_stale();
    void zero3_zero_grad(int g);
    void zero3_reduce(int g);
    int head_group_id() const { return head_group_.id; }
    Communicator* zero3_ = nullptr;
    Communicator* zero_reduce_ = nullptr;
    DeviceBuffer zero_bf16_;  // ModelParallel::zero_reduce_bf16: the largest group, in BF16
    std::vector<int> zero3_held_;
    std::vector<std::vector<Request>> zero3_pending_;
    std::function<void()> gather_hook_;
    AttnDims attn_dims(int B, int T, const int32_t* doc_start) const;
    Slot& slot_at(int slot, const char* op);
    void require_single_stage(const char* op) const;
    double run_forward(Slot& s, AttnDims d, const int32_t* inputs, const int32_t* targets,
                       const int32_t* doc_start, float d_scale, bool backward);
    void run_backward(Slot& s);
    void use_dropout_of(const Slot& s);
    const LayerActs& acts(const Slot& s, int i) const;
    // Views of the (N, ·) buffers for a batch of N rows.
    static Mat rows(const Mat& m, int N) { return m.empty() ? m : m.row_slice(0, N); }
    static Vec rows(const Vec& v, int64_t n) { return v.empty() ? v : v.slice(0, n); }
    // The input of the linears after a norm (layer_forward): norm(x) in out, or an integer
    // model's quantized input straight from the norm.
    CMat norm_input(const Norm& norm, const FusedLinear& next, Mat out, Vec mean, Vec rstd, CMat x,
                    Vec hook_state);
    // x in the compute dtype: itself, or converted into `scratch` (N, C).
    CMat in_compute(CMat x, Mat scratch);
    // Layers, by local index i (global layer layer_begin + i).
    void layer_forward(int i, const LayerActs& s, CMat x, Mat out, AttnDims d,
                       const std::array<Vec, kQatSites>& kept);
    // The LoraActs of sites [site, site + n) of local layer i's saved activations s for N rows,
    // into out (with their dropout masks while training); null when none has an adapter.
    const LoraActs* lora_acts(int i, const LayerActs& s, int site, int n, int N,
                              LoraActs* out) const;
    DropoutMask lora_dropout_mask(int i, int site) const;
    void layer_backward(int i, Slot& s, Mat d_resid, AttnDims d);
    void attention_backward(int i, const LayerActs& s, CMat x, Mat d_resid, AttnDims d,
                            const std::array<Vec, kQatSites>& kept);
    void mlp_backward(int i, const LayerActs& s, Mat d_resid, AttnDims d,
                      const std::array<Vec, kQatSites>& kept);
    // y (N, C) = resid + in · Wᵀ + b for a row-parallel Linear; with an output hook the product
    // passes through it (hook_state) before the residual add.
    void row_parallel_forward(const Linear& lin, Mat y, CMat resid, CMat in, const LoraActs* acts,
                              Vec hook_state = {});
    // The output gradient of a row-parallel Linear as its GEMMs read it: d_resid in the compute
    // dtype, through its output hook when it has one.
    CMat row_parallel_grad(const Linear& lin, Mat d_resid, CVec hook_state);
    // Gemma's sandwich: o (N, C) F32 = lin(in) (summed over tp, through its output hook), then
    // y = resid + post(o); rstd saved. y empty (a recompute): o and rstd only.
    void post_norm_forward(const Linear& lin, const Norm& post, Mat y, CMat resid, CMat in,
                           const LoraActs* acts, Mat o, Vec rstd, Vec hook_state);
    // dL/d(o) (F32, in d_post_) from dL/d(y) through the post norm; its weight gradient +=.
    Mat post_norm_backward(const Norm& post, Mat d_y, CMat o, CVec rstd);
    // The MLP's activation of fc into act (SwiGLU, GeGLU, GELU), and its backward.
    void mlp_act_forward(Mat act, CMat fc);
    void mlp_act_backward(Mat d_fc, CMat d_act, CMat fc);
    // The RoPE tables of global layer l for T positions: the local ones on Gemma 3's sliding
    // layers.
    std::pair<CMat, CMat> rope_of(int l, int T) const;
    // Replicated kv heads (kv_group_): around a layer's q|k|v weight-gradient accumulation.
    void kv_grads_set_aside(int i);
    Request kv_grads_start_sum(int i);
    void kv_grads_finish(int i, Request& sum);
    std::vector<Mat> kv_grad_views(int i);  // what a kv group sums, per layer (see the .cpp)
    // Embedding, final norm and head (transformer_head.cpp).
    void embed_forward(Mat out, CVec ids, AttnDims d);
    // d_out is scaled in place by a scaled embedding (Gemma).
    void embed_backward(Mat d_out, CVec ids, AttnDims d);
    // Gemma's embedding scale: √hidden_size rounded to the compute dtype, as HF multiplies.
    float embed_scale() const;
    void final_norm_forward(Slot& s, int N);
    void final_norm_backward(Slot& s, Mat d_resid, int N);
    double head_forward(Slot& s, const int32_t* targets, int N, float d_scale, bool backward);
    void head_chunk(Slot& s, int r0, int rows, float d_scale, bool backward);
    void head_chunk_vocab_parallel(Slot& s, const int32_t* targets, int r0, int rows, float d_scale,
                                   bool backward);
    void logits_forward(CMat x, int N, float* logits);

    ModelConfig cfg_;
    Backend& be_;
    ModelParallel mp_;
    LoraSpec lora_;
    DType act_;                         // the compute dtype A
    Communicator* tp_host_ = nullptr;   // the tp group (host buffers) when tp_size > 1, else null
    std::unique_ptr<Communicator> tp_;  // tp_host_ carrying backend memory, or null
    std::unique_ptr<Communicator> kv_group_;  // tp > KV: the ranks holding this kv head, else null
    ParamStore params_;
    std::vector<DecoderLayer> layers_;       // by local layer
    Norm final_norm_;                        // last stage
    Linear head_;                            // last stage: the (vocab-parallel) LM head
    int H_ = 0, KV_ = 0, F_ = 0, V_ = 0;     // this rank's heads, kv heads, MLP width, vocab rows
    int vocab_begin_ = 0, vocab_valid_ = 0;  // global ids [begin, begin + valid) are this rank's
    std::vector<GradGroup> layer_groups_;    // by local layer
    GradGroup head_group_, embed_group_;
    GradReadyHook grad_ready_;

    int B_ = 0, T_ = 0, head_rows_ = 0;
    std::vector<bool> recompute_;  // per global layer
    // No gradients (ParamStore::grads_released at setup): the model only runs forward, every
    // layer writes the one set of scratch activations and no backward buffer exists.
    bool forward_only_ = false;
    std::vector<int> act_index_;  // local layer -> its LayerActs in a slot, -1 = shared scratch
    DeviceBuffer block_;          // the activation memory the arena carves
    Arena arena_;
    std::vector<Slot> slots_;
    LayerActs scratch_acts_;   // recomputed layers
    Mat logits_;               // (head_rows, V) F32
    Mat d_logits_;             // (head_rows, V) A when A is 16-bit, else logits_ (in place)
    Mat d_cap_;                // (head_rows, V) F32, Gemma 2: the final soft-cap's derivative
    Vec losses_;               // (N) F32
    Vec targets_;              // (N) I32 the last stage's targets (global ids)
    Mat rope_cos_, rope_sin_;  // (T, R/2) F32, R = rotary_dim()
    Mat rope_local_cos_, rope_local_sin_;  // (T, R/2) F32: rope_local_theta's, or empty
    Mat d_resid_, d_ln_;                   // (N, C) F32
    Mat d_qkv_, d_att_;                    // (N, S), (N, H·D) A
    Mat d_fc_, d_act_;                     // (N, 2F | F), (N, F) A
    Mat d_y16_;              // (N, C) A: F32 gradients converted for a GEMM (A != F32)
    Mat qk_dn_, qk_di_;      // (N, H·D) F32: per-head norms' backward scratch (HeadNorm)
    Mat post_tmp_, d_post_;  // (N, C) F32, Gemma: a recompute's post-norm output; d(o)
    DeviceBuffer norm_w_;    // (max(C, D)) F32, Gemma: the (1 + w) every norm call builds
    Vec qk_dw_;              // (2·D) F32, tp > 1: one micro-batch's partial q/k norm gradients
    Mat tp_buf_;             // (N, C) F32 tp > 1: partial row-parallel outputs
    // tp > 1, vocab-parallel head: local targets (head_rows) and row statistics.
    Vec ce_tgt_, ce_lse_, ce_zt_;
    std::vector<int32_t> host_tgt_;  // (head_rows) host staging of ce_tgt_

    // kv_group_: the k|v weight (2·D, C) and bias (2·D) gradients accumulated before this
    // micro-batch, and this micro-batch's partials being summed over the group.
    Vec kv_old_, kv_sum_;        // (2·D·C + 2·D) F32 each
    bool kv_trainable_ = false;  // the k|v weights have gradients to sum over kv_group_

    // LoRA: the adapters' backward scratch (LoraActs::d_u F32, d_uc A), N rows of r_max, one
    // per site (a fused group's members keep their d_u from the weight half to the input half).
    std::array<Mat, kLoraSites> lora_du_, lora_duc_;
    std::array<bool, kLoraSites> lora_sites_{};  // which sites have adapters (same every layer)
    // lora.dropout > 0: scratch for the dropped adapter input, (N, widest input) in A and F32.
    Mat lora_xd_, lora_dxd_;
    DropoutContext drop_;

    // QAT: the runtime, the fake-quantized weights the chosen linears read, and whether the
    // forward running now trains (observes, keeps masks) or evaluates.
    std::unique_ptr<QatRuntime> qat_;
    std::vector<DeviceBuffer> qat_weights_;
    Mat qat_out_;  // (N, C) F32: a projection's output before its fake quantization
    bool qat_train_ = false, qat_calibrate_ = false;
    void qat_forward(int site, int l, Mat x, Vec mask);
    // d_x = d_y (default: d_x itself) through site's mask.
    void qat_backward(int site, int l, Mat d_x, CVec mask, CMat d_y = {}) const;
    // The activation points as hooks on the modules (nn/act_hook.h): installed by enable_qat on
    // the norm, linear or layer output each site is (the one place that maps sites to modules).
    class QatHook;
    std::vector<std::unique_ptr<QatHook>> qat_hooks_;
    void install_qat_hooks();
    bool qat_site(int site, int l) const { return qat_ && qat_->site_on(site, l); }
    // Whether an adapter reads the input of site's linears (kQatLn1..kQatAct, kQatFinalNorm) in
    // global layer l.
    bool site_adapted(int site, int l) const;
    CMat o_input(const LayerActs& s, int N) const;
    // Qwen3: the per-head q/k norms' backward of local layer i, their weight gradients summed
    // over the tp group (each rank normalises its own heads).
    void head_norm_backward(int i, const LayerActs& s, Mat d_qkv);
    void qat_add_linear(Linear& lin, const std::vector<int>& params, TpMode mode);
    void qat_add_head();
    void qat_zero3_track(int p);
    std::vector<std::vector<int>> qat_zero3_weights_;  // by ZeRO-3 group: its QAT weights
    // The parameter the LM head multiplies: its own matrix (untied Llama) or the token embedding.
    int head_param() const;
    LearnedScale qat_learned_scale(int p);
    // The integer model's weights, and the scratch their products share.
    std::unique_ptr<Int8Scratch> int8_scratch_;
    std::vector<std::unique_ptr<Int8Weight>> int8_weights_;
    void int8_add_linear(Linear& lin, const std::vector<std::string>& names, const Int8Model& m,
                         int site, int l);
};

// The elements of ZeRO-3's windows for these groups: each window as large as its largest group.
int64_t zero3_window_elements(const std::vector<ParamStore::ShardGroup>& groups);
// The elements of the largest group (the bf16 staging of parallel.grad_bf16's window reduce).
int64_t zero_largest_group(const std::vector<ParamStore::ShardGroup>& groups);

// A QAT activation point (site, global layer l; the final norm: kQatFinalNorm, num_layers) as a
// module hook: the Transformer's qat_forward / qat_backward of that point.
class Transformer::QatHook final : public ActHook {
  public:
    QatHook(Transformer& t, int site, int l) : t_(t), site_(site), l_(l) {}
    void forward(Mat x, Vec state) const override { t_.qat_forward(site_, l_, x, state); }
    void backward(Mat d_x, CMat d_y, CVec state) const override {
        t_.qat_backward(site_, l_, d_x, state, d_y);
    }
    bool grad_active() const override { return t_.qat_->fake_quant_on(); }

  private:
    Transformer& t_;
    int site_, l_;
};

}  // namespace ete
