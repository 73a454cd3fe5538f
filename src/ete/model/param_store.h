// ete/model/param_store.h — where parameters live: the table that lays them out (ParamTable), a
// host copy for files and tests (HostParams), and the backend-owned store a model trains
// (ParamStore).
//
// Layout. Trainable parameters are one flat F32 master buffer in ParamSpec table order
// (execution order), with a flat F32 gradient buffer at the same offsets, so the gradient buffer
// can be cut into all-reduce buckets in reverse execution order without copies, and AdamW,
// clipping, ZeRO-1 and checkpoints walk one range. With a 16-bit compute dtype (mixed precision)
// a flat copy of the masters in that dtype sits beside them: the GEMMs read it, AdamW rewrites it
// in the pass that updates the masters. Frozen parameters (ParamSpec::trainable = false) are not
// in these buffers: each has a buffer of its own in its compute dtype (or NF4) and no gradient.
//
// Under tensor parallelism the store holds one rank's shards (ParamSpec::shape) and knows that
// rank (tp_rank, tp_size).
//
// ZeRO-2 (shard(..., params = false)): only the gradient buffer is sharded: it holds this
// replica's shard [grad_begin(), grad_end()), and every trainable parameter's gradient view lies
// in its group's window; the masters and their compute copy stay whole.
//
// ZeRO-3 (shard()): the flat trainable buffers hold only this replica's shard [flat_begin(),
// flat_end()) of the numel() elements — the contiguous shard of parallel/zero.h, so the optimizer,
// the sharded gradient norm and checkpoints walk it as at stages 1 and 2 — and every trainable
// parameter is read and written through its group's window: a group is a contiguous range of the
// flat layout (the embeddings, one decoder layer, the head) and master(i), grad(i), weight(i) and
// value(i) are views into the window that group uses. The model fills a window (gathers the
// group from the replicas' shards) before the group runs and reduces its gradient into the
// shards after its backward (Transformer, model/transformer_zero3.cpp); groups that are never in
// use at once share a window. There is no compute copy of the shard: a 16-bit window is
// converted from its gathered masters.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/model/nf4_shard.h"
#include "ete/model/param_spec.h"
#include "ete/parallel/zero.h"
#include "ete/quant/nf4.h"

namespace ete {

// Names, shapes and flat offsets of a spec list. offset(i) is the parameter's place in the flat
// trainable buffers (-1 for a frozen one); numel() counts the trainable elements.
class ParamTable {
  public:
    // specs as param_specs() built them for (tp_rank, tp_size).
    explicit ParamTable(std::vector<ParamSpec> specs, int tp_rank = 0, int tp_size = 1);

    const std::vector<ParamSpec>& specs() const { return specs_; }
    int size() const { return int(specs_.size()); }
    int64_t numel() const { return total_; }
    int index(const std::string& name) const;  // throws if unknown
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    // The parameter of `role` in decoder `layer` (-1 for the others), or -1 when the model has
    // none (no bias, say). A tied copy is found as TokenEmbed.
    int find(ParamRole role, int layer = -1) const;
    // The LoRA A (b = false) or B of the base weight of `base` role in `layer`, or -1.
    int find_lora(ParamRole base, int layer, bool b) const;
    int64_t offset(int i) const { return offsets_[size_t(i)]; }
    int64_t numel(int i) const { return shape_numel(specs_[size_t(i)].shape); }
    bool trainable(int i) const { return specs_[size_t(i)].trainable; }
    bool is_nf4(int i) const { return specs_[size_t(i)].nf4_block > 0; }
    int tp_rank() const { return tp_rank_; }
    int tp_size() const { return tp_size_; }

    // For a global gradient norm over the tp × pp ranks of a replica: whether parameter i's
    // elements are counted on this rank, so each element is counted exactly once — sharded ones
    // on every tp rank (padding is zero), replicated ones on tp rank 0 only, a kv head held by
    // several tp ranks on the first of them (shard_owner), a tied_copy never (stage 0 counts
    // the embedding, after the tied gradients were summed).
    bool counts_in_norm(int i) const;

  private:
    std::vector<ParamSpec> specs_;
    std::vector<int64_t> offsets_;
    std::unordered_map<std::string, int> index_;
    std::unordered_map<int, int> roles_;  // (role, layer) key -> index
    int64_t total_ = 0;
    int tp_rank_ = 0, tp_size_ = 1;
};

// A host F32 copy of a parameter table's trainable parameters (one flat buffer, table offsets):
// what files are read into and written from, and what tests inspect.
class HostParams : public ParamTable {
  public:
    explicit HostParams(std::vector<ParamSpec> specs, int tp_rank = 0, int tp_size = 1)
        : ParamTable(std::move(specs), tp_rank, tp_size), data_(size_t(numel()), 0.0f) {}
    explicit HostParams(const ParamTable& table)
        : HostParams(table.specs(), table.tp_rank(), table.tp_size()) {}
    // Adopts `data` (numel() values, the flat buffer) without a copy.
    HostParams(std::vector<ParamSpec> specs, std::vector<float> data)
        : ParamTable(std::move(specs), 0, 1), data_(std::move(data)) {
        ETE_CHECK(int64_t(data_.size()) == numel(),
                  "HostParams: {} values for a table of {} parameters' {} elements", data_.size(),
                  size(), numel());
    }

