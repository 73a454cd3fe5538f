// ete/backend/backend.cpp — backend selection by name, and the packed-rows validation every
// backend and the model share.
#include "ete/backend/backend.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "ete/core/device_memory.h"
#include "ete/core/error.h"

namespace ete {

uint32_t DropoutMask::threshold() const {
    ETE_ASSERT(p >= 0.0f && p < 1.0f);
    return uint32_t(std::min(std::nearbyint(std::ldexp(double(p), 32)), 4294967295.0));
}

void check_doc_start(const int32_t* doc_start, int B, int T) {
    if (!doc_start) return;
    for (int b = 0; b < B; ++b) {
        const int32_t* s = doc_start + size_t(b) * T;
        ETE_CHECK(T == 0 || s[0] == 0,
                  "doc_start[row {}, position 0] = {}: expected 0 (a row starts a document)", b,
                  s[0]);
        for (int t = 1; t < T; ++t) {
            ETE_CHECK(s[t] == s[t - 1] || s[t] == t,
                      "doc_start[row {}, position {}] = {}: expected {} (the document of position "
                      "{}) or {} (a new document)",
                      b, t, s[t], s[t - 1], t - 1, t);
        }
    }
}

namespace {

int64_t blocks_per_row(const char* op, CMat x, int64_t group) {
    ETE_CHECK(group >= 1 && x.cols % group == 0,
              "{}: group {} does not divide the {} columns (expected a divisor)", op, group,
              x.cols);
    return x.cols / group;
}

}  // namespace

int64_t check_min_max_args(CVec lo, CVec hi, CMat x, int64_t group) {
    const int64_t per_row = blocks_per_row("min_max", x, group);
    ETE_CHECK(lo.dtype == DType::F32 && hi.dtype == DType::F32 && lo.n == x.rows * per_row &&
                  hi.n == lo.n,
              "min_max: lo, hi must be F32 of {} blocks, got {} and {}", x.rows * per_row, lo.n,
              hi.n);
    return per_row;
}

int64_t check_fake_quant_args(CMat y, CMat x, CVec scale, CVec zero, CVec mask, int64_t group,
                              const QuantGrid& g) {
    ETE_CHECK(y.rows == x.rows && y.cols == x.cols, "fake_quant: y ({}, {}) for x ({}, {})", y.rows,
              y.cols, x.rows, x.cols);
    ETE_CHECK(g.qmin < 0 && g.qmax > 0 && g.qmax - g.qmin <= 255,
              "fake_quant: grid [{}, {}], expected an 8-bit or narrower grid around 0", g.qmin,
              g.qmax);
    const int64_t per_row = blocks_per_row("fake_quant", x, group);
    ETE_CHECK(scale.dtype == DType::F32 && zero.dtype == DType::F32 && zero.n == scale.n &&
                  (scale.n == 1 || scale.n == x.rows * per_row),
              "fake_quant: scale and zero must be F32 of 1 or {} blocks, got {} and {}",
              x.rows * per_row, scale.n, zero.n);
    ETE_CHECK(mask.empty() ||
                  (mask.dtype == DType::U8 && mask.n == fake_quant_mask_bytes(x.rows, x.cols)),
              "fake_quant: mask must be U8 of {} bytes, got {}",
              fake_quant_mask_bytes(x.rows, x.cols), mask.n);
    return per_row;
}

int64_t check_fake_quant_own_range_args(CMat y, CMat x, CVec scale, int64_t group,
                                        const QuantGrid& g) {
    ETE_CHECK(g.rule == QParamRule::Symmetric,
              "fake_quant_own_range: expected a symmetric grid (its scales clamp no value)");
    const int64_t per_row = check_fake_quant_args(y, x, scale, scale, CVec{}, group, g);
    ETE_CHECK(scale.n == x.rows * per_row,
              "fake_quant_own_range: scale must be F32 of {} blocks, got {}", x.rows * per_row,
              scale.n);
    return per_row;
}

void Backend::fake_quant_own_range(Mat y, CMat x, Vec scale, int64_t group, const QuantGrid& g) {
    check_fake_quant_own_range_args(y, x, scale, group, g);
    const int64_t n = scale.n;
    DeviceBuffer lo(*this, size_t(n) * sizeof(float)), hi(*this, lo.bytes()),
        zero(*this, lo.bytes());
    const Vec l{lo.data(), DType::F32, n}, h{hi.data(), DType::F32, n},
        z{zero.data(), DType::F32, n};
    min_max(l, h, x, group);
    quant_params(scale, z, l, h, g);
    fake_quant(y, x, scale, z, {}, group, g);
}

int64_t check_fake_quant_scale_grad_args(CVec d_scale, CMat x, CMat d_y, CVec scale, CVec zero,
                                         int64_t group, const QuantGrid& g) {
    const int64_t per_row = check_fake_quant_args(x, x, scale, zero, CVec{}, group, g);
    ETE_CHECK(d_y.rows == x.rows && d_y.cols == x.cols,
              "fake_quant_scale_grad: d_y ({}, {}) for x ({}, {})", d_y.rows, d_y.cols, x.rows,
              x.cols);
    ETE_CHECK(d_scale.dtype == DType::F32 && d_scale.n == x.rows * per_row,
              "fake_quant_scale_grad: d_scale must be F32 of {} blocks, got {}", x.rows * per_row,
              d_scale.n);
    return per_row;
}

void check_quantize_s8_args(CMat q, CMat x, CVec scale, CVec zero, const QuantGrid& g) {
    ETE_CHECK(
        q.rows == x.rows && q.cols == x.cols && (q.dtype == DType::I8 || q.dtype == DType::U8),
        "quantize_s8: q ({}, {}) {} for x ({}, {}), expected I8 or U8 of x's shape", q.rows, q.cols,
        dtype_name(q.dtype), x.rows, x.cols);
    ETE_CHECK(g.qmin >= -128 && g.qmax <= 127 && g.qmin < g.qmax,
              "quantize_s8: grid [{}, {}], expected one inside [-128, 127]", g.qmin, g.qmax);
    ETE_CHECK(scale.dtype == DType::F32 && zero.dtype == DType::F32 && zero.n == scale.n &&
                  (scale.n == 1 || scale.n == x.rows),
              "quantize_s8: scale and zero must be F32 of 1 or {} (rows), got {} and {}", x.rows,
              scale.n, zero.n);
}

void check_dequantize_s32_args(CMat y, CMat acc, CVec a_scale, CVec a_zero, int a_offset,
                               CVec w_scale, CVec w_sum) {
    ETE_CHECK(acc.dtype == DType::I32 && y.rows == acc.rows && y.cols == acc.cols &&
                  (y.dtype == DType::F32 || y.dtype == DType::BF16),
              "dequantize_s32: y ({}, {}) {} for acc ({}, {}) {}, expected F32 or BF16 of an I32 "
              "acc's shape",
              y.rows, y.cols, dtype_name(y.dtype), acc.rows, acc.cols, dtype_name(acc.dtype));
    ETE_CHECK(a_scale.dtype == DType::F32 && a_zero.dtype == DType::F32 && a_zero.n == a_scale.n &&
                  (a_scale.n == 1 || a_scale.n == acc.rows),
              "dequantize_s32: a_scale and a_zero must be F32 of 1 or {} (rows), got {} and {}",
              acc.rows, a_scale.n, a_zero.n);
    ETE_CHECK(w_scale.dtype == DType::F32 && w_sum.dtype == DType::I32 && w_scale.n == acc.cols &&
                  w_sum.n == acc.cols,
              "dequantize_s32: w_scale (F32) and w_sum (I32) must have {} (cols) entries, got {} "
              "{} and {} {}",
              acc.cols, w_scale.n, dtype_name(w_scale.dtype), w_sum.n, dtype_name(w_sum.dtype));
    ETE_CHECK(a_offset == 0 || a_offset == 128, "dequantize_s32: a_offset {}, expected 0 or 128",
              a_offset);
}

void check_gemm_s8_scaled_args(CMat a, CMat w, Mat y, CVec scale, int32_t zero, float beta) {
    ETE_CHECK((a.dtype == DType::U8 || a.dtype == DType::I8) && a.cols == w.cols &&
                  y.dtype == DType::F32 && y.rows == a.rows && y.cols == w.rows,
              "gemm_s8_scaled: a ({}, {}) {} times w ({}, {}) transposed does not give y ({}, {}) "
              "{} (expected I8 or U8 times I8 into F32)",
              a.rows, a.cols, dtype_name(a.dtype), w.rows, w.cols, y.rows, y.cols,
              dtype_name(y.dtype));
    ETE_CHECK(scale.dtype == DType::F32 && scale.n == w.rows,
              "gemm_s8_scaled: scale must be F32 of {} (rows of w), got {} {}", w.rows, scale.n,
              dtype_name(scale.dtype));
    const bool u8 = a.dtype == DType::U8;
    ETE_CHECK(zero >= (u8 ? 0 : -128) && zero <= (u8 ? 255 : 127) && (beta == 0.0f || beta == 1.0f),
              "gemm_s8_scaled: zero point {} outside the {} range or beta {} (expected 0 or 1)",
              zero, dtype_name(a.dtype), beta);
}

std::unique_ptr<S8Weight> Backend::prepare_s8(CMat w) {
    ETE_CHECK(w.dtype == DType::I8, "prepare_s8: w is {}, expected I8", dtype_name(w.dtype));
    return std::make_unique<S8Weight>(w);
}

void Backend::gemm_s8(CMat a, const S8Weight& w, Mat c) {
    gemm_s8(a, w.plain(), c);
}

void Backend::rmsnorm_quantize(Mat q, CMat x, CVec w, float eps, CVec scale, CVec zero,
                               const QuantGrid& g) {
    DeviceBuffer out(*this, size_t(x.rows * x.cols) * sizeof(float));
    DeviceBuffer rstd(*this, size_t(x.rows) * sizeof(float));
    const Mat o{out.data(), DType::F32, x.rows, x.cols};
    rmsnorm_forward(o, {rstd.data(), DType::F32, x.rows}, x, w, eps);
    quantize_s8(q, o, scale, zero, g);
}

void Backend::swiglu_quantize(Mat q, CMat gate_up, CVec scale, CVec zero, const QuantGrid& g) {
    ETE_CHECK(gate_up.rows == q.rows && gate_up.cols == 2 * q.cols,
              "swiglu_quantize: gate_up ({}, {}) for q ({}, {})", gate_up.rows, gate_up.cols,
              q.rows, q.cols);
    DeviceBuffer out(*this, size_t(q.rows * q.cols) * dtype_size(gate_up.dtype));
    const Mat o{out.data(), gate_up.dtype, q.rows, q.cols};
    swiglu_forward(o, gate_up);
    quantize_s8(q, o, scale, zero, g);
}

void check_gemm_s8_args(CMat a, CMat w, CMat c) {
    ETE_CHECK(w.dtype == DType::I8 && c.dtype == DType::I32 && a.cols == w.cols &&
                  c.rows == a.rows && c.cols == w.rows,
              "gemm_s8: a ({}, {}) {} times w ({}, {}) {} transposed does not give c ({}, {}) {} "
              "(expected I8 or U8 times I8 into I32)",
              a.rows, a.cols, dtype_name(a.dtype), w.rows, w.cols, dtype_name(w.dtype), c.rows,
              c.cols, dtype_name(c.dtype));
}

void check_quant_params_args(CVec scale, CVec zero, CVec lo, CVec hi) {
    ETE_CHECK(scale.n == lo.n && zero.n == lo.n && hi.n == lo.n && scale.dtype == DType::F32 &&
                  zero.dtype == DType::F32 && lo.dtype == DType::F32 && hi.dtype == DType::F32,
              "quant_params: scale, zero, lo, hi must be F32 of one length");
}

void check_fake_quant_backward_args(CMat d_x, CMat d_y, CVec mask) {
    ETE_CHECK(d_x.rows == d_y.rows && d_x.cols == d_y.cols && mask.dtype == DType::U8 &&
                  mask.n == fake_quant_mask_bytes(d_y.rows, d_y.cols),
              "fake_quant_backward: d_x ({}, {}), d_y ({}, {}) and a U8 mask of {} bytes (got {})",
              d_x.rows, d_x.cols, d_y.rows, d_y.cols, fake_quant_mask_bytes(d_y.rows, d_y.cols),
              mask.n);
}

void check_dequantize_nf4_args(CMat out, const Nf4View& w, int64_t row0) {
    ETE_CHECK(out.cols == w.cols && row0 >= 0 && row0 + out.rows <= w.rows,
              "dequantize_nf4: rows [{}, {}) of a ({}, {}) weight into ({}, {})", row0,
              row0 + out.rows, w.rows, w.cols, out.rows, out.cols);
}

void check_gemm_nf4_args(CMat a, const Nf4View& w, bool trans_w, CMat c) {
    const int64_t K = trans_w ? w.cols : w.rows, N = trans_w ? w.rows : w.cols;
    ETE_CHECK(a.cols == K && c.rows == a.rows && c.cols == N,
              "gemm_nf4: a ({}, {}) times a ({}, {}) NF4 weight{} does not give c ({}, {})", a.rows,
              a.cols, w.rows, w.cols, trans_w ? "ᵀ" : "", c.rows, c.cols);
}

int pick_cuda_device(const char* env_device, int local_rank, int visible) {
    ETE_CHECK(visible >= 1, "[cuda] no CUDA device visible");
    if (!env_device || !*env_device) return std::max(local_rank, 0) % visible;
    char* end = nullptr;
    const long d = std::strtol(env_device, &end, 10);
    ETE_CHECK(*end == '\0' && d >= 0 && d < visible,
              "ETE_CUDA_DEVICE='{}': expected a device number from 0 to {} ({} visible)",
              env_device, visible - 1, visible);
    return int(d);
}

std::string mapped_cuda_device(const char* map, int world_rank) {
    if (!map || !*map) return "";
    const std::string m = map;
    std::vector<std::string> entries(1);
    for (char ch : m) {
        if (ch == ',')
            entries.emplace_back();
        else
            entries.back() += ch;
    }
    for (const std::string& e : entries)
        ETE_CHECK(
            !e.empty() && e.size() < 6 &&
                std::all_of(e.begin(), e.end(), [](unsigned char c) { return std::isdigit(c); }),
            "ETE_CUDA_DEVICE_MAP='{}': expected device numbers separated by commas, one "
            "per world rank",
            m);
    ETE_CHECK(world_rank >= 0 && size_t(world_rank) < entries.size(),
              "ETE_CUDA_DEVICE_MAP='{}': has {} entries, none for world rank {}", m, entries.size(),
              world_rank);
    return entries[size_t(world_rank)];
}

std::unique_ptr<Backend> make_rank_backend(const std::string& name, int world_rank,
                                           int local_rank) {
    if (name != "cuda" || cuda_device_count() == 0) return make_backend(name);
    const std::string mapped = mapped_cuda_device(std::getenv("ETE_CUDA_DEVICE_MAP"), world_rank);
    return make_cuda_backend(
        pick_cuda_device(mapped.empty() ? std::getenv("ETE_CUDA_DEVICE") : mapped.c_str(),
                         local_rank, cuda_device_count()));
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
    if (name == "cpu") return make_cpu_backend();
    if (name == "ref") return make_ref_backend();
    if (name == "guarded") return make_guarded_backend();
    if (name == "cuda") return make_cuda_backend();
    throw_error(fmt::format("backend '{}': expected one of cpu, ref, guarded, cuda", name));
}

}  // namespace ete
