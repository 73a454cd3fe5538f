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

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/core/error.h"
#include "ete/core/log.h"

namespace ete::cpu {
namespace {

using dims = dnnl::memory::dims;

struct Key {
    bool trans_a, trans_b;
    int64_t M, N, K, lda, ldb, ldc;
    DType ab, c;
    uint32_t alpha_bits, beta_bits;  // exact values: both are baked into the primitive
    int threads;  // oneDNN fixes its thread count and blocking when it creates a primitive
    auto operator<=>(const Key&) const = default;
};

struct Entry {
    std::optional<dnnl::matmul> prim;  // empty: dnnl_gemm_fallback runs this key
    dnnl::memory::desc a_md, b_md, c_md, scratch_md;
    std::string impl;  // oneDNN's implementation name, or "fallback: fp32 sgemm"
    std::string why;   // why the fallback runs
};

bool isa_includes(dnnl::cpu_isa have, dnnl::cpu_isa want) {
    // Each ISA value is the bit set of the levels it includes (avx512_core_amx ⊃ avx512_core_bf16).
    return (unsigned(have) & unsigned(want)) == unsigned(want);
}

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

// "oneDNN 2.6.3 (ISA avx512_core_bf16)"
std::string version_isa() {
    const dnnl_version_t* v = dnnl::version();
    return fmt::format("oneDNN {}.{}.{} (ISA {})", v->major, v->minor, v->patch,
                       isa_name(dnnl::get_effective_cpu_isa()));
}

std::string shape_str(const Key& k) {
    return fmt::format("{}x{}x{} {}{} {}->{} (lda {}, ldb {}, ldc {}, alpha {}, beta {})", k.M, k.N,
                       k.K, k.trans_a ? 'T' : 'N', k.trans_b ? 'T' : 'N', dtype_name(k.ab),
                       dtype_name(k.c), k.lda, k.ldb, k.ldc, std::bit_cast<float>(k.alpha_bits),
                       std::bit_cast<float>(k.beta_bits));
}

dnnl::engine& cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);  // thread-safe lazy init
    return engine;
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

size_t g_created = 0;  // guarded by cache_mutex()

std::mutex& cache_mutex() {
    static std::mutex m;
    return m;
}

// The engine for a dtype, chosen once per process (ETE_GEMM16 and the CPU do not change).
const Gemm16Choice& gemm16_engine(DType ab) {
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
        ++g_created;
    } catch (const dnnl::error& err) {
        ETE_CHECK(err.status == dnnl_unimplemented, "[gemm] oneDNN matmul {}: {} (status {})",
                  shape_str(k), err.what(), int(err.status));
        return fallback(std::string("has no matmul (") + err.what() + ")");
    }
    return e;
}

// Entries are never erased and std::map nodes never move, so the reference stays valid unlocked.
// Creation happens under the lock: a thread wanting another new shape waits a few milliseconds.
const Entry& cached_entry(const Key& k) {
    std::lock_guard<std::mutex> lock(cache_mutex());
    static std::map<Key, Entry> cache;
    auto it = cache.find(k);
    if (it == cache.end()) it = cache.emplace(k, make_entry(k)).first;
    return it->second;
}

// A thread's scratchpad: grows to the largest any primitive asked for on this thread.
class Scratchpad {
  public:
    void* get(size_t bytes) {
        if (bytes > size_) {
            size_t rounded = (bytes + 4095) / 4096 * 4096;  // page-aligned, as oneDNN's own
            buf_.reset(static_cast<char*>(std::aligned_alloc(4096, rounded)));
            ETE_CHECK(buf_, "[gemm] oneDNN matmul: cannot allocate a {}-byte scratchpad", bytes);
            size_ = rounded;
        }
        return buf_.get();
    }

