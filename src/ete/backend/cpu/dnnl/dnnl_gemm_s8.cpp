// ete/backend/cpu/dnnl/dnnl_gemm_s8.cpp — the integer GEMMs of quantized inference (dnnl_gemm.h)
// through oneDNN's int8 matmul, where it is exact, and ETE's exact kernel everywhere else.
//
// Exactness is decided once per process (s8_engine): oneDNN multiplies u8·s8 with VNNI's vpdpbusd
// (four products summed straight into int32) when its ISA has VNNI (AVX512-VNNI, AVX512-BF16, AMX);
// without VNNI (AVX2, AVX-512 of Skylake) it uses vpmaddubsw, whose int16 pair sums saturate, so
// a large activation times a large weight comes out wrong, silently. So oneDNN runs only on a VNNI
// ISA and only after a start-up check on products that would saturate, through the three kinds of
// primitive the engine builds (plain s32, run-time scales with a zero point, fixed scales);
// otherwise gemm_s8_loops (backend/cpu/gemm_s8_exact.cpp) runs every int8 GEMM.
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
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

using namespace onednn;

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

// What dnnl_gemm_s8_impl names ETE's exact kernel.
std::string exact_impl() {
    return fmt::format("exact:{}", gemm_s8_exact_isa());
}

// The int8 matmul for k as oneDNN builds it, or an entry without a primitive (the loops run it)
// when oneDNN has only its reference kernel or none. Not gated on s8_engine: its check uses this.
Entry build_s8(const KeyS8& k) {
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
            e.impl = exact_impl();
            e.why = impl;
            return e;
        }
        e.b_md = pd.weights_desc();
        e.scratch_md = pd.scratchpad_desc();
        e.prim.emplace(pd);
        e.impl = impl;
    } catch (const dnnl::error& err) {
        ETE_CHECK(err.status == dnnl_unimplemented, "[gemm_s8] oneDNN int8 matmul {}x{}x{}: {}",
                  k.M, k.N, k.K, err.what());
        e.impl = exact_impl();
    }
    return e;
}

// W (K, N) with leading dimension ldw reordered into md's layout at dst.
void reorder_weights(const int8_t* w, int64_t N, int64_t K, int64_t ldw,
                     const dnnl::memory::desc& md, void* dst) {
    dnnl::engine& eng = cpu_engine();
    const dnnl::memory::desc plain({K, N}, dnnl::memory::data_type::s8, dims{1, ldw});
    dnnl::memory src_m(plain, eng, const_cast<int8_t*>(w));
    dnnl::memory dst_m(md, eng, dst);
    dnnl::stream stream(eng);
    dnnl::reorder(src_m, dst_m).execute(stream, src_m, dst_m);
    stream.wait();
}

// Runs a scaled entry: Y = scale[n]·Σ_k (A − zero)·W (+ Y), W already in e.b_md's layout; scale
// is passed at run time unless the primitive has it fixed.
void run_scaled(const Entry& e, const void* A, const int8_t* W, const float* scale, int64_t N,
                int32_t zero, float* Y, bool scales_fixed) {
    thread_local dnnl::stream stream(cpu_engine());
    thread_local Scratchpad scratchpad;
    dnnl::engine& eng = cpu_engine();
    const dnnl::memory::desc zero_md({1}, dnnl::memory::data_type::s32, dims{1});
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(e.a_md, eng, const_cast<void*>(A))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(e.b_md, eng, const_cast<int8_t*>(W))},
        {DNNL_ARG_DST, dnnl::memory(e.c_md, eng, Y)},
        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl::memory(zero_md, eng, &zero)}};
    const dnnl::memory::desc scale_md({N}, dnnl::memory::data_type::f32, dims{1});
    if (!scales_fixed)
        args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES,
                     dnnl::memory(scale_md, eng, const_cast<float*>(scale)));
    if (size_t bytes = e.scratch_md.get_size(); bytes > 0)
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch_md, eng, scratchpad.get(bytes)));
    e.prim->execute(stream, args);
    stream.wait();
}

