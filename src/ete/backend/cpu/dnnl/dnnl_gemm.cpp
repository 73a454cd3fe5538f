// ete/backend/cpu/dnnl/dnnl_gemm.cpp — dnnl_gemm through oneDNN's matmul primitive (oneDNN 2.x
// API), compiled only when CMake finds oneDNN (else backend/cpu/no_dnnl/ is linked).
//
// Layout: matmul computes dst(M, N) = src(M, K) · weights(K, N) on strided memory descriptors, so
// a transpose or a leading dimension is only a choice of strides: op(A) = A^T reads A (K, M) with
// strides (1, lda) instead of (lda, 1); likewise B; dst has strides (ldc, 1).
// Scalars: alpha is an output scale and beta a sum post-op, both fixed when the primitive is
// created. alpha is not a runtime scale because oneDNN 2.6 then drops its brgemm kernel for the
// slower gemm:jit one, so the cache key holds alpha's and beta's exact values.
// Cache: one primitive per distinct key, created on first use and kept for the process (training
// repeats a fixed set of shapes). A key oneDNN cannot run is cached too, as "use the fallback".
// The key holds omp_get_max_threads(): a primitive runs with the thread count it was created for
// (oneDNN's own primitive cache keys on it too), so a changed OpenMP setting needs a new one.
// Threads: one CPU engine for the process. Primitives use a user-managed scratchpad, which makes
// them stateless: two threads may execute the same primitive at once, each with its own
// thread-local scratchpad and its own CPU stream (streams are cheap and CPU ones are synchronous;
// per-thread streams need no promise about a shared stream's internals). Execution runs on the
// caller's OpenMP pool (this oneDNN is built with OpenMP, like ETE and OpenBLAS).
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ete/backend/cpu/dnnl/dnnl_common.h"
#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/backend/cpu/kernel_use.h"
#include "ete/core/error.h"
#include "ete/core/log.h"

namespace ete::cpu {
namespace onednn {

bool isa_includes(dnnl::cpu_isa have, dnnl::cpu_isa want) {
    // Each ISA value is the bit set of the levels it includes (avx512_core_amx ⊃ avx512_core_bf16).
    return (unsigned(have) & unsigned(want)) == unsigned(want);
}

namespace {

std::string isa_name(dnnl::cpu_isa isa) {
    switch (isa) {
        case dnnl::cpu_isa::all:
            return "all";
        case dnnl::cpu_isa::sse41:
            return "sse41";
        case dnnl::cpu_isa::avx:
            return "avx";
        case dnnl::cpu_isa::avx2:
            return "avx2";
        case dnnl::cpu_isa::avx2_vnni:
            return "avx2_vnni";
        case dnnl::cpu_isa::avx512_mic:
            return "avx512_mic";
        case dnnl::cpu_isa::avx512_mic_4ops:
            return "avx512_mic_4ops";
        case dnnl::cpu_isa::avx512_core:
            return "avx512_core";
        case dnnl::cpu_isa::avx512_core_vnni:
            return "avx512_core_vnni";
        case dnnl::cpu_isa::avx512_core_bf16:
            return "avx512_core_bf16";
        case dnnl::cpu_isa::avx512_core_amx:
            return "avx512_core_amx";
    }
    return fmt::format("0x{:x}", unsigned(isa));  // a level newer than these headers
}

}  // namespace

// "oneDNN 2.6.3 (ISA avx512_core_bf16)"
std::string version_isa() {
    const dnnl_version_t* v = dnnl::version();
    return fmt::format("oneDNN {}.{}.{} (ISA {})", v->major, v->minor, v->patch,
                       isa_name(dnnl::get_effective_cpu_isa()));
}

dnnl::engine& cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);  // thread-safe lazy init
    return engine;
}

std::mutex& cache_mutex() {
    static std::mutex m;
    return m;
}

void execute(const Entry& e, const void* A, const void* B, void* C) {
    thread_local dnnl::stream stream(cpu_engine());
    thread_local Scratchpad scratchpad;
    dnnl::engine& eng = cpu_engine();
    // oneDNN only reads src and weights; its memory objects take a non-const handle.
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(e.a_md, eng, const_cast<void*>(A))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(e.b_md, eng, const_cast<void*>(B))},
        {DNNL_ARG_DST, dnnl::memory(e.c_md, eng, C)}};
    if (size_t bytes = e.scratch_md.get_size(); bytes > 0) {
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch_md, eng, scratchpad.get(bytes)));
    }
    e.prim->execute(stream, args);
    stream.wait();
}

}  // namespace onednn