    // Trainable parameters only (frozen ones are not in the flat buffer).
    float* param(int i) {
        ETE_ASSERT(trainable(i));
        return data_.data() + offset(i);
    }
    const float* param(int i) const {
        ETE_ASSERT(trainable(i));
        return data_.data() + offset(i);
    }
    float* param(const std::string& name) { return param(index(name)); }
    const float* param(const std::string& name) const { return param(index(name)); }
    float* data() { return data_.data(); }
    const float* data() const { return data_.data(); }
    const std::vector<float>& data_vector() const { return data_; }
    // The values ParamStore::init gives the same table's trainable parameters (layout-invariant,
    // from the seed).
    void init(uint64_t seed);

  private:
    std::vector<float> data_;
};

class ParamStore : public ParamTable {
  public:
    // compute: the dtype GEMMs read weights in (F32, BF16, F16). All buffers are zero.
    // gradients = false (a model that only runs forward: eval, generate): no gradient buffer is
    // allocated, as if release_grads() had been called. deferred: which buffers wait for shard()
    // (a replica never holds what it will shard, not even while it is built): the gradients
    // (ZeRO-2) or all of them (ZeRO-3).
    enum class Deferred { None, Grads, All };
    ParamStore(std::vector<ParamSpec> specs, Backend& backend, int tp_rank = 0, int tp_size = 1,
               DType compute = DType::F32, bool gradients = true,
               Deferred deferred = Deferred::None);

    Backend& backend() const { return be_; }
    DType compute_dtype() const { return compute_; }

    // Parameter i as (rows, cols): 2-D specs as they are, 1-D ones as one row.
    Mat master(int i);  // F32 master (trainable only)
    CMat master(int i) const;
    Mat grad(int i);  // F32 gradient; empty for a frozen parameter or without gradients
    // What GEMMs read: the compute-dtype copy (the master itself in F32 runs; a frozen matrix's
    // own buffer).
    CMat weight(int i) const;
    // What the other kernels read: the F32 master, or a frozen parameter's buffer (F32 for norms
    // and biases, the compute dtype for matrices and embeddings). Not for NF4 parameters.
    CMat value(int i) const;
    // An NF4 parameter (ParamSpec::nf4_block > 0): its quantized weight; upload() quantizes host
    // values into it (fast path of quant/nf4.h), upload_nf4 takes an already quantized tensor.
    // The reference stays valid (and sees later uploads) for the store's lifetime; until the
    // first upload it has the shape but no data.
    const Nf4View& nf4(int i) const;
    void upload_nf4(int i, const Nf4Tensor& t);
    // Parameter i from its whole logical tensor (global_shape, host F32, or NF4 quantized whole):
    // this rank's shard of it. For an NF4 parameter the whole tensor is quantized and sharded
    // (model/nf4_shard.h), so every layout holds the same blocks; upload() of a local shard
    // would quantize the shard alone and is refused for NF4 under tensor parallelism.
    void upload_global(int i, const float* global);
    void upload_global_nf4(int i, const Nf4Tensor& global, Nf4Origin origin = Nf4Origin::Quantized);
    // Backend bytes of the frozen parameters (dense and NF4).
    size_t frozen_bytes() const;
    // `rows` rows of `cols` starting at parameter i, across the parameters that follow it in the
    // flat buffers (fused q|k|v, gate|up). Trainable parameters only.
    Mat master_span(int i, int64_t rows, int64_t cols);
    Mat grad_span(int i, int64_t rows, int64_t cols);
    CMat weight_span(int i, int64_t rows, int64_t cols) const;

