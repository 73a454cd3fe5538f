// ete/model/param_store.cpp
#include "ete/model/param_store.h"

#include <algorithm>

#include "ete/core/rng.h"
#include "ete/model/nf4_shard.h"
#include "ete/model/shard.h"

namespace ete {

ParamStore::ParamStore(std::vector<ParamSpec> table, Backend& backend, int tp_rank, int tp_size,
                       DType compute, bool gradients, Deferred deferred)
    : ParamTable(std::move(table), tp_rank, tp_size),
      be_(backend),
      compute_(compute),
      grads_released_(!gradients),
      flat_{0, numel()},
      grad_flat_{0, numel()} {
    ETE_CHECK(compute == DType::F32 || compute == DType::BF16 || compute == DType::F16,
              "parameter store: compute dtype {} is not F32, BF16 or F16", dtype_name(compute));
    const size_t n = size_t(numel());
    if (deferred != Deferred::All) {
        master_ = DeviceBuffer::zeroed(be_, n * sizeof(float));
        if (gradients && deferred == Deferred::None)
            grad_ = DeviceBuffer::zeroed(be_, n * sizeof(float));
        if (compute_ != DType::F32)
            compute_copy_ = DeviceBuffer::zeroed(be_, n * dtype_size(compute_));
    }
    frozen_.resize(size_t(size()));
    nf4_.resize(size_t(size()));
    for (int i = 0; i < size(); ++i) {
        if (is_nf4(i)) {  // the buffers come with the first upload
            const ParamSpec& s = specs()[size_t(i)];
            nf4_[size_t(i)] = Nf4Buffer(s.shape[0], s.shape[1], s.nf4_block);
        }
        if (trainable(i) || is_nf4(i) || deferred == Deferred::All) continue;
        frozen_[size_t(i)] = DeviceBuffer::zeroed(be_, frozen_param_bytes(i));
    }
}

Shape ParamStore::dims(int i) const {
    const Shape& s = specs()[size_t(i)].shape;
    if (s.size() == 2) return s;
    return {1, shape_numel(s)};
}

namespace {

// (rows, cols) at element `offset` of a flat buffer of `total` elements of dtype t.
template <typename P>
MatViewT<P> flat_view(P base, DType t, int64_t offset, int64_t total, int64_t rows, int64_t cols) {
    ETE_ASSERT(offset >= 0 && offset + rows * cols <= total);
    return {view_detail::advance(base, offset * int64_t(dtype_size(t))), t, rows, cols};
}

}  // namespace

Mat ParamStore::master_span(int i, int64_t rows, int64_t cols) {
    ETE_ASSERT(trainable(i));
    ETE_CHECK(!sharded() || !gathered_compute(i),
              "parameter '{}': ZeRO-3 gathers its {} copy, not its F32 master (the master is "
              "read from the shard)",
              specs()[size_t(i)].name, dtype_name(compute_));
    const Place p = place(Flat::Master, i);
    return flat_view(p.base, DType::F32, p.offset, p.total, rows, cols);
}

Mat ParamStore::grad_span(int i, int64_t rows, int64_t cols) {
    if (!trainable(i) || grads_released_) return {};
    const Place p = place(Flat::Grad, i);
    return flat_view(p.base, DType::F32, p.offset, p.total, rows, cols);
}

CMat ParamStore::weight_span(int i, int64_t rows, int64_t cols) const {
    ETE_ASSERT(!is_nf4(i));
    if (!trainable(i)) {
        ETE_ASSERT(rows * cols == ParamTable::numel(i));
        return {frozen_data(i), frozen_dtype(specs()[size_t(i)], compute_), rows, cols};
    }
    const Place p = place(compute_ == DType::F32 ? Flat::Master : Flat::Compute, i);
    return flat_view<const void*>(p.base, compute_, p.offset, p.total, rows, cols);
}

Mat ParamStore::master(int i) {
    Shape d = dims(i);
    return master_span(i, d[0], d[1]);
}

CMat ParamStore::master(int i) const {
    return const_cast<ParamStore*>(this)->master(i);
}

Mat ParamStore::grad(int i) {
    Shape d = dims(i);
    return grad_span(i, d[0], d[1]);
}

CMat ParamStore::weight(int i) const {
    Shape d = dims(i);
    return weight_span(i, d[0], d[1]);
}

CMat ParamStore::value(int i) const {
    ETE_ASSERT(!is_nf4(i));
    if (trainable(i)) return master(i);
    Shape d = dims(i);
    return {frozen_data(i), frozen_dtype(specs()[size_t(i)], compute_), d[0], d[1]};
}

void ParamStore::release_grads() {
    grad_.reset();
    for (WindowBuffers& w : windows_) w.grad.reset();
    grads_released_ = true;
}

void ParamStore::zero_grads() {
    ETE_CHECK(!grads_released_, "zero_grads: the gradients were released (training is over)");
    be_.fill_bytes(grad_.data(), 0, grad_.bytes());
    for (WindowBuffers& w : windows_) be_.fill_bytes(w.grad.data(), 0, w.grad.bytes());
}

const Nf4View& ParamStore::nf4(int i) const {
    ETE_ASSERT(is_nf4(i));
    return nf4_[size_t(i)].view();
}

void ParamStore::upload_nf4(int i, const Nf4Tensor& t) {
    const ParamSpec& s = specs()[size_t(i)];
    ETE_ASSERT(is_nf4(i));
    ETE_CHECK(t.rows == s.shape[0] && t.cols == s.shape[1],
              "parameter '{}': NF4 tensor ({}, {}), expected {}", s.name, t.rows, t.cols,
              shape_str(s.shape));
    if (sharded()) return upload_nf4_sharded(i, t);
    nf4_[size_t(i)] = Nf4Buffer(be_, t);
}

size_t ParamStore::frozen_bytes() const {
    size_t n = 0;
    for (const DeviceBuffer& b : frozen_) n += b.bytes();
    for (const Nf4Buffer& b : nf4_) n += b.bytes();
    for (const Nf4Buffer& b : nf4_home_) n += b.bytes();
    for (const WindowBuffers& w : windows_) n += w.frozen.bytes();
    return n;
}

std::vector<float> ParamStore::download(int i) const {
    ETE_CHECK(trainable(i) || !sharded(),
              "parameter '{}' is part of a frozen base sharded over the data-parallel replicas "
              "(ZeRO-3): it is read only through its group's window",
              specs()[size_t(i)].name);
    std::vector<float> out(size_t(ParamTable::numel(i)));
    if (is_nf4(i)) {  // dequantized by the backend, like the kernels see it
        DeviceBuffer tmp(be_, out.size() * sizeof(float));
        const Shape d = dims(i);
        ETE_CHECK(!nf4(i).empty(), "parameter '{}': its NF4 weight was never loaded",
                  specs()[size_t(i)].name);
        be_.dequantize_nf4(Mat(tmp.data(), DType::F32, d[0], d[1]), nf4(i), 0);
        be_.download(out.data(), tmp.data(), tmp.bytes());
        return out;
    }
    if (trainable(i) && sharded()) {
        ETE_CHECK(offset(i) >= flat_.begin && offset(i) + ParamTable::numel(i) <= flat_.end,
                  "parameter '{}' is sharded over the data-parallel replicas (ZeRO-3): this "
                  "replica holds only part of it (download_owned)",
                  specs()[size_t(i)].name);
        download_owned(i, out.data());
        return out;
    }
    CMat v = value(i);
    if (v.dtype == DType::F32) {
        be_.download(out.data(), v.data, out.size() * sizeof(float));
        return out;
    }
    std::vector<uint16_t> raw(out.size());
    be_.download(raw.data(), v.data, raw.size() * 2);
    convert_to_f32(out.data(), raw.data(), v.dtype, raw.size());
    return out;
}

void ParamStore::upload_global_nf4(int i, const Nf4Tensor& global, Nf4Origin origin) {
    upload_nf4(i, nf4_shard(specs()[size_t(i)], tp_rank(), tp_size(), global, origin));
}

void ParamStore::upload_global(int i, const float* global) {
    const ParamSpec& s = specs()[size_t(i)];
    if (is_nf4(i)) {
        return upload_global_nf4(i, nf4_quantize(global, s.global_shape[0], s.global_shape[1],
                                                 {s.nf4_block, s.nf4_double_quant}));
    }
    std::vector<float> local(size_t(ParamTable::numel(i)));
    shard_from_global(s, tp_rank(), tp_size(), global, local.data());
    upload(i, local.data());
}

void ParamStore::upload(int i, const float* host) {
    const size_t n = size_t(ParamTable::numel(i));
    if (is_nf4(i)) {
        const ParamSpec& s = specs()[size_t(i)];
        ETE_CHECK(tp_size() == 1 || s.shard.dim < 0,
                  "parameter '{}': an NF4 shard is cut from the whole quantized tensor "
                  "(upload_global), not quantized alone",
                  s.name);
        return upload_nf4(
            i, nf4_quantize(host, s.shape[0], s.shape[1], {s.nf4_block, s.nf4_double_quant}));
    }
    if (!trainable(i)) {
        if (sharded() && frozen_owner_[size_t(i)] != shard_rank_) return;  // another's (ZeRO-3)
        const DType t = frozen_dtype(specs()[size_t(i)], compute_);
        if (t == DType::F32) return be_.upload(frozen_[size_t(i)].data(), host, n * 4);
        std::vector<uint16_t> raw(n);
        convert_from_f32(raw.data(), t, host, n);
        return be_.upload(frozen_[size_t(i)].data(), raw.data(), n * 2);
    }
    if (sharded()) {  // this replica's part only; the windows are gathered before use
        const int64_t lo = std::max(offset(i), flat_.begin);
        const int64_t hi = std::min(offset(i) + int64_t(n), flat_.end);
        if (lo < hi)
            be_.upload(static_cast<float*>(master_.data()) + (lo - flat_.begin),
                       host + (lo - offset(i)), size_t(hi - lo) * sizeof(float));
        return;
    }
    Mat m = master(i);
    be_.upload(m.data, host, n * sizeof(float));
    if (compute_ != DType::F32)
        be_.copy(flat_view(compute_copy_.data(), compute_, offset(i), numel(), m.rows, m.cols), m);
}

void ParamStore::download_masters(float* host) const {
    be_.download(host + flat_.begin, master_.data(), master_.bytes());
}

void ParamStore::upload_masters(const float* host) {
    be_.upload(master_.data(), host + flat_.begin, master_.bytes());
    refresh_compute();
}

std::vector<float> ParamStore::download_grads() const {
    ETE_CHECK(!grads_sharded(), "download_grads: the gradients are sharded (ZeRO-2/3)");
    std::vector<float> g(static_cast<size_t>(numel()));
    be_.download(g.data(), grad_.data(), grad_.bytes());
    return g;
}

std::vector<float> ParamStore::download_grad(int i) const {
    ETE_ASSERT(trainable(i));
    ETE_CHECK(!grads_sharded(), "download_grad: the gradients are sharded (ZeRO-2/3)");
    std::vector<float> g(size_t(ParamTable::numel(i)));
    be_.download(g.data(), static_cast<const float*>(grad_.data()) + offset(i),
                 g.size() * sizeof(float));
    return g;
}

void ParamStore::upload_grads(const float* host) {
    ETE_CHECK(!grads_sharded(), "upload_grads: the gradients are sharded (ZeRO-2/3)");
    be_.upload(grad_.data(), host, grad_.bytes());
}

HostParams ParamStore::to_host() const {
    ETE_CHECK(!sharded(), "to_host: the parameters are sharded (ZeRO-3)");
    HostParams h(*this);
    download_masters(h.data());
    return h;
}

void ParamStore::from_host(const HostParams& h) {
    ETE_ASSERT(h.numel() == numel());
    upload_masters(h.data());
}

void ParamStore::refresh_compute() {
    if (compute_ == DType::F32 || numel() == 0 || sharded()) return;
    be_.copy(Mat(compute_copy_.data(), compute_, 1, numel()),
             CMat(master_.data(), DType::F32, 1, numel()));
}

void init_param(const ParamSpec& s, int tp_rank, int tp_size, uint64_t seed, float* p) {
    CounterRng rng(seed, s.name);
    for (const ShardRun& r : shard_runs(s, tp_rank, tp_size)) {
        float* out = p + r.local;
        if (r.global < 0 || s.init == ParamInit::Zeros) {
            std::fill(out, out + r.len, 0.0f);  // padding, or a zero-initialised tensor
        } else if (s.init == ParamInit::Ones) {
            std::fill(out, out + r.len, 1.0f);
        } else if (s.init == ParamInit::Uniform) {
            for (int64_t k = 0; k < r.len; ++k)
                out[k] = (2.0f * rng.uniform(uint64_t(r.global + k)) - 1.0f) * s.init_std;
        } else {
            // Bit-identical to init_std * normal(g) per element (g the global index).
            rng.normal_fill(out, uint64_t(r.global), r.len, s.init_std);
        }
    }
}

void HostParams::init(uint64_t seed) {
    for (int i = 0; i < size(); ++i)
        if (trainable(i)) init_param(specs()[size_t(i)], tp_rank(), tp_size(), seed, param(i));
}

void ParamStore::init(uint64_t seed) {
    std::vector<float> host;
    for (int i = 0; i < size(); ++i) {
        if (is_nf4(i) && tp_size() > 1) {  // the whole tensor, quantized, then this shard
            ParamSpec whole = specs()[size_t(i)];
            whole.shape = whole.global_shape;
            whole.shard = {};
            host.resize(size_t(shape_numel(whole.shape)));
            init_param(whole, 0, 1, seed, host.data());
            upload_global(i, host.data());
            continue;
        }
        host.resize(size_t(ParamTable::numel(i)));
        init_param(specs()[size_t(i)], tp_rank(), tp_size(), seed, host.data());
        upload(i, host.data());
    }
}

void ParamStore::init_trainable(uint64_t seed) {
    std::vector<float> host;
    for (int i = 0; i < size(); ++i) {
        if (!trainable(i)) continue;
        host.resize(size_t(ParamTable::numel(i)));
        init_param(specs()[size_t(i)], tp_rank(), tp_size(), seed, host.data());
        upload(i, host.data());
    }
}

Shape hf_shape(const ParamSpec& s) {
    if (!s.hf_transposed) return s.shape;
    return Shape(s.shape.rbegin(), s.shape.rend());
}

Shape hf_global_shape(const ParamSpec& s) {
    if (!s.hf_transposed) return s.global_shape;
    return Shape(s.global_shape.rbegin(), s.global_shape.rend());
}

void param_from_hf(const ParamSpec& s, const float* src, float* dst) {
    int64_t n = shape_numel(s.shape);
    if (!s.hf_transposed) {
        std::copy(src, src + n, dst);
        return;
    }
    int64_t rows = s.shape[0], cols = s.shape[1];  // ETE (out, in) <- HF (in, out)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * rows + r];
}

void param_to_hf(const ParamSpec& s, const float* src, float* dst) {
    int64_t n = shape_numel(s.shape);
    if (!s.hf_transposed) {
        std::copy(src, src + n, dst);
        return;
    }
    int64_t rows = s.shape[0], cols = s.shape[1];
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

void param_from_hf(HostParams& store, int i, const float* src) {
    param_from_hf(store.specs()[size_t(i)], src, store.param(i));
}

void param_to_hf(const HostParams& store, int i, float* dst) {
    param_to_hf(store.specs()[size_t(i)], store.param(i), dst);
}

}  // namespace ete
