// ete/backend/cpu/ref/ref_backend.cpp — the reference Backend: every op gathers its views into
// contiguous host arrays, runs the scalar template of ref_kernels.h on them and writes the
// outputs back, rounding once into each output's dtype.
//
// The compute type is double when every float view of the op is F64 (finite-difference tests
// run the whole backend in double) and float otherwise: a 16-bit input is widened exactly, so
// the reference computes the exact-input answer in (at least) fp32 and rounds it once — what an
// optimized kernel may be compared against. The kernels trust doc_start; the ops validate it
// first (an invalid one would make them read outside the tensors), as the CPU backend does.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <vector>

#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/ref/ref_kernels.h"
#include "ete/core/rng.h"

namespace ete {
namespace {

// Element i of a host float view of any float dtype, as double.
double get(const void* p, DType t, int64_t i) {
    switch (t) {
        case DType::F64:
            return static_cast<const double*>(p)[i];
        case DType::F32:
            return static_cast<const float*>(p)[i];
        case DType::BF16:
            return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case DType::F16:
            return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        default:
            throw_error(fmt::format("ref backend: dtype {} is not a float dtype", dtype_name(t)));
    }
}

void put(void* p, DType t, int64_t i, double v) {
    switch (t) {
        case DType::F64:
            static_cast<double*>(p)[i] = v;
            return;
        case DType::F32:
            static_cast<float*>(p)[i] = float(v);
            return;
        case DType::BF16:
            static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v));
            return;
        case DType::F16:
            static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v));
            return;
        default:
            throw_error(fmt::format("ref backend: dtype {} is not a float dtype", dtype_name(t)));
    }
}

// A contiguous (rows, cols) host copy of a view in compute type T; write() stores it back.
template <typename T>
class Host {
  public:
    explicit Host(CMat m, bool read = true) : view_(m), v_(size_t(m.rows * m.cols)) {
        if (!read || m.empty()) return;
        for (int64_t r = 0; r < m.rows; ++r)
            for (int64_t c = 0; c < m.cols; ++c)
                v_[size_t(r * m.cols + c)] = T(get(m.data, m.dtype, r * m.ld + c));
    }
    explicit Host(CVec v, bool read = true) : Host(CMat(v), read) {}
    T* data() { return view_.empty() ? nullptr : v_.data(); }
    void write(Mat m) const {
        for (int64_t r = 0; r < m.rows; ++r)
            for (int64_t c = 0; c < m.cols; ++c)
                put(m.data, m.dtype, r * m.ld + c, double(v_[size_t(r * m.cols + c)]));
    }
    void write(Vec v) const { write(Mat(v)); }

  private:
    CMat view_;
    std::vector<T> v_;
};

std::vector<int32_t> ints(CVec v) {
    if (v.empty()) return {};
    ETE_CHECK(v.dtype == DType::I32, "ref backend: ids must be I32, not {}", dtype_name(v.dtype));
    const auto* p = static_cast<const int32_t*>(v.data);
    return std::vector<int32_t>(p, p + v.n);
}

// f(T{}) with T = double when every given view is F64, else float.
template <typename F>
void compute(std::initializer_list<DType> dtypes, F&& f) {
    bool all64 = true;
    for (DType t : dtypes) all64 = all64 && t == DType::F64;
    if (all64) {
        f(double{});
    } else {
        f(float{});
    }
}

// A frozen norm has no weight gradient (an empty view): the templates then accumulate into this
// sink of C floats, which nobody reads.
Vec or_sink(Vec g, int64_t C, std::vector<float>& sink) {
    if (!g.empty()) return g;
    sink.assign(size_t(C), 0.0f);
    return {sink.data(), DType::F32, C};
}

// AttnDims whose doc_start points at a validated host copy.
AttnDims host_dims(AttnDims d, std::vector<int32_t>& doc) {
    doc = ints(d.doc_start);
    check_doc_start(doc.empty() ? nullptr : doc.data(), d.B, d.T);
    d.doc_start = doc.empty() ? CVec{} : CVec{doc.data(), DType::I32, int64_t(doc.size())};
    return d;
}