  private:
    std::unique_ptr<char, decltype(&std::free)> buf_{nullptr, &std::free};
    size_t size_ = 0;
};

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
    // Pointers are only checked for null where they would be used; any non-null value will do.
    static const char dummy = 0;
    dnnl_gemm_check_args(trans_a, trans_b, M, N, K, &dummy, lda, &dummy, ldb, ab_dtype, &dummy, ldc,
                         c_dtype);
    if (M == 0 || N == 0 || K == 0) return "fallback: fp32 sgemm (empty product)";
    const Entry& e = cached_entry(
        make_key(trans_a, trans_b, M, N, K, alpha, lda, ldb, ab_dtype, beta, ldc, c_dtype));
    return e.prim ? e.impl : e.impl + " (" + e.why + ")";
}

namespace {

struct KeyS8 {
    int64_t M, N, K, lda, ldw, ldc;
    DType a;
    int threads;
    // 0: I32 dst; 1: F32 dst with output scales and a source zero point; 2: that plus sum (β = 1)
    int scaled = 0;
    // scaled: the output scales (N) fixed in the primitive, or empty for scales given at run
    // time. oneDNN 2.6 runs an int8 matmul with run-time scales only as gemm:jit, with fixed
    // ones as brgemm (brg:avx512_core_vnni, faster on the model's products; static_entry).
    std::vector<float> scales = {};
    auto operator<=>(const KeyS8&) const = default;
};

// The int8 matmul for k, or an entry without a primitive (the loops run it) when oneDNN has only
// its reference kernel or none.
Entry make_entry_s8(const KeyS8& k) {
    Entry e;
    try {
        const auto a_type =
            k.a == DType::U8 ? dnnl::memory::data_type::u8 : dnnl::memory::data_type::s8;
        e.a_md = dnnl::memory::desc({k.M, k.K}, a_type, dims{k.lda, 1});
        // ldw 0: a packed weight, in whatever layout the matmul prefers (PackedS8).
        e.b_md = k.ldw == 0
                     ? dnnl::memory::desc({k.K, k.N}, dnnl::memory::data_type::s8,
                                          dnnl::memory::format_tag::any)
                     : dnnl::memory::desc({k.K, k.N}, dnnl::memory::data_type::s8, dims{1, k.ldw});
        e.c_md = dnnl::memory::desc(
            {k.M, k.N}, k.scaled ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::s32,
            dims{k.ldc, 1});
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (k.scaled) {
            if (k.scales.empty())
                attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});  // per column n
            else
                attr.set_output_scales(1 << 1, k.scales);
            attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
            if (k.scaled == 2) {
                dnnl::post_ops ops;
                ops.append_sum(1.0f);
                attr.set_post_ops(ops);
            }
        }
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a_md, e.b_md, e.c_md), attr,
                                        cpu_engine());
        const std::string impl = pd.impl_info_str();
        if (impl.rfind("ref", 0) == 0) {
            e.impl = "loops";
            e.why = impl;
            return e;
        }
        e.b_md = pd.weights_desc();
        e.scratch_md = pd.scratchpad_desc();
        e.prim.emplace(pd);
        e.impl = impl;
        ++g_created;
    } catch (const dnnl::error& err) {
        ETE_CHECK(err.status == dnnl_unimplemented, "[gemm_s8] oneDNN int8 matmul {}x{}x{}: {}",
                  k.M, k.N, k.K, err.what());
        e.impl = "loops";
    }
    return e;
}

const Entry& cached_entry_s8(const KeyS8& k) {
    std::lock_guard<std::mutex> lock(cache_mutex());
    static std::map<KeyS8, Entry> cache;
    auto it = cache.find(k);
    if (it == cache.end()) it = cache.emplace(k, make_entry_s8(k)).first;
    return it->second;
}

// A weight's scaled product with its own output scales fixed in the primitive (KeyS8::scales),
// one per weight: built for a key the weight was given twice in a row — every batch of an
// evaluation, but not `ete generate`'s growing prompt, whose row count changes every token and
// would build one per weight per token. Keyed by the PackedS8, which forgets its slot when it
// goes (forget_static_entry), so a later weight at the same address never finds it.
struct StaticSlot {
    KeyS8 last;                // the key of the weight's last call
    std::optional<KeyS8> key;  // the key `entry` was built for
    Entry entry;
};

