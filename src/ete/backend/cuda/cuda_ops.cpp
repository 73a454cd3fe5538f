// ete/backend/cuda/cuda_ops.cpp — the CUDA backend's ops: each checks its views' dtypes, converts
// them to kernels.h's plain structs and launches on the backend's stream (nothing waits, except
// sum_squares, which returns a host value).
#include <algorithm>
#include <cmath>
#include <string>

#include "ete/backend/cuda/cuda_backend.h"
#include "ete/core/error.h"

namespace ete::cuda {

namespace {

Attn attn_dims(const AttnDims& d, const char* op) {
    ETE_CHECK(d.window >= 0, "[cuda] {}: window {}: expected >= 0", op, d.window);
    ETE_CHECK(d.softcap >= 0 && std::isfinite(d.softcap),
              "[cuda] {}: softcap {}: expected a finite number >= 0", op, d.softcap);
    return {d.B, d.T, d.H, d.KV, d.D, i32(d.doc_start, op), d.window, d.softcap};
}

void check_attention(const AttnDims& d, ete::CMat qkv, const char* op) {
    ETE_CHECK(d.KV >= 1 && d.H % d.KV == 0 && d.D >= 1 && d.D <= attention_max_head_dim(),
              "[cuda] {}: H {}, KV {}, D {}: expected KV dividing H and D <= {}", op, d.H, d.KV,
              d.D, attention_max_head_dim());
    ETE_CHECK(qkv.rows == int64_t(d.B) * d.T && qkv.cols == d.qkv_stride(),
              "[cuda] {}: qkv ({}, {}), expected ({}, {})", op, qkv.rows, qkv.cols,
              int64_t(d.B) * d.T, d.qkv_stride());
}

// The kernel reads (T, R/2) tables at stride R/2: contiguous, R <= D.
void check_rope_tables(ete::CMat cos, ete::CMat sin, const AttnDims& d, const char* op) {
    ETE_CHECK(cos.rows >= d.T && sin.rows == cos.rows && cos.cols >= 1 && sin.cols == cos.cols &&
                  2 * cos.cols <= d.D && cos.ld == cos.cols && sin.ld == sin.cols,
              "[cuda] {}: cos/sin ({}, {}): expected contiguous (>= {}, R/2) tables, R <= {}", op,
              cos.rows, cos.cols, d.T, d.D);
}

}  // namespace

void CudaBackend::copy(ete::Mat dst, ete::CMat src) {
    ETE_CHECK(dst.rows == src.rows && dst.cols == src.cols, "[cuda] copy: ({}, {}) into ({}, {})",
              src.rows, src.cols, dst.rows, dst.cols);
    if (dst.dtype == src.dtype) {  // any dtype, strided rows: one 2D copy
        const size_t es = dst.elem_size();
        if (dst.numel() == 0) return;
        ETE_CU(cudaMemcpy2DAsync(dst.data, size_t(dst.ld) * es, src.data, size_t(src.ld) * es,
                                 size_t(dst.cols) * es, size_t(dst.rows), cudaMemcpyDeviceToDevice,
                                 stream_));
        return;
    }
    cuda::convert(stream_, mat(dst, "copy"), cmat(src, "copy"));
    check_launch("copy");
}

void CudaBackend::fill(ete::Mat dst, float value) {
    cuda::fill(stream_, mat(dst, "fill"), value);
    check_launch("fill");
}

void CudaBackend::add(ete::Mat x, ete::CMat y) {
    cuda::add(stream_, mat(x, "add"), cmat(y, "add"));
    check_launch("add");
}

void CudaBackend::scale(Vec x, float s) {
    cuda::scale(stream_, mat(x, "scale"), s);
    check_launch("scale");
}

double CudaBackend::sum_squares(CVec x) {
    const cuda::CMat m = cmat(x, "sum_squares");
    const int64_t work = sum_squares_work(m);
    auto* buf = static_cast<double*>(scratch(size_t(work + 1) * sizeof(double)));
    cuda::sum_squares(stream_, m, buf + work, buf, work);
    check_launch("sum_squares");
    ETE_CU(
        cudaMemcpyAsync(host_double_, buf + work, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    ETE_CU(cudaStreamSynchronize(stream_));
    return *host_double_;
}

void CudaBackend::bias_forward(ete::Mat y, CVec b) {
    cuda::bias_forward(stream_, mat(y, "bias_forward"), cmat(b, "bias_forward"));
    check_launch("bias_forward");
}

void CudaBackend::bias_backward(Vec d_b, ete::CMat d_y) {
    f32(d_b, "bias_backward");
    auto* work = static_cast<float*>(scratch(size_t(column_sum_work(d_y.rows, d_y.cols)) * 4));
    cuda::bias_backward(stream_, mat(d_b, "bias_backward"), cmat(d_y, "bias_backward"), work);
    check_launch("bias_backward");
}

void CudaBackend::embedding_forward(ete::Mat out, CVec ids, ete::CMat table, int64_t first_id) {
    cuda::embedding_forward(stream_, mat(out, "embedding_forward"), i32(ids, "embedding_forward"),
                            cmat(table, "embedding_forward"), first_id);
    check_launch("embedding_forward");
}

void CudaBackend::embedding_backward(ete::Mat d_table, ete::CMat d_out, CVec ids,
                                     int64_t first_id) {
    cuda::embedding_backward(stream_, mat(d_table, "embedding_backward"),
                             cmat(d_out, "embedding_backward"), i32(ids, "embedding_backward"),
                             first_id);
    check_launch("embedding_backward");
}

void CudaBackend::pos_embedding_forward(ete::Mat out, ete::CMat wpe, CVec doc_start, int B, int T) {
    cuda::pos_embedding_forward(stream_, mat(out, "pos_embedding_forward"),
                                cmat(wpe, "pos_embedding_forward"),
                                i32(doc_start, "pos_embedding_forward"), B, T);
    check_launch("pos_embedding_forward");
}

void CudaBackend::pos_embedding_backward(ete::Mat d_wpe, ete::CMat d_out, CVec doc_start, int B,
                                         int T) {
    cuda::pos_embedding_backward(stream_, mat(d_wpe, "pos_embedding_backward"),
                                 cmat(d_out, "pos_embedding_backward"),
                                 i32(doc_start, "pos_embedding_backward"), B, T);
    check_launch("pos_embedding_backward");
}

void CudaBackend::rmsnorm_forward(ete::Mat out, Vec rstd, ete::CMat x, CVec w, float eps) {
    cuda::rmsnorm_forward(stream_, mat(out, "rmsnorm_forward"), f32(rstd, "rmsnorm_forward"),
                          cmat(x, "rmsnorm_forward"), cmat(w, "rmsnorm_forward"), eps);
    check_launch("rmsnorm_forward");
}

void CudaBackend::rmsnorm_backward(ete::Mat d_x, Vec d_w, ete::CMat d_out, ete::CMat x, CVec w,
                                   CVec rstd) {
    const char* op = "rmsnorm_backward";
    cuda::Mat dw{f32(d_w, op), Ft::F32, 1, x.cols, x.cols};
    auto* work = d_w.empty()
                     ? nullptr
                     : static_cast<float*>(scratch(size_t(column_sum_work(x.rows, x.cols)) * 4));
    cuda::rmsnorm_backward(stream_, mat(d_x, op), dw, cmat(d_out, op), cmat(x, op), cmat(w, op),
                           f32(rstd, op), work);
    check_launch(op);
}

void CudaBackend::layernorm_forward(ete::Mat out, Vec mean, Vec rstd, ete::CMat x, CVec w, CVec b,
                                    float eps) {
    const char* op = "layernorm_forward";
    cuda::layernorm_forward(stream_, mat(out, op), f32(mean, op), f32(rstd, op), cmat(x, op),
                            cmat(w, op), cmat(b, op), eps);
    check_launch(op);
}

void CudaBackend::layernorm_backward(ete::Mat d_x, Vec d_w, Vec d_b, ete::CMat d_out, ete::CMat x,
                                     CVec w, CVec mean, CVec rstd) {
    const char* op = "layernorm_backward";
    cuda::Mat dw{f32(d_w, op), Ft::F32, 1, x.cols, x.cols};
    cuda::Mat db{f32(d_b, op), Ft::F32, 1, x.cols, x.cols};
    auto* work = static_cast<float*>(scratch(size_t(2 * column_sum_work(x.rows, x.cols)) * 4));
    cuda::layernorm_backward(stream_, mat(d_x, op), dw, db, cmat(d_out, op), cmat(x, op),
                             cmat(w, op), f32(mean, op), f32(rstd, op), work);
    check_launch(op);
}

void CudaBackend::rope_forward(ete::Mat qkv, ete::CMat cos, ete::CMat sin, AttnDims d) {
    const char* op = "rope_forward";
    check_rope_tables(cos, sin, d, op);
    cuda::rope(stream_, mat(qkv, op), f32(cos.flat(), op), f32(sin.flat(), op), int(cos.cols),
               attn_dims(d, op), false);
    check_launch(op);
}

void CudaBackend::rope_backward(ete::Mat d_qkv, ete::CMat cos, ete::CMat sin, AttnDims d) {
    const char* op = "rope_backward";
    check_rope_tables(cos, sin, d, op);
    cuda::rope(stream_, mat(d_qkv, op), f32(cos.flat(), op), f32(sin.flat(), op), int(cos.cols),
               attn_dims(d, op), true);
    check_launch(op);
}

void CudaBackend::attention_forward(ete::Mat out, Vec lse, ete::CMat qkv, AttnDims d, float scale) {
    const char* op = "attention_forward";
    check_attention(d, qkv, op);
    cuda::attention_forward(stream_, mat(out, op), f32(lse, op), cmat(qkv, op), attn_dims(d, op),
                            scale);
    check_launch(op);
}

void CudaBackend::attention_backward(ete::Mat d_qkv, ete::CMat d_out, ete::CMat out, CVec lse,
                                     ete::CMat qkv, AttnDims d, float scale) {
    const char* op = "attention_backward";
    check_attention(d, qkv, op);
    const Attn a = attn_dims(d, op);
    auto* work = static_cast<float*>(scratch(size_t(attention_backward_work(a)) * 4));
    cuda::attention_backward(stream_, mat(d_qkv, op), cmat(d_out, op), cmat(out, op), f32(lse, op),
                             cmat(qkv, op), a, scale, work);
    check_launch(op);
}

void CudaBackend::swiglu_forward(ete::Mat out, ete::CMat gate_up) {
    cuda::swiglu_forward(stream_, mat(out, "swiglu_forward"), cmat(gate_up, "swiglu_forward"));
    check_launch("swiglu_forward");
}

void CudaBackend::swiglu_backward(ete::Mat d_gate_up, ete::CMat d_out, ete::CMat gate_up) {
    const char* op = "swiglu_backward";
    cuda::swiglu_backward(stream_, mat(d_gate_up, op), cmat(d_out, op), cmat(gate_up, op));
    check_launch(op);
}

void CudaBackend::geglu_forward(ete::Mat out, ete::CMat gate_up) {
    cuda::geglu_forward(stream_, mat(out, "geglu_forward"), cmat(gate_up, "geglu_forward"));
    check_launch("geglu_forward");
}

void CudaBackend::geglu_backward(ete::Mat d_gate_up, ete::CMat d_out, ete::CMat gate_up) {
    const char* op = "geglu_backward";
    cuda::geglu_backward(stream_, mat(d_gate_up, op), cmat(d_out, op), cmat(gate_up, op));
    check_launch(op);
}

void CudaBackend::softcap_forward(ete::Mat x, ete::Mat d_cap, float cap) {
    const char* op = "softcap_forward";
    ETE_CHECK(x.dtype == DType::F32 && cap > 0 && std::isfinite(cap) &&
                  (d_cap.empty() ||
                   (d_cap.dtype == DType::F32 && d_cap.rows == x.rows && d_cap.cols == x.cols)),
              "[cuda] {}: expected F32 views of one shape and a finite cap > 0", op);
    cuda::softcap_forward(stream_, mat(x, op), d_cap.empty() ? cuda::Mat{} : mat(d_cap, op), cap);
    check_launch(op);
}

void CudaBackend::softcap_backward(ete::Mat d_x, ete::CMat d_cap) {
    const char* op = "softcap_backward";
    ETE_CHECK(d_x.dtype == DType::F32 && d_cap.dtype == DType::F32 && d_x.rows == d_cap.rows &&
                  d_x.cols == d_cap.cols,
              "[cuda] {}: expected F32 views of one shape", op);
    cuda::softcap_backward(stream_, mat(d_x, op), cmat(d_cap, op));
    check_launch(op);
}

void CudaBackend::gelu_forward(ete::Mat out, ete::CMat x) {
    cuda::gelu_forward(stream_, mat(out, "gelu_forward"), cmat(x, "gelu_forward"));
    check_launch("gelu_forward");
}

void CudaBackend::gelu_backward(ete::Mat d_x, ete::CMat d_out, ete::CMat x) {
    const char* op = "gelu_backward";
    cuda::gelu_backward(stream_, mat(d_x, op), cmat(d_out, op), cmat(x, op));
    check_launch(op);
}

void CudaBackend::cross_entropy_forward_backward(ete::Mat logits, Vec losses, CVec targets,
                                                 float d_scale, ete::Mat d_logits) {
    const char* op = "cross_entropy_forward_backward";
    ETE_CHECK(logits.dtype == DType::F32, "[cuda] {}: logits must be F32", op);
    cuda::cross_entropy_forward_backward(stream_, mat(logits, op), f32(losses, op),
                                         i32(targets, op), d_scale, mat(d_logits, op));
    check_launch(op);
}

void CudaBackend::cross_entropy_forward(Vec losses, ete::CMat logits, CVec targets) {
    const char* op = "cross_entropy_forward";
    ETE_CHECK(logits.dtype == DType::F32, "[cuda] {}: logits must be F32", op);
    cuda::cross_entropy_forward(stream_, f32(losses, op), cmat(logits, op), i32(targets, op));
    check_launch(op);
}

void CudaBackend::cross_entropy_stats(Vec lse, Vec target_logit, ete::CMat logits, CVec targets) {
    const char* op = "cross_entropy_stats";
    ETE_CHECK(logits.dtype == DType::F32, "[cuda] {}: logits must be F32", op);
    cuda::cross_entropy_stats(stream_, f32(lse, op), f32(target_logit, op), cmat(logits, op),
                              i32(targets, op));
    check_launch(op);
}

void CudaBackend::cross_entropy_backward(ete::Mat d_logits, ete::CMat logits, CVec lse,
                                         CVec targets, float d_scale) {
    const char* op = "cross_entropy_backward";
    ETE_CHECK(logits.dtype == DType::F32, "[cuda] {}: logits must be F32", op);
    cuda::cross_entropy_backward(stream_, mat(d_logits, op), cmat(logits, op), f32(lse, op),
                                 i32(targets, op), d_scale);
    check_launch(op);
}

void CudaBackend::adamw_step(Vec p, CVec g, Vec m, Vec v, const AdamWStep& s, Vec p_compute) {
    const char* op = "adamw_step";
    ETE_CHECK(g.n == p.n && m.n == p.n && v.n == p.n && (p_compute.empty() || p_compute.n == p.n),
              "[cuda] {}: expected {} elements in every operand", op, p.n);
    const Adam a{s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.bc1, s.bc2, s.grad_scale};
    const Ft pct = p_compute.empty() ? Ft::F32 : ft(p_compute.dtype, op);
    cuda::adamw(stream_, f32(p, op), f32(g, op), f32(m, op), f32(v, op), p.n, a, p_compute.data,
                pct);
    check_launch(op);
}

// No CUDA kernel yet: the trainer refuses train.optimizer = "adamw8bit" on a GPU before it
// starts (train/job_check.cpp), so this is reached only by a direct call.
void CudaBackend::adamw8bit_step(Vec, CVec, Vec, Vec, Vec, Vec, int64_t, const AdamWStep&, Vec) {
    throw_error(
        "[cuda] adamw8bit_step: 8-bit AdamW has no CUDA kernel yet (train.optimizer = "
        "\"adamw8bit\" runs on the CPU backend)");
}

// --- quantization (quant.cu) ---

namespace {

Grid grid(const QuantGrid& g) {
    return {g.qmin, g.qmax, int(g.rule)};
}

Mat8 mat8(ete::Mat m, const char* op) {
    ETE_CHECK(m.dtype == DType::I8 || m.dtype == DType::U8,
              "[cuda] {}: dtype {}, expected I8 or U8", op, dtype_name(m.dtype));
    return {m.data, m.dtype == DType::U8, m.rows, m.cols, m.ld};
}
Mat8C mat8(ete::CMat m, const char* op) {
    ETE_CHECK(m.dtype == DType::I8 || m.dtype == DType::U8,
              "[cuda] {}: dtype {}, expected I8 or U8", op, dtype_name(m.dtype));
    return {m.data, m.dtype == DType::U8, m.rows, m.cols, m.ld};
}

}  // namespace

void CudaBackend::dropout(ete::Mat y, ete::CMat x, const DropoutMask& m, bool accumulate) {
    const char* op = "dropout";
    ETE_CHECK(y.rows == x.rows && y.cols == x.cols, "[cuda] dropout: ({}, {}) into ({}, {})",
              x.rows, x.cols, y.rows, y.cols);
    const Dropout d{m.seed, m.stream, m.row0, m.row_stride, m.col0, m.threshold(), m.keep_scale()};
    cuda::dropout(stream_, mat(y, op), cmat(x, op), d, accumulate);
    check_launch(op);
}

void CudaBackend::min_max(Vec lo, Vec hi, ete::CMat x, int64_t group) {
    check_min_max_args(lo, hi, x, group);
    cuda::min_max(stream_, f32(lo, "min_max"), f32(hi, "min_max"), cmat(x, "min_max"), group);
    check_launch("min_max");
}

void CudaBackend::quant_params(Vec scale, Vec zero, CVec lo, CVec hi, const QuantGrid& g) {
    const char* op = "quant_params";
    check_quant_params_args(scale, zero, lo, hi);
    cuda::quant_params(stream_, f32(scale, op), f32(zero, op), f32(lo, op), f32(hi, op), lo.n,
                       grid(g));
    check_launch(op);
}

void CudaBackend::fake_quant(ete::Mat y, ete::CMat x, CVec scale, CVec zero, Vec mask,
                             int64_t group, const QuantGrid& g) {
    const char* op = "fake_quant";
    check_fake_quant_args(y, x, scale, zero, mask, group, g);
    cuda::fake_quant(stream_, mat(y, op), cmat(x, op), f32(scale, op), f32(zero, op), scale.n,
                     static_cast<uint8_t*>(mask.data), group, grid(g));
    check_launch(op);
}

void CudaBackend::fake_quant_backward(ete::Mat d_x, ete::CMat d_y, CVec mask) {
    const char* op = "fake_quant_backward";
    check_fake_quant_backward_args(d_x, d_y, mask);
    cuda::fake_quant_backward(stream_, mat(d_x, op), cmat(d_y, op),
                              static_cast<const uint8_t*>(mask.data));
    check_launch(op);
}

void CudaBackend::fake_quant_scale_grad(Vec d_scale, ete::CMat x, ete::CMat d_y, CVec scale,
                                        CVec zero, int64_t group, const QuantGrid& g) {
    const char* op = "fake_quant_scale_grad";
    check_fake_quant_scale_grad_args(d_scale, x, d_y, scale, zero, group, g);
    cuda::fake_quant_scale_grad(stream_, f32(d_scale, op), cmat(x, op), cmat(d_y, op),
                                f32(scale, op), f32(zero, op), scale.n, group, grid(g));
    check_launch(op);
}

void CudaBackend::quantize_s8(ete::Mat q, ete::CMat x, CVec scale, CVec zero, const QuantGrid& g) {
    const char* op = "quantize_s8";
    check_quantize_s8_args(q, x, scale, zero, g);
    cuda::quantize_s8(stream_, mat8(q, op), cmat(x, op), f32(scale, op), f32(zero, op), scale.n,
                      grid(g));
    check_launch(op);
}

void CudaBackend::dequantize_s32(ete::Mat y, ete::CMat acc, CVec a_scale, CVec a_zero, int a_offset,
                                 CVec w_scale, CVec w_sum, float beta) {
    const char* op = "dequantize_s32";
    check_dequantize_s32_args(y, acc, a_scale, a_zero, a_offset, w_scale, w_sum);
    cuda::dequantize_s32(stream_, mat(y, op), static_cast<const int32_t*>(acc.data), acc.ld,
                         f32(a_scale, op), f32(a_zero, op), a_scale.n, a_offset, f32(w_scale, op),
                         i32(w_sum, op), beta);
    check_launch(op);
}

void CudaBackend::gemm_s8(ete::CMat a, ete::CMat w, ete::Mat c) {
    const char* op = "gemm_s8";
    check_gemm_s8_args(a, w, c);
    cuda::gemm_s8(stream_, mat8(a, op), mat8(w, op), 0, static_cast<int32_t*>(c.data), c.ld,
                  nullptr, 0, nullptr, 0.0f);
    check_launch(op);
}

void CudaBackend::gemm_s8_scaled(ete::CMat a, const S8Weight& pw, ete::Mat y, CVec scale,
                                 int32_t zero, float beta) {
    const char* op = "gemm_s8_scaled";
    const ete::CMat w = pw.plain();
    check_gemm_s8_scaled_args(a, w, y, scale, zero, beta);
    cuda::gemm_s8(stream_, mat8(a, op), mat8(w, op), zero, nullptr, 0, static_cast<float*>(y.data),
                  y.ld, f32(scale, op), beta);
    check_launch(op);
}

Nf4 CudaBackend::nf4(const Nf4View& w) const {
    return {static_cast<const uint8_t*>(w.packed),
            w.absmax,
            static_cast<const float*>(w.nested_absmax),
            static_cast<const float*>(w.nested_map),
            nf4_code_,
            w.offset,
            w.rows,
            w.cols,
            w.blocksize,
            w.nested_blocksize};
}

void CudaBackend::dequantize_nf4(ete::Mat out, const Nf4View& w, int64_t row0) {
    const char* op = "dequantize_nf4";
    check_dequantize_nf4_args(out, w, row0);
    cuda::dequantize_nf4(stream_, mat(out, op), nf4(w), row0);
    check_launch(op);
}

// Tiles of W's rows dequantized in a's dtype into scratch, each multiplied by cuBLASLt: with
// trans_w a tile gives columns [r0, r0 + n) of c = a · Wᵀ; without, rows [r0, r0 + n) of W are
// the K range [r0, r0 + n) of c = a · W, summed into c tile after tile (beta 1 after the first).
void CudaBackend::gemm_nf4(ete::CMat a, const Nf4View& w, bool trans_w, ete::Mat c, float alpha,
                           float beta) {
    check_gemm_nf4_args(a, w, trans_w, c);
    const size_t elem = dtype_size(a.dtype);
    const int64_t tile = std::max<int64_t>(
        1, std::min<int64_t>(w.rows, int64_t((size_t(64) << 20) / (size_t(w.cols) * elem))));
    // The tile buffer is its own allocation: gemm itself may use scratch().
    DeviceBuffer buf(*this, size_t(tile) * size_t(w.cols) * elem);
    for (int64_t r0 = 0; r0 < w.rows; r0 += tile) {
        const int64_t n = std::min(tile, w.rows - r0);
        const ete::Mat t(buf.data(), a.dtype, n, w.cols);
        dequantize_nf4(t, w, r0);
        if (trans_w) {
            gemm(a, false, t, true, c.col_slice(r0, n), alpha, beta);
        } else {
            gemm(a.col_slice(r0, n), false, t, false, c, alpha, r0 == 0 ? beta : 1.0f);
        }
    }
}

}  // namespace ete::cuda