class RefBackend final : public Backend {
  public:
    std::string name() const override { return "ref"; }

    void* allocate(size_t bytes) override {
        void* p = std::aligned_alloc(64, std::max<size_t>((bytes + 63) / 64 * 64, 64));
        if (!p) throw std::bad_alloc();
        return p;
    }
    void deallocate(void* p) noexcept override { std::free(p); }
    void upload(void* dst, const void* src, size_t n) override { copy_bytes(dst, src, n); }
    void download(void* dst, const void* src, size_t n) override { copy_bytes(dst, src, n); }
    void copy_bytes(void* dst, const void* src, size_t n) override {
        if (n) std::memmove(dst, src, n);
    }
    void fill_bytes(void* dst, int value, size_t n) override {
        if (n) std::memset(dst, value, n);
    }
    void synchronize() override {}
    bool host_addressable() const override { return true; }

    void copy(Mat dst, CMat src) override {
        ETE_CHECK(dst.rows == src.rows && dst.cols == src.cols, "copy: shapes differ");
        Host<double>(src).write(dst);
    }
    void fill(Mat dst, float value) override {
        for (int64_t r = 0; r < dst.rows; ++r)
            for (int64_t c = 0; c < dst.cols; ++c) put(dst.data, dst.dtype, r * dst.ld + c, value);
    }
    void add(Mat x, CMat y) override {
        ETE_CHECK(x.rows == y.rows && x.cols == y.cols, "add: shapes differ");
        compute({x.dtype, y.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> X(x);
            Host<T> Y(y);
            for (int64_t i = 0; i < x.numel(); ++i) X.data()[i] += Y.data()[i];
            X.write(x);
        });
    }
    void scale(Vec x, float s) override {
        for (int64_t i = 0; i < x.n; ++i) put(x.data, x.dtype, i, get(x.data, x.dtype, i) * s);
    }
    // One Philox word per element, straight from the definition (backend.h DropoutMask).
    void dropout(Mat y, CMat x, const DropoutMask& m, bool accumulate) override {
        ETE_CHECK(y.rows == x.rows && y.cols == x.cols, "dropout: shapes differ");
        const CounterRng rng(m.seed, m.stream);
        compute({y.dtype, x.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> X(x), Y(y, accumulate);
            const T s = T(m.keep_scale());
            for (int64_t i = 0; i < x.rows; ++i)
                for (int64_t j = 0; j < x.cols; ++j) {
                    const uint64_t e = (m.row0 + uint64_t(i)) * m.row_stride + m.col0 + uint64_t(j);
                    const size_t k = size_t(i * x.cols + j);
                    T v = rng.word(e) >= m.threshold() ? X.data()[k] * s : T(0);
                    if constexpr (std::is_same_v<T, float>) v = fp32_rounded(v);  // no fma
                    Y.data()[k] = accumulate ? Y.data()[k] + v : v;
                }
            Y.write(y);
        });
    }
    double sum_squares(CVec x) override {
        double acc = 0;
        for (int64_t i = 0; i < x.n; ++i) {
            const double v = get(x.data, x.dtype, i);
            acc += v * v;
        }
        return acc;
    }