    // The flat trainable buffers: elements [flat_begin(), flat_end()) of the flat layout (all
    // numel() of them unless sharded): element k of the layout is element k - flat_begin() here.
    Vec masters() { return {master_.data(), DType::F32, flat_size()}; }
    CVec masters() const { return {master_.data(), DType::F32, flat_size()}; }
    // The gradient buffer: elements [grad_begin(), grad_end()) of the flat layout (the same
    // range as the masters', except at ZeRO-2, where only the gradients are sharded).
    Vec grads() { return {grad_.data(), DType::F32, grad_.data() ? grad_flat_.size() : 0}; }
    CVec grads() const { return {grad_.data(), DType::F32, grad_.data() ? grad_flat_.size() : 0}; }
    // The compute copy, or empty when the compute dtype is F32 (or the store is sharded).
    Vec compute_copy() {
        return {compute_copy_.data(), compute_, compute_copy_.data() ? flat_size() : 0};
    }
    int64_t flat_begin() const { return flat_.begin; }
    int64_t flat_end() const { return flat_.end; }
    int64_t flat_size() const { return flat_.size(); }
    int64_t grad_begin() const { return grad_flat_.begin; }
    int64_t grad_end() const { return grad_flat_.end; }

    // --- ZeRO-3 (see the top of this file). ---
    // A contiguous range of the flat layout run together, and the window it is read through.
    struct ShardGroup {
        int64_t offset = 0, count = 0;
        int window = 0;
        int first = 0, last = 0;  // its parameters [first, last) in table order, frozen included
    };
    // Keeps only replica `rank`'s shard (of `dp`) of the flat buffers (zeroed) and gives every
    // parameter views into per-group windows. groups cover the table and [0, numel()) in order;
    // call before any view is taken (the Transformer does, before building its layers).
    // A frozen parameter (a LoRA/QLoRA base) lives whole on one replica, its owner — the one
    // holding the fewest frozen bytes so far, in table order, so the base is spread evenly — an
    // NF4 weight with all its block statistics (never split inside a block); the others keep
    // none of it, only its shape (and an NF4 weight's offset). Uploads to a frozen parameter keep
    // it on its owner only.
    // params = false (ZeRO-2): the gradients only (the top of this file); the groups' windows
    // then have gradients only.
    void shard(const std::vector<ShardGroup>& groups, int dp, int rank, bool params = true);
    bool sharded() const { return params_sharded_; }         // ZeRO-3
    bool grads_sharded() const { return !groups_.empty(); }  // ZeRO-2 or 3
    int num_groups() const { return int(groups_.size()); }
    const ShardGroup& group(int g) const { return groups_[size_t(g)]; }
    // Group g's window: its masters (F32), their compute-dtype copy (empty for F32) and its
    // gradient, count elements each (ZeRO-2: the gradient only).
    struct Window {
        Vec master, compute, grad;
    };
    Window window(int g);
    // How group g's trainable elements are gathered: runs [offset, offset + count) of the flat
    // layout, in order. In a 16-bit run a matrix (read by GEMMs through weight()) is gathered as
    // its compute-dtype copy only (compute = true: half the traffic, converted on its holder);
    // norms, biases and embeddings (read through value() or master_span()) as F32 masters, their
    // compute copy converted in the window. An F32 run gathers each group as one F32 run.
    struct GatherRun {
        int64_t offset = 0, count = 0;
        bool compute = false;
    };
    const std::vector<GatherRun>& gather_runs(int g) const { return runs_[size_t(g)]; }
    // From now on every trainable parameter is gathered as its F32 master (QAT reads the masters
    // of the weights it fake-quantizes).
    void gather_masters_only() {
        masters_only_ = true;
        build_runs();
    }
    // The group parameter i is read through (sharded stores only).
    int group_of(int i) const { return group_of_[size_t(i)]; }
    // Parameter i's elements that lie in this store's flat buffers into out (numel(i) floats; the
    // others are left as they are). Unsharded: the whole parameter.
    void download_owned(int i, float* out) const;
    // Group g's frozen parameters as the gather moves them: byte ranges of its window, each with
    // its owner and, on the owner, where its own copy is (null elsewhere).
    struct FrozenPiece {
        void* window;
        const void* home;
        size_t bytes;
        int owner;
    };
    std::vector<FrozenPiece> frozen_pieces(int g) const;
    // Backend bytes of frozen parameter i as stored (dense, or NF4 with its statistics and maps),
    // whether loaded yet or not.
    size_t frozen_param_bytes(int i) const;
    // The frozen bytes the largest replica would hold sharded over dp with these groups (the
    // memory estimate): its own parameters (first), and the windows' frozen parts (second).
    std::pair<size_t, size_t> zero3_frozen_bytes(const std::vector<ShardGroup>& groups,
                                                 int dp) const;
    void zero_grads();
    // Frees the gradient buffer when training is over (the final save needs host memory for the
    // tensors it writes). Views into it — the layers' — dangle from then on: every
    // backward refuses to run (Transformer checks grads_released()).
    void release_grads();
    bool grads_released() const { return grads_released_; }