// The start-up check: products that saturate an int16 pair sum (255·127 twice is 64770; for I8
// activations oneDNN without VNNI shifts them by 128 into u8 and hits the same limit), through a
// plain s32 primitive, a run-time-scaled one with a zero point, and one with fixed scales. Empty
// when oneDNN matched the exact sums (or had no kernel: the loops run then anyway), else what
// differed.
std::string s8_check() {
    constexpr int64_t M = 6, N = 5, K = 96;
    std::string bad;
    for (const DType at : {DType::U8, DType::I8}) {
        const bool u8 = at == DType::U8;
        std::vector<uint8_t> a(size_t(M * K));
        std::vector<int8_t> w(size_t(N * K));
        for (int64_t i = 0; i < M * K; ++i)  // the grid's ends, and a few values inside
            a[size_t(i)] = i % 7 == 3 ? uint8_t(i % 251) : (u8 ? 255 : uint8_t(i % 2 ? 127 : -128));
        for (int64_t i = 0; i < N * K; ++i)
            w[size_t(i)] = int8_t(i % 5 == 2 ? int(i % 97) - 48 : ((i / K) % 2 ? 127 : -128));
        const int32_t zero = u8 ? 3 : -2;
        std::vector<int32_t> want(size_t(M * N)), got(size_t(M * N));
        std::vector<float> want_y(size_t(M * N)), y(size_t(M * N)), scale(size_t(N), 1.0f);
        gemm_s8_scalar(M, N, K, a.data(), K, at, w.data(), K, want.data(), N);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                int64_t s = 0;  // |s| < 2^24: exact in the float result
                for (int64_t k = 0; k < K; ++k) {
                    const int64_t x =
                        u8 ? int64_t(a[size_t(m * K + k)]) : int64_t(int8_t(a[size_t(m * K + k)]));
                    s += (x - zero) * w[size_t(n * K + k)];
                }
                want_y[size_t(m * N + n)] = float(s);
            }
        const int threads = omp_get_max_threads();
        if (Entry e = build_s8({M, N, K, K, K, N, at, threads}); e.prim) {
            execute(e, a.data(), w.data(), got.data());
            if (got != want)
                bad += fmt::format("{} s32 {}: got {} for {}; ", dtype_name(at), e.impl, got[0],
                                   want[0]);
        }
        for (const bool fixed : {false, true}) {
            KeyS8 k{M, N, K, K, 0, N, at, threads, 1};
            if (fixed) k.scales = scale;
            Entry e = build_s8(k);
            if (!e.prim) continue;
            std::unique_ptr<int8_t, decltype(&std::free)> packed(
                static_cast<int8_t*>(
                    std::aligned_alloc(4096, (e.b_md.get_size() + 4095) / 4096 * 4096)),
                &std::free);
            ETE_CHECK(packed, "[gemm_s8] cannot allocate the start-up check's weights");
            reorder_weights(w.data(), N, K, K, e.b_md, packed.get());
            run_scaled(e, a.data(), packed.get(), scale.data(), N, zero, y.data(), fixed);
            if (y != want_y)
                bad += fmt::format("{} scaled {}: got {} for {}; ", dtype_name(at), e.impl, y[0],
                                   want_y[0]);
        }
    }
    return bad;
}

struct S8Engine {
    bool onednn;
    std::string why;
};

S8Engine choose_s8_engine() {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const bool vnni = isa_includes(isa, dnnl::cpu_isa::avx512_core_vnni);
    const std::string exact = fmt::format("exact {} kernel", gemm_s8_exact_isa());
    if (!vnni)
        return {false, fmt::format("{} ({} has no VNNI: its u8·s8 kernels saturate int16 sums)",
                                   exact, version_isa())};
    try {
        if (std::string bad = s8_check(); !bad.empty())
            return {false, fmt::format("{} ({} failed the start-up check: {})", exact,
                                       version_isa(), bad)};
    } catch (const dnnl::error& err) {
        return {false, fmt::format("{} ({} failed the start-up check: {})", exact, version_isa(),
                                   err.what())};
    }
    return {true, "VNNI, start-up check exact"};
}

// Set once s8_engine() has chosen (dnnl_s8_info(false) reads it without choosing).
std::atomic<const S8Engine*> g_s8_chosen{nullptr};

// Chosen once per process, at the first int8 GEMM (or `ete --version`).
const S8Engine& s8_engine() {
    note_profiled_kernel();
    static const S8Engine engine = [] {
        S8Engine e = choose_s8_engine();
        if (!e.onednn) log_info("[gemm_s8] int8 GEMMs run ETE's {}", e.why);
        return e;
    }();
    g_s8_chosen.store(&engine, std::memory_order_release);
    return engine;
}

// build_s8 where oneDNN is exact; elsewhere an entry the loops run.
Entry make_entry_s8(const KeyS8& k) {
    if (const S8Engine& s = s8_engine(); !s.onednn) {
        Entry e;
        e.impl = exact_impl();
        e.why = s.why;
        return e;
    }
    return build_s8(k);
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
        reorder_weights(w.plain(), w.N(), w.K(), w.ldw(), md, buf.get());
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
    try {
        run_scaled(e, A, W.layouts_->get(W, e.b_md), scale, N, zero, Y, fixed.has_value());
    } catch (const dnnl::error& err) {
        throw_error(
            fmt::format("[gemm_s8] oneDNN scaled int8 matmul {}x{}x{}: execution failed: {}", M, N,
                        K, err.what()));
    }
    return true;
}

std::string dnnl_gemm_s8_impl(int64_t M, int64_t N, int64_t K, int64_t lda, DType a_dtype,
                              int64_t ldw, int64_t ldc) {
    note_profiled_kernel();
    static const int8_t dummy = 0;
    dnnl_gemm_s8_check_args(M, N, K, &dummy, lda, a_dtype, &dummy, ldw,
                            reinterpret_cast<const int32_t*>(&dummy), ldc);
    if (M == 0 || N == 0 || K == 0) return exact_impl();
    return cached_entry_s8({M, N, K, lda, ldw, ldc, a_dtype, omp_get_max_threads()}).impl;
}

std::string dnnl_gemm_s8_check() {
    note_profiled_kernel();
    return s8_check();
}

bool dnnl_gemm_s8_uses_onednn() {
    return s8_engine().onednn;
}

std::string dnnl_s8_info(bool choose) {
    const S8Engine* chosen = g_s8_chosen.load(std::memory_order_acquire);
    if (!chosen && !choose) return kS8NotYetChosen;
    const S8Engine& e = chosen ? *chosen : s8_engine();
    return e.onednn ? fmt::format("{}: {}", version_isa(), e.why) : e.why;
}

}  // namespace ete::cpu