std::mutex& slots_mutex() {
    static std::mutex m;
    return m;
}

std::map<const void*, StaticSlot>& static_slots() {
    static std::map<const void*, StaticSlot> slots;
    return slots;
}

// The entry to run key k (scales set) on weight w with, or none (run the shared one).
std::optional<Entry> static_entry(const void* w, const KeyS8& k) {
    std::lock_guard<std::mutex> lock(slots_mutex());
    StaticSlot& s = static_slots()[w];
    if (!(s.key && *s.key == k)) {
        const bool again = s.last == k;
        s.last = k;
        if (!again) return std::nullopt;
        s.entry = make_entry_s8(k);
        s.key = k;
    }
    if (!s.entry.prim) return std::nullopt;
    return s.entry;
}

void forget_static_entry(const void* w) {
    std::lock_guard<std::mutex> lock(slots_mutex());
    static_slots().erase(w);
}

}  // namespace

void dnnl_gemm_s8(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                  const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc) {
    dnnl_gemm_s8_check_args(M, N, K, A, lda, a_dtype, W, ldw, C, ldc);
    if (M == 0 || N == 0) return;
    const Entry* e = nullptr;
    if (K > 0) e = &cached_entry_s8({M, N, K, lda, ldw, ldc, a_dtype, omp_get_max_threads()});
    if (!e || !e->prim) {
        gemm_s8_loops(M, N, K, A, lda, a_dtype, W, ldw, C, ldc);
        return;
    }
    try {
        execute(*e, A, W, C);
    } catch (const dnnl::error& err) {
        throw_error(fmt::format("[gemm_s8] oneDNN int8 matmul {}x{}x{}: execution failed: {}", M, N,
                                K, err.what()));
    }
}

// The reordered copies of a packed weight, one per layout asked for.
struct PackedS8::Layouts {
    std::mutex mutex;
    std::vector<std::pair<dnnl::memory::desc, std::unique_ptr<int8_t, decltype(&std::free)>>>
        copies;

    // W in layout md, reordered on first use (under the lock; copies never move once made).
    const int8_t* get(const PackedS8& w, const dnnl::memory::desc& md) {
        std::lock_guard<std::mutex> lock(mutex);
        for (const auto& [d, p] : copies)
            if (d == md) return p.get();
        const size_t bytes = (md.get_size() + 4095) / 4096 * 4096;
        std::unique_ptr<int8_t, decltype(&std::free)> buf(
            static_cast<int8_t*>(std::aligned_alloc(4096, bytes)), &std::free);
        ETE_CHECK(buf, "[gemm_s8] cannot allocate {} bytes for a packed {}x{} weight", bytes, w.N(),
                  w.K());
        dnnl::engine& eng = cpu_engine();
        const dnnl::memory::desc plain({w.K(), w.N()}, dnnl::memory::data_type::s8,
                                       dims{1, w.ldw()});
        dnnl::memory src(plain, eng, const_cast<int8_t*>(w.plain()));
        dnnl::memory dst(md, eng, buf.get());
        dnnl::stream stream(eng);
        dnnl::reorder(src, dst).execute(stream, src, dst);
        stream.wait();
        copies.emplace_back(md, std::move(buf));
        return copies.back().second.get();
    }
};

PackedS8::PackedS8(const int8_t* W, int64_t N, int64_t K, int64_t ldw)
    : w_(W), n_(N), k_(K), ldw_(ldw), layouts_(std::make_unique<Layouts>()) {
    dnnl_gemm_s8_check_args(0, N, K, W, std::max<int64_t>(1, K), DType::U8, W, ldw, nullptr,
                            std::max<int64_t>(1, N));
}
PackedS8::~PackedS8() {
    forget_static_entry(this);
}