    void gemm(CMat a, bool ta, CMat b, bool tb, Mat c, float alpha, float beta) override {
        const int M = int(ta ? a.cols : a.rows), K = int(ta ? a.rows : a.cols);
        const int N = int(tb ? b.rows : b.cols);
        ETE_CHECK((tb ? b.cols : b.rows) == K && c.rows == M && c.cols == N,
                  "gemm: operand shapes do not match");
        compute({a.dtype, b.dtype, c.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> A(a), B(b), Cm(c, beta != 0.0f);
            ref::gemm<T>(ta, tb, M, N, K, T(alpha), A.data(), int(a.cols), B.data(), int(b.cols),
                         T(beta), Cm.data(), N);
            Cm.write(c);
        });
    }
    // The reference NF4 product: W dequantized whole (nf4_element), rounded to a's dtype like a
    // tile of the CPU backend, then the reference GEMM.
    void gemm_nf4(CMat a, const Nf4View& w, bool trans_w, Mat c, float alpha, float beta) override {
        std::vector<double> wd(size_t(w.numel()));
        Mat wm{wd.data(), DType::F64, w.rows, w.cols};
        std::vector<uint16_t> w16;
        if (a.dtype != DType::F64 && a.dtype != DType::F32) {
            w16.resize(wd.size());
            wm = Mat{w16.data(), a.dtype, w.rows, w.cols};
        }
        dequantize_nf4(wm, w, 0);
        gemm(a, false, wm, trans_w, c, alpha, beta);
    }
    void dequantize_nf4(Mat out, const Nf4View& w, int64_t row0) override {
        check_dequantize_nf4_args(out, w, row0);
        for (int64_t r = 0; r < out.rows; ++r)
            for (int64_t c = 0; c < out.cols; ++c)
                put(out.data, out.dtype, r * out.ld + c, nf4_element(w, (row0 + r) * w.cols + c));
    }
    void bias_forward(Mat y, CVec b) override {
        compute({y.dtype, b.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Y(y), Bv(b);
            ref::bias_forward<T>(Y.data(), Bv.data(), int(y.rows), int(y.cols), int(y.cols));
            Y.write(y);
        });
    }
    void bias_backward(Vec d_b, CMat d_y) override {
        compute({d_b.dtype, d_y.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Db(d_b), Dy(d_y);
            ref::bias_backward<T>(Db.data(), Dy.data(), int(d_y.rows), int(d_y.cols),
                                  int(d_y.cols));
            Db.write(d_b);
        });
    }
    void embedding_forward(Mat out, CVec ids, CMat table, int64_t first_id) override {
        std::vector<int32_t> id = ints(ids);
        compute({out.dtype, table.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), W(table);
            ref::embedding_forward<T>(O.data(), id.data(), W.data(), int(out.rows), int(out.cols),
                                      first_id, table.rows);
            O.write(out);
        });
    }
    void embedding_backward(Mat d_table, CMat d_out, CVec ids, int64_t first_id) override {
        std::vector<int32_t> id = ints(ids);
        compute({d_table.dtype, d_out.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Dt(d_table), Do(d_out);
            ref::embedding_backward<T>(Dt.data(), Do.data(), id.data(), int(d_out.rows),
                                       int(d_out.cols), first_id, d_table.rows);
            Dt.write(d_table);
        });
    }
    void pos_embedding_forward(Mat out, CMat wpe, CVec doc_start, int B, int T) override {
        std::vector<int32_t> doc = ints(doc_start);
        check_doc_start(doc.empty() ? nullptr : doc.data(), B, T);
        compute({out.dtype, wpe.dtype}, [&](auto t) {
            using E = decltype(t);
            Host<E> O(out), W(wpe);
            ref::pos_embedding_forward<E>(O.data(), W.data(), doc.empty() ? nullptr : doc.data(), B,
                                          T, int(out.cols));
            O.write(out);
        });
    }
    void pos_embedding_backward(Mat d_wpe, CMat d_out, CVec doc_start, int B, int T) override {
        std::vector<int32_t> doc = ints(doc_start);
        check_doc_start(doc.empty() ? nullptr : doc.data(), B, T);
        compute({d_wpe.dtype, d_out.dtype}, [&](auto t) {
            using E = decltype(t);
            Host<E> Dw(d_wpe), Do(d_out);
            ref::pos_embedding_backward<E>(Dw.data(), Do.data(), doc.empty() ? nullptr : doc.data(),
                                           B, T, int(d_out.cols));
            Dw.write(d_wpe);
        });
    }
    void rmsnorm_forward(Mat out, Vec rstd, CMat x, CVec w, float eps) override {
        compute({out.dtype, rstd.dtype, x.dtype, w.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), R(rstd, false), X(x), W(w);
            ref::rmsnorm_forward<T>(O.data(), R.data(), X.data(), W.data(), int(x.rows),
                                    int(x.cols), eps);
            O.write(out);
            R.write(rstd);
        });
    }
    void rmsnorm_backward(Mat d_x, Vec d_w, CMat d_out, CMat x, CVec w, CVec rstd) override {
        std::vector<float> sink;
        d_w = or_sink(d_w, x.cols, sink);
        compute({d_x.dtype, d_w.dtype, d_out.dtype, x.dtype, w.dtype, rstd.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Dx(d_x), Dw(d_w), Do(d_out), X(x), W(w), R(rstd);
            ref::rmsnorm_backward<T>(Dx.data(), Dw.data(), Do.data(), X.data(), W.data(), R.data(),
                                     int(x.rows), int(x.cols));
            Dx.write(d_x);
            Dw.write(d_w);
        });
    }
    void layernorm_forward(Mat out, Vec mean, Vec rstd, CMat x, CVec w, CVec b,
                           float eps) override {
        compute({out.dtype, mean.dtype, rstd.dtype, x.dtype, w.dtype, b.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), Mn(mean, false), R(rstd, false), X(x), W(w), Bv(b);
            ref::layernorm_forward<T>(O.data(), Mn.data(), R.data(), X.data(), W.data(), Bv.data(),
                                      int(x.rows), int(x.cols), eps);
            O.write(out);
            Mn.write(mean);
            R.write(rstd);
        });
    }
    void layernorm_backward(Mat d_x, Vec d_w, Vec d_b, CMat d_out, CMat x, CVec w, CVec mean,
                            CVec rstd) override {
        std::vector<float> sink_w, sink_b;
        d_w = or_sink(d_w, x.cols, sink_w);
        d_b = or_sink(d_b, x.cols, sink_b);
        compute({d_x.dtype, d_w.dtype, d_b.dtype, d_out.dtype, x.dtype, w.dtype, mean.dtype,
                 rstd.dtype},
                [&](auto t) {
                    using T = decltype(t);
                    Host<T> Dx(d_x), Dw(d_w), Db(d_b), Do(d_out), X(x), W(w), Mn(mean), R(rstd);
                    ref::layernorm_backward<T>(Dx.data(), Dw.data(), Db.data(), Do.data(), X.data(),
                                               W.data(), Mn.data(), R.data(), int(x.rows),
                                               int(x.cols));
                    Dx.write(d_x);
                    Dw.write(d_w);
                    Db.write(d_b);
                });
    }
    void rope_forward(Mat qkv, CMat cos, CMat sin, AttnDims d) override {
        rope(qkv, cos, sin, d, 1);
    }
    void rope_backward(Mat d_qkv, CMat cos, CMat sin, AttnDims d) override {
        rope(d_qkv, cos, sin, d, -1);
    }
    void attention_forward(Mat out, Vec lse, CMat qkv, AttnDims d, float scale) override {
        std::vector<int32_t> doc;
        AttnDims hd = host_dims(d, doc);
        compute({out.dtype, lse.dtype, qkv.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), L(lse, false), Q(qkv);
            ref::attention_forward<T>(O.data(), L.data(), Q.data(), hd, scale);
            O.write(out);
            L.write(lse);
        });
    }
    void attention_backward(Mat d_qkv, CMat d_out, CMat out, CVec lse, CMat qkv, AttnDims d,
                            float scale) override {
        std::vector<int32_t> doc;
        AttnDims hd = host_dims(d, doc);
        compute({d_qkv.dtype, d_out.dtype, out.dtype, lse.dtype, qkv.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Dq(d_qkv, false), Do(d_out), O(out), L(lse), Q(qkv);
            ref::attention_backward<T>(Dq.data(), Do.data(), O.data(), L.data(), Q.data(), hd,
                                       scale);
            Dq.write(d_qkv);
        });
    }
    void swiglu_forward(Mat out, CMat gate_up) override {
        compute({out.dtype, gate_up.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), G(gate_up);
            ref::swiglu_forward<T>(O.data(), G.data(), int(out.rows), int(out.cols));
            O.write(out);
        });
    }
    void swiglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) override {
        compute({d_gate_up.dtype, d_out.dtype, gate_up.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Dg(d_gate_up, false), Do(d_out), G(gate_up);
            ref::swiglu_backward<T>(Dg.data(), Do.data(), G.data(), int(d_out.rows),
                                    int(d_out.cols));
            Dg.write(d_gate_up);
        });
    }
    void geglu_forward(Mat out, CMat gate_up) override {
        compute({out.dtype, gate_up.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), G(gate_up);
            ref::geglu_forward<T>(O.data(), G.data(), int(out.rows), int(out.cols));
            O.write(out);
        });
    }
    void geglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) override {
        compute({d_gate_up.dtype, d_out.dtype, gate_up.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Dg(d_gate_up, false), Do(d_out), G(gate_up);
            ref::geglu_backward<T>(Dg.data(), Do.data(), G.data(), int(d_out.rows),
                                   int(d_out.cols));
            Dg.write(d_gate_up);
        });
    }
    void gelu_forward(Mat out, CMat x) override {
        compute({out.dtype, x.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> O(out, false), X(x);
            ref::gelu_forward<T>(O.data(), X.data(), x.numel());
            O.write(out);
        });
    }
    void gelu_backward(Mat d_x, CMat d_out, CMat x) override {
        compute({d_x.dtype, d_out.dtype, x.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Dx(d_x, false), Do(d_out), X(x);
            ref::gelu_backward<T>(Dx.data(), Do.data(), X.data(), x.numel());
            Dx.write(d_x);
        });
    }
    void cross_entropy_forward_backward(Mat logits, Vec losses, CVec targets, float d_scale,
                                        Mat d_logits) override {
        std::vector<int32_t> tg = ints(targets);
        check_targets(tg, logits.cols);
        compute({logits.dtype, losses.dtype, d_logits.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Z(logits), L(losses, false);
            ref::cross_entropy_forward_backward<T>(Z.data(), L.data(), tg.data(), int(logits.rows),
                                                   int(logits.cols), d_scale);
            L.write(losses);
            Z.write(d_logits);
        });
    }
    void softcap_forward(Mat x, Mat d_cap, float cap) override {
        ETE_CHECK(cap > 0, "softcap_forward: cap {} must be > 0", cap);
        Host<double> X(x), Dc(d_cap.empty() ? x : d_cap, false);
        for (size_t i = 0; i < size_t(x.numel()); ++i) {
            const double t = std::tanh(X.data()[i] / cap);
            X.data()[i] = cap * t;
            Dc.data()[i] = 1.0 - t * t;
        }
        X.write(x);
        if (!d_cap.empty()) Dc.write(d_cap);
    }
    void softcap_backward(Mat d_x, CMat d_cap) override {
        ETE_CHECK(d_x.rows == d_cap.rows && d_x.cols == d_cap.cols,
                  "softcap_backward: views of one shape");
        Host<double> D(d_x), F(d_cap);
        for (size_t i = 0; i < size_t(d_x.numel()); ++i) D.data()[i] *= F.data()[i];
        D.write(d_x);
    }
    void cross_entropy_forward(Vec losses, CMat logits, CVec targets) override {
        std::vector<int32_t> tg = ints(targets);
        check_targets(tg, logits.cols);
        compute({logits.dtype, losses.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> Z(logits), L(losses, false);
            ref::cross_entropy_forward<T>(L.data(), Z.data(), tg.data(), int(logits.rows),
                                          int(logits.cols));
            L.write(losses);
        });
    }
    void cross_entropy_stats(Vec lse, Vec target_logit, CMat logits, CVec targets) override {
        std::vector<int32_t> tg = ints(targets);
        compute({lse.dtype, target_logit.dtype, logits.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> L(lse, false), Zt(target_logit, false), Z(logits);
            ref::cross_entropy_stats<T>(L.data(), Zt.data(), Z.data(), tg.data(), int(logits.rows),
                                        int(logits.cols));
            L.write(lse);
            Zt.write(target_logit);
        });
    }
    void cross_entropy_backward(Mat d_logits, CMat logits, CVec lse, CVec targets,
                                float d_scale) override {
        std::vector<int32_t> tg = ints(targets);
        compute({d_logits.dtype, logits.dtype, lse.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> D(d_logits, false), Z(logits), L(lse);
            ref::cross_entropy_backward<T>(D.data(), Z.data(), L.data(), tg.data(),
                                           int(logits.rows), int(logits.cols), d_scale);
            D.write(d_logits);
        });
    }
    void gemm_s8(CMat a, CMat w, Mat c) override {
        ETE_CHECK((a.dtype == DType::I8 || a.dtype == DType::U8) && w.dtype == DType::I8 &&
                      c.dtype == DType::I32 && a.cols == w.cols && c.rows == a.rows &&
                      c.cols == w.rows && a.cols <= 65536,
                  "gemm_s8: shapes or dtypes do not fit");
        for (int64_t m = 0; m < a.rows; ++m)
            for (int64_t n = 0; n < w.rows; ++n)
                static_cast<int32_t*>(c.data)[m * c.ld + n] = int32_t(s8_dot(a, m, w, n, 0));
    }
    // QAT: plain loops over the definitions of core/fake_quant.h, in fp32 whatever the dtypes
    // (fake quantization is defined by fp32 arithmetic, as in PyTorch).
    void min_max(Vec lo, Vec hi, CMat x, int64_t group) override {
        const int64_t per_row = check_min_max_args(lo, hi, x, group);
        auto* l = static_cast<float*>(lo.data);
        auto* h = static_cast<float*>(hi.data);
        for (int64_t r = 0; r < x.rows; ++r)
            for (int64_t b = 0; b < per_row; ++b) {
                float mn = INFINITY, mx = -INFINITY;
                for (int64_t j = b * group; j < (b + 1) * group; ++j) {
                    const float v = float(get(x.data, x.dtype, r * x.ld + j));
                    if (!std::isfinite(v)) continue;
                    mn = std::min(mn, v);
                    mx = std::max(mx, v);
                }
                l[r * per_row + b] = mn;
                h[r * per_row + b] = mx;
            }
    }
    void quant_params(Vec scale, Vec zero, CVec lo, CVec hi, const QuantGrid& g) override {
        ETE_CHECK(scale.n == lo.n && zero.n == lo.n && hi.n == lo.n,
                  "quant_params: lengths differ");
        for (int64_t i = 0; i < lo.n; ++i) {
            float l = static_cast<const float*>(lo.data)[i],
                  h = static_cast<const float*>(hi.data)[i];
            if (!(l <= h)) l = h = 0.0f;
            ete::quant_params(l, h, g, static_cast<float*>(scale.data) + i,
                              static_cast<float*>(zero.data) + i);
        }
    }
    void fake_quant(Mat y, CMat x, CVec scale, CVec zero, Vec mask, int64_t group,
                    const QuantGrid& g) override {
        const int64_t per_row = check_fake_quant_args(y, x, scale, zero, mask, group, g);
        const auto* s = static_cast<const float*>(scale.data);
        const auto* z = static_cast<const float*>(zero.data);
        auto* bits = static_cast<uint8_t*>(mask.data);
        const int64_t row_bytes = fake_quant_mask_row_bytes(x.cols);
        if (bits) std::memset(bits, 0, size_t(mask.n));
        for (int64_t r = 0; r < x.rows; ++r)
            for (int64_t c = 0; c < x.cols; ++c) {
                const int64_t k = scale.n == 1 ? 0 : r * per_row + c / group;
                bool in;
                const float v =
                    fake_quant_value(float(get(x.data, x.dtype, r * x.ld + c)), s[k], 1.0f / s[k],
                                     z[k], float(g.qmin), float(g.qmax), &in);
                put(y.data, y.dtype, r * y.ld + c, v);
                if (bits && in) bits[r * row_bytes + c / 8] |= uint8_t(1u << (c % 8));
            }
    }
    void fake_quant_backward(Mat d_x, CMat d_y, CVec mask) override {
        ETE_CHECK(d_x.rows == d_y.rows && d_x.cols == d_y.cols &&
                      mask.n == fake_quant_mask_bytes(d_y.rows, d_y.cols),
                  "fake_quant_backward: shapes differ");
        const auto* bits = static_cast<const uint8_t*>(mask.data);
        const int64_t row_bytes = fake_quant_mask_row_bytes(d_y.cols);
        for (int64_t r = 0; r < d_y.rows; ++r)
            for (int64_t c = 0; c < d_y.cols; ++c) {
                const bool keep = (bits[r * row_bytes + c / 8] >> (c % 8)) & 1;
                put(d_x.data, d_x.dtype, r * d_x.ld + c,
                    keep ? get(d_y.data, d_y.dtype, r * d_y.ld + c) : 0.0);
            }
    }
    void fake_quant_scale_grad(Vec d_scale, CMat x, CMat d_y, CVec scale, CVec zero, int64_t group,
                               const QuantGrid& g) override {
        const int64_t per_row =
            check_fake_quant_scale_grad_args(d_scale, x, d_y, scale, zero, group, g);
        const auto* s = static_cast<const float*>(scale.data);
        const auto* z = static_cast<const float*>(zero.data);
        for (int64_t r = 0; r < x.rows; ++r)
            for (int64_t b = 0; b < per_row; ++b) {
                const int64_t k = scale.n == 1 ? 0 : r * per_row + b;
                double sum = 0;
                for (int64_t c = b * group; c < (b + 1) * group; ++c)
                    sum += double(get(d_y.data, d_y.dtype, r * d_y.ld + c)) *
                           double(lsq_scale_slope(float(get(x.data, x.dtype, r * x.ld + c)),
                                                  1.0f / s[k], z[k], float(g.qmin), float(g.qmax)));
                static_cast<float*>(d_scale.data)[r * per_row + b] = float(sum);
            }
    }
    // The integer model: quantize_value per element; the dequantization in int64 then one
    // fp32 product per element.
    using Backend::gemm_s8;
    void quantize_s8(Mat q, CMat x, CVec scale, CVec zero, const QuantGrid& g) override {
        check_quantize_s8_args(q, x, scale, zero, g);
        const auto* s = static_cast<const float*>(scale.data);
        const auto* z = static_cast<const float*>(zero.data);
        for (int64_t r = 0; r < x.rows; ++r) {
            const int64_t k = scale.n == 1 ? 0 : r;
            for (int64_t c = 0; c < x.cols; ++c) {
                const float v = quantize_value(float(get(x.data, x.dtype, r * x.ld + c)),
                                               1.0f / s[k], z[k], float(g.qmin), float(g.qmax));
                if (q.dtype == DType::U8) {
                    static_cast<uint8_t*>(q.data)[r * q.ld + c] = uint8_t(int(v) + 128);
                } else {
                    static_cast<int8_t*>(q.data)[r * q.ld + c] = int8_t(v);
                }
            }
        }
    }
    void gemm_s8_scaled(CMat a, const S8Weight& pw, Mat y, CVec scale, int32_t zero,
                        float beta) override {
        const CMat w = pw.plain();
        check_gemm_s8_scaled_args(a, w, y, scale, zero, beta);
        const auto* s = static_cast<const float*>(scale.data);
        for (int64_t m = 0; m < a.rows; ++m)
            for (int64_t n = 0; n < w.rows; ++n) {
                float& out = static_cast<float*>(y.data)[m * y.ld + n];
                out = dequant_value(int32_t(s8_dot(a, m, w, n, zero)), 1.0f, s[n], beta,
                                    beta == 0.0f ? 0.0f : out);
            }
    }
    void dequantize_s32(Mat y, CMat acc, CVec a_scale, CVec a_zero, int a_offset, CVec w_scale,
                        CVec w_sum, float beta) override {
        check_dequantize_s32_args(y, acc, a_scale, a_zero, a_offset, w_scale, w_sum);
        const auto* as = static_cast<const float*>(a_scale.data);
        const auto* az = static_cast<const float*>(a_zero.data);
        const auto* ws = static_cast<const float*>(w_scale.data);
        const auto* wsum = static_cast<const int32_t*>(w_sum.data);
        const auto* a = static_cast<const int32_t*>(acc.data);
        for (int64_t m = 0; m < acc.rows; ++m) {
            const int64_t k = a_scale.n == 1 ? 0 : m;
            const int64_t zo = int64_t(az[k]) + a_offset;
            for (int64_t n = 0; n < acc.cols; ++n) {
                const int64_t d = int64_t(a[m * acc.ld + n]) - zo * int64_t(wsum[n]);
                const float old = beta == 0.0f ? 0.0f : float(get(y.data, y.dtype, m * y.ld + n));
                put(y.data, y.dtype, m * y.ld + n,
                    dequant_value(int32_t(d), as[k], ws[n], beta, old));
            }
        }
    }
    void adamw8bit_step(Vec p, CVec g, Vec m_codes, Vec v_codes, Vec m_absmax, Vec v_absmax,
                        int64_t block, const AdamWStep& s, Vec p_compute) override {
        const int64_t n = p.n, nb = block > 0 ? (n + block - 1) / block : 0;
        ETE_CHECK(block > 0 && g.n == n && m_codes.n == n && v_codes.n == n && m_absmax.n == nb &&
                      v_absmax.n == nb && p.dtype == DType::F32 && g.dtype == DType::F32 &&
                      m_codes.dtype == DType::U8 && v_codes.dtype == DType::U8 &&
                      m_absmax.dtype == DType::F32 && v_absmax.dtype == DType::F32,
                  "ref adamw8bit_step: expected F32 p, g (n = {}), U8 codes of n, F32 absmax of "
                  "ceil(n / block) = {}",
                  n, nb);
        auto* pp = static_cast<float*>(p.data);
        ref::adamw8bit_step(pp, static_cast<const float*>(g.data),
                            static_cast<uint8_t*>(m_codes.data),
                            static_cast<uint8_t*>(v_codes.data), static_cast<float*>(m_absmax.data),
                            static_cast<float*>(v_absmax.data), n, block, s);
        for (int64_t i = 0; !p_compute.empty() && i < n; ++i)
            put(p_compute.data, p_compute.dtype, i, double(pp[i]));
    }
    void adamw_step(Vec p, CVec g, Vec m, Vec v, const AdamWStep& s, Vec p_compute) override {
        compute({p.dtype, g.dtype, m.dtype, v.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> P(p), G(g), Mm(m), Vv(v);
            ref::adamw_step<T>(P.data(), G.data(), Mm.data(), Vv.data(), p.n, s.lr, s.beta1,
                               s.beta2, s.eps, s.weight_decay, s.bc1, s.bc2, s.grad_scale);
            P.write(p);
            Mm.write(m);
            Vv.write(v);
            if (!p_compute.empty()) P.write(p_compute);
        });
    }

  private:
    // Σ_k (a[m, k] − zero) · w[n, k] of an I8 or U8 a and an I8 w, exactly.
    static int64_t s8_dot(CMat a, int64_t m, CMat w, int64_t n, int32_t zero) {
        int64_t acc = 0;
        for (int64_t k = 0; k < a.cols; ++k) {
            const int64_t x = a.dtype == DType::U8
                                  ? static_cast<const uint8_t*>(a.data)[m * a.ld + k]
                                  : static_cast<const int8_t*>(a.data)[m * a.ld + k];
            acc += (x - zero) * static_cast<const int8_t*>(w.data)[n * w.ld + k];
        }
        return acc;
    }
    void rope(Mat x, CMat cos, CMat sin, AttnDims d, int sign) {
        std::vector<int32_t> doc;
        AttnDims hd = host_dims(d, doc);
        compute({x.dtype, cos.dtype, sin.dtype}, [&](auto t) {
            using T = decltype(t);
            Host<T> X(x), Cs(cos), Sn(sin);
            ref::rope_apply<T>(X.data(), Cs.data(), Sn.data(), int(cos.cols), hd, sign);
            X.write(x);
        });
    }
    static void check_targets(const std::vector<int32_t>& t, int64_t V) {
        for (size_t n = 0; n < t.size(); ++n)
            ETE_CHECK(t[n] == kIgnoreIndex || (t[n] >= 0 && t[n] < V),
                      "cross_entropy: target {} of row {} is outside [0, {}) and not the ignore "
                      "index {}",
                      t[n], n, V, kIgnoreIndex);
    }
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend() {
    return std::make_unique<RefBackend>();
}

}  // namespace ete