namespace {

using namespace onednn;

struct Key {
    bool trans_a, trans_b;
    int64_t M, N, K, lda, ldb, ldc;
    DType ab, c;
    uint32_t alpha_bits, beta_bits;  // exact values: both are baked into the primitive
    int threads;  // oneDNN fixes its thread count and blocking when it creates a primitive
    auto operator<=>(const Key&) const = default;
};

std::string shape_str(const Key& k) {
    return fmt::format("{}x{}x{} {}{} {}->{} (lda {}, ldb {}, ldc {}, alpha {}, beta {})", k.M, k.N,
                       k.K, k.trans_a ? 'T' : 'N', k.trans_b ? 'T' : 'N', dtype_name(k.ab),
                       dtype_name(k.c), k.lda, k.ldb, k.ldc, std::bit_cast<float>(k.alpha_bits),
                       std::bit_cast<float>(k.beta_bits));
}

dnnl::memory::data_type to_dnnl(DType t) {
    switch (t) {
        case DType::BF16:
            return dnnl::memory::data_type::bf16;
        case DType::F16:
            return dnnl::memory::data_type::f16;
        case DType::F32:
            return dnnl::memory::data_type::f32;
        default:
            ETE_ASSERT(false && "dnnl_gemm_check_args admits only BF16, F16, F32");
    }
    return dnnl::memory::data_type::undef;
}

Key make_key(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, int64_t lda,
             int64_t ldb, DType ab, float beta, int64_t ldc, DType c) {
    Key k{ta, tb, M, N, K, lda, ldb, ldc, ab, c, 0, 0, 0};
    k.alpha_bits = std::bit_cast<uint32_t>(alpha);
    k.beta_bits = std::bit_cast<uint32_t>(beta == 0.0f ? 0.0f : beta);  // -0 and +0: no post-op
    k.threads = omp_get_max_threads();
    return k;
}

// The engine for a dtype, chosen once per process (ETE_GEMM16 and the CPU do not change).
const Gemm16Choice& gemm16_engine(DType ab) {
    note_profiled_kernel();
    static const auto choose = [](DType t) {
        __builtin_cpu_init();
        const Gemm16Cpu cpu{
            dnnl_native(t),
            isa_includes(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_amx),
            __builtin_cpu_is("amd") > 0};
        return choose_gemm16_engine(t, std::getenv("ETE_GEMM16"), cpu);
    };
    static const Gemm16Choice bf16 = choose(DType::BF16), f16 = choose(DType::F16);
    return ab == DType::F16 ? f16 : bf16;
}

}  // namespace

uint64_t dnnl_gemm_staging_bytes(DType ab, uint64_t largest) {
    return gemm16_engine(ab).engine == Gemm16Engine::Sgemm ? dnnl_fallback_staging_bytes(largest)
                                                           : 0;
}

namespace {

void log_fallback_once(DType ab, const std::string& why) {
    static std::atomic<bool> logged[2];  // BF16, F16
    if (logged[ab == DType::F16].exchange(true)) return;
    log_info("[gemm] {} GEMMs run the fp32 fallback (operands converted, OpenBLAS sgemm): {}",
             dtype_name(ab), why);
}

dnnl::primitive_attr make_attr(const Key& k) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    float alpha = std::bit_cast<float>(k.alpha_bits), beta = std::bit_cast<float>(k.beta_bits);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(beta);  // dst = alpha·(src·weights) + beta·dst
        attr.set_post_ops(ops);
    }
    return attr;
}

// The primitive for k, or an entry without one when oneDNN has no (non-reference) kernel for it.
// Any other oneDNN failure is an ete::Error naming the shape.
Entry make_entry(const Key& k) {
    Entry e;
    auto fallback = [&](const std::string& why) {
        e.impl = "fallback: fp32 sgemm";
        e.why = version_isa() + " " + why + " for " + shape_str(k);
        return e;
    };
    try {
        dims a_strides = k.trans_a ? dims{1, k.lda} : dims{k.lda, 1};
        dims b_strides = k.trans_b ? dims{1, k.ldb} : dims{k.ldb, 1};
        e.a_md = dnnl::memory::desc({k.M, k.K}, to_dnnl(k.ab), a_strides);
        e.b_md = dnnl::memory::desc({k.K, k.N}, to_dnnl(k.ab), b_strides);
        e.c_md = dnnl::memory::desc({k.M, k.N}, to_dnnl(k.c), dims{k.ldc, 1});
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a_md, e.b_md, e.c_md), make_attr(k),
                                        cpu_engine());
        std::string impl = pd.impl_info_str();
        // oneDNN's scalar reference loops are far slower than converting and calling sgemm.
        if (impl.rfind("ref", 0) == 0) return fallback("has only its reference matmul");
        e.scratch_md = pd.scratchpad_desc();
        e.prim.emplace(pd);
        e.impl = impl;
    } catch (const dnnl::error& err) {
        ETE_CHECK(err.status == dnnl_unimplemented, "[gemm] oneDNN matmul {}: {} (status {})",
                  shape_str(k), err.what(), int(err.status));
        return fallback(std::string("has no matmul (") + err.what() + ")");
    }
    return e;
}