void dnnl_gemm_s8_packed(int64_t M, const void* A, int64_t lda, DType a_dtype, const PackedS8& W,
                         int32_t* C, int64_t ldc) {
    const int64_t N = W.N(), K = W.K();
    dnnl_gemm_s8_check_args(M, N, K, A, lda, a_dtype, W.plain(), W.ldw(), C, ldc);
    if (M == 0 || N == 0) return;
    const Entry* e = nullptr;
    if (K > 0) e = &cached_entry_s8({M, N, K, lda, 0, ldc, a_dtype, omp_get_max_threads()});
    if (!e || !e->prim) {
        gemm_s8_loops(M, N, K, A, lda, a_dtype, W.plain(), W.ldw(), C, ldc);
        return;
    }
    try {
        execute(*e, A, W.layouts_->get(W, e->b_md), C);
    } catch (const dnnl::error& err) {
        throw_error(
            fmt::format("[gemm_s8] oneDNN int8 matmul {}x{}x{} (packed W): execution "
                        "failed: {}",
                        M, N, K, err.what()));
    }
}

bool dnnl_gemm_s8_scaled(int64_t M, const void* A, int64_t lda, DType a_dtype, const PackedS8& W,
                         const float* scale, int32_t zero, float beta, float* Y, int64_t ldy) {
    const int64_t N = W.N(), K = W.K();
    dnnl_gemm_s8_check_args(M, N, K, A, lda, a_dtype, W.plain(), W.ldw(),
                            reinterpret_cast<const int32_t*>(Y), ldy);
    if (M == 0 || N == 0 || K == 0) return false;
    KeyS8 key{M,
              N,
              K,
              lda,
              0,
              ldy,
              a_dtype,
              omp_get_max_threads(),
              beta == 0.0f ? 1 : 2,
              std::vector<float>(scale, scale + N)};
    const std::optional<Entry> fixed = static_entry(&W, key);
    key.scales.clear();
    const Entry& e = fixed ? *fixed : cached_entry_s8(key);
    if (!e.prim) return false;
    thread_local dnnl::stream stream(cpu_engine());
    thread_local Scratchpad scratchpad;
    dnnl::engine& eng = cpu_engine();
    const dnnl::memory::desc zero_md({1}, dnnl::memory::data_type::s32, dims{1});
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(e.a_md, eng, const_cast<void*>(A))},
        {DNNL_ARG_WEIGHTS,
         dnnl::memory(e.b_md, eng, const_cast<int8_t*>(W.layouts_->get(W, e.b_md)))},
        {DNNL_ARG_DST, dnnl::memory(e.c_md, eng, Y)},
        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl::memory(zero_md, eng, &zero)}};
    const dnnl::memory::desc scale_md({N}, dnnl::memory::data_type::f32, dims{1});
    if (!fixed)
        args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES,
                     dnnl::memory(scale_md, eng, const_cast<float*>(scale)));
    if (size_t bytes = e.scratch_md.get_size(); bytes > 0)
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch_md, eng, scratchpad.get(bytes)));
    try {
        e.prim->execute(stream, args);
        stream.wait();
    } catch (const dnnl::error& err) {
        throw_error(
            fmt::format("[gemm_s8] oneDNN scaled int8 matmul {}x{}x{}: execution failed: {}", M, N,
                        K, err.what()));
    }
    return true;
}

std::string dnnl_gemm_s8_impl(int64_t M, int64_t N, int64_t K, int64_t lda, DType a_dtype,
                              int64_t ldw, int64_t ldc) {
    static const int8_t dummy = 0;
    dnnl_gemm_s8_check_args(M, N, K, &dummy, lda, a_dtype, &dummy, ldw,
                            reinterpret_cast<const int32_t*>(&dummy), ldc);
    if (M == 0 || N == 0 || K == 0) return "loops";
    return cached_entry_s8({M, N, K, lda, ldw, ldc, a_dtype, omp_get_max_threads()}).impl;
}

size_t dnnl_cached_primitives() {
    std::lock_guard<std::mutex> lock(cache_mutex());
    return g_created;
}

bool dnnl_available() {
    return true;
}

bool dnnl_native(DType ab) {
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