    // Host transfers. Uploading masters refreshes their compute copy.
    std::vector<float> download(int i) const;  // parameter i's values (F32)
    void upload(int i, const float* host);
    void download_masters(float* host) const;  // numel() floats
    void upload_masters(const float* host);
    std::vector<float> download_grads() const;
    std::vector<float> download_grad(int i) const;  // parameter i's gradient (trainable only)
    void upload_grads(const float* host);
    // The whole trainable part as a HostParams with this table.
    HostParams to_host() const;
    void from_host(const HostParams& h);
    // The compute copy (and frozen buffers) rewritten from the masters.
    void refresh_compute();

    // Initialises every parameter from its spec with the counter-based RNG keyed by
    // (seed, name, GLOBAL element index); padding elements are 0. The same seed gives the same
    // model on any layout: a tp shard is exactly a slice of the tp = 1 tensor.
    void init(uint64_t seed);
    // The same for the trainable parameters only (a LoRA run's adapters, before its frozen base
    // is loaded from a model dir).
    void init_trainable(uint64_t seed);

  private:
    Shape dims(int i) const;
    // Where trainable parameter i's flat elements live: (buffer base, element offset in it,
    // elements in the buffer), for the masters (F32), the compute copy and the gradients.
    enum class Flat { Master, Compute, Grad };
    struct Place {
        void* base;
        int64_t offset, total;
    };
    Place place(Flat which, int i) const;
    // Where a frozen parameter's bytes are read: its own buffer, or (sharded) its window's.
    const void* frozen_data(int i) const;
    // Sharded NF4 parameter i: its view laid out in its window (data pointers there).
    Nf4View window_nf4_view(int i) const;
    void upload_nf4_sharded(int i, const Nf4Tensor& t);
    // Whether NF4 parameter i is stored double-quantized (a tp shard is not: nf4_shard.h).
    bool nf4_double_quant(int i) const;
    // Places group g's frozen parameters: owners (load: each replica's bytes so far) and byte
    // offsets in the window; returns the window bytes the group needs.
    size_t place_frozen(const ShardGroup& g, std::vector<size_t>& load, std::vector<int>& owner,
                        std::vector<size_t>& at) const;
    // Frozen parameters keep GEMM operands in the compute dtype, everything else in F32.
    static DType frozen_dtype(const ParamSpec& s, DType compute) {
        return s.kind == ParamKind::Matrix || s.kind == ParamKind::Embedding ? compute : DType::F32;
    }
    Backend& be_;
    DType compute_;
    DeviceBuffer master_, grad_, compute_copy_;
    bool grads_released_ = false;
    std::vector<DeviceBuffer> frozen_;  // by parameter index (empty for trainable ones)
    std::vector<Nf4Buffer> nf4_;        // by parameter index (NF4 parameters only)
    ShardRange flat_;                   // what master_ (and compute_copy_) hold of the flat layout
    ShardRange grad_flat_;              // what grad_ holds of it
    bool params_sharded_ = false;
    // ZeRO-3: the groups, each trainable parameter's group, and the windows' buffers.
    std::vector<ShardGroup> groups_;
    std::vector<std::vector<GatherRun>> runs_;  // by group
    bool masters_only_ = false;                 // gather_masters_only
    void build_runs();
    // Whether trainable parameter i is gathered as its compute copy only (gather_runs).
    bool gathered_compute(int i) const {
        return compute_ != DType::F32 && !masters_only_ &&
               specs()[size_t(i)].kind == ParamKind::Matrix;
    }
    std::vector<int> group_of_;  // by parameter (frozen ones too)
    int shard_rank_ = 0;
    std::vector<int> frozen_owner_;    // by parameter: its owner (-1: trainable)
    std::vector<size_t> frozen_at_;    // by parameter: its byte offset in its window's frozen part
    std::vector<Nf4Buffer> nf4_home_;  // the NF4 weights this replica owns
    struct WindowBuffers {
        DeviceBuffer master, compute, grad, frozen;
        int64_t capacity = 0;
        size_t frozen_capacity = 0;
    };
    std::vector<WindowBuffers> windows_;
};

// The host values of parameter i of a store's table, initialised like ParamStore::init.
void init_param(const ParamSpec& s, int tp_rank, int tp_size, uint64_t seed, float* out);

// HF layout of a spec's local shape: the shape reversed when HF stores it transposed (GPT-2
// Conv1D). hf_global_shape: the same for the logical tensor.
Shape hf_shape(const ParamSpec& s);
Shape hf_global_shape(const ParamSpec& s);
// Copies a parameter from / to its HF layout (transposing GPT-2 Conv1D weights); local shapes.
void param_from_hf(const ParamSpec& s, const float* src, float* dst);
void param_to_hf(const ParamSpec& s, const float* src, float* dst);
void param_from_hf(HostParams& store, int i, const float* src);
void param_to_hf(const HostParams& store, int i, float* dst);

}  // namespace ete