// Entries are never erased and std::map nodes never move, so the reference stays valid unlocked.
// Creation happens under the lock: a thread wanting another new shape waits a few milliseconds.
size_t g_entries = 0;  // the cache's size, guarded by cache_mutex()

const Entry& cached_entry(const Key& k) {
    std::lock_guard<std::mutex> lock(cache_mutex());
    static std::map<Key, Entry> cache;
    auto it = cache.find(k);
    if (it == cache.end()) {
        it = cache.emplace(k, make_entry(k)).first;
        g_entries = cache.size();
    }
    return it->second;
}

}  // namespace

void dnnl_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype, float beta,
               void* C, int64_t ldc, DType c_dtype) {
    if (const Gemm16Choice& c = gemm16_engine(ab_dtype); c.engine == Gemm16Engine::Sgemm) {
        dnnl_gemm_fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, ab_dtype, beta, C, ldc,
                           c_dtype);  // checks the arguments
        if (M != 0 && N != 0 && K != 0) log_fallback_once(ab_dtype, c.why);
        return;
    }
    dnnl_gemm_onednn(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, ab_dtype, beta, C, ldc,
                     c_dtype);
}

void dnnl_gemm_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype,
                      float beta, void* C, int64_t ldc, DType c_dtype) {
    note_profiled_kernel();
    dnnl_gemm_check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, ab_dtype, C, ldc, c_dtype);
    if (M == 0 || N == 0) return;
    if (K == 0) {  // C = beta·C: nothing for oneDNN to multiply
        dnnl_gemm_fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, ab_dtype, beta, C, ldc,
                           c_dtype);
        return;
    }
    Key k = make_key(trans_a, trans_b, M, N, K, alpha, lda, ldb, ab_dtype, beta, ldc, c_dtype);
    const Entry& e = cached_entry(k);
    if (!e.prim) {  // logged when a GEMM runs it, not when dnnl_gemm_impl or dnnl_native asks
        log_fallback_once(k.ab, e.why);
        dnnl_gemm_fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, ab_dtype, beta, C, ldc,
                           c_dtype);
        return;
    }
    try {
        execute(e, A, B, C);
    } catch (const dnnl::error& err) {
        throw_error(fmt::format("[gemm] oneDNN matmul {}: execution failed: {} (status {})",
                                shape_str(k), err.what(), int(err.status)));
    }
}

std::string dnnl_gemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           int64_t lda, int64_t ldb, DType ab_dtype, float beta, int64_t ldc,
                           DType c_dtype) {
    note_profiled_kernel();
    // Pointers are only checked for null where they would be used; any non-null value will do.
    static const char dummy = 0;
    dnnl_gemm_check_args(trans_a, trans_b, M, N, K, &dummy, lda, &dummy, ldb, ab_dtype, &dummy, ldc,
                         c_dtype);
    if (M == 0 || N == 0 || K == 0) return "fallback: fp32 sgemm (empty product)";
    const Entry& e = cached_entry(
        make_key(trans_a, trans_b, M, N, K, alpha, lda, ldb, ab_dtype, beta, ldc, c_dtype));
    return e.prim ? e.impl : e.impl + " (" + e.why + ")";
}

size_t dnnl_cache_entries() {
    std::lock_guard<std::mutex> lock(cache_mutex());
    return g_entries;
}

bool dnnl_available() {
    return true;
}

bool dnnl_native(DType ab) {
    note_profiled_kernel();
    if (ab == DType::BF16) {
        return isa_includes(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16);
    }
    if (ab != DType::F16) return false;
    // oneDNN 2.6's ISA query has no AVX512-FP16 level: ask the CPU, and whether oneDNN has a
    // non-reference f16 matmul for it.
    static const bool native = [] {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx512fp16")) return false;
        // The primitive itself, not dnnl_gemm_impl: the engine choice asks this function.
        return cached_entry(make_key(false, false, 64, 64, 64, 1.0f, 64, 64, DType::F16, 0.0f, 64,
                                     DType::F32))
            .prim.has_value();
    }();
    return native;
}

std::string dnnl_info() {
    note_profiled_kernel();
    // A bad ETE_GEMM16 is shown here (every command prints this line or logs it) and is an error
    // where a 16-bit GEMM runs.
    auto engine = [](DType t) {
        try {
            const Gemm16Choice& c = gemm16_engine(t);
            return fmt::format("{} ({})",
                               c.engine == Gemm16Engine::OneDnn ? "oneDNN" : "fp32 sgemm", c.why);
        } catch (const std::exception& e) {
            return fmt::format("none ({})", e.what());
        }
    };
    return fmt::format("{}, native bf16: {}, f16: {}; bf16 GEMMs: {}; f16 GEMMs: {}", version_isa(),
                       dnnl_native(DType::BF16) ? "yes" : "no",
                       dnnl_native(DType::F16) ? "yes" : "no", engine(DType::BF16),
                       engine(DType::F16));
}

}  // namespace ete::cpu
