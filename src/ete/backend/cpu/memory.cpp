// ete/backend/cpu/memory.cpp — CPU backend memory (host or guarded), transfers, and the data
// movement ops: copy with dtype conversion, fill, add, scale, sum of squares.
//
// sum_squares adds fixed blocks of kSumBlock elements (each in double) and then the block sums in
// block order: the value does not depend on thread count or timing, so gradient clipping is
// reproducible on any machine running this build.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/guarded_memory.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a parallel region costs more
constexpr int64_t kSumBlock = 1 << 14;

template <typename D, typename S>
void copy_rows(D* dst, int64_t ldd, const S* src, int64_t lds, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        D* o = dst + r * ldd;
        const S* s = src + r * lds;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) store(o[c], load(s[c]));
    }
}

template <typename X, typename Y>
void add_rows(X* x, int64_t ldx, const Y* y, int64_t ldy, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        X* o = x + r * ldx;
        const Y* s = y + r * ldy;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) store(o[c], load(o[c]) + load(s[c]));
    }
}

template <typename T>
double sum_squares_block(const T* x, int64_t n) {
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) {
        const double v = load(x[i]);
        acc += v * v;
    }
    return acc;
}

// Bytes from which a contiguous copy runs on all threads (one core's copy bandwidth is well below
// the machine's), in chunks of whole cache lines.
constexpr size_t kParallelCopyBytes = size_t{1} << 20;

void copy_contiguous(void* dst, const void* src, size_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    const bool overlap = d < s + bytes && s < d + bytes;
    if (overlap || bytes < kParallelCopyBytes) {
        std::memmove(d, s, bytes);
        return;
    }
    const int64_t lines = int64_t((bytes + 63) / 64);
#pragma omp parallel
    {
        const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
        const size_t b = size_t(lines * t / n) * 64,
                     e = std::min(bytes, size_t(lines * (t + 1) / n) * 64);
        if (b < e) std::memcpy(d + b, s + b, e - b);
    }
}

void check_same_shape(const CMat& a, const CMat& b, const char* op) {
    ETE_CHECK(a.rows == b.rows && a.cols == b.cols, "{}: shapes ({}, {}) and ({}, {}) differ", op,
              a.rows, a.cols, b.rows, b.cols);
}

}  // namespace

CpuBackend::CpuBackend(Memory memory) {
    if (memory == Memory::Guarded) guard_ = std::make_unique<GuardedMemory>();
    planning_ = memory == Memory::Planning;
}

CpuBackend::~CpuBackend() = default;

void* CpuBackend::host_ptr(const void* p, size_t bytes) const {
    ETE_CHECK(!planning_ || !p,
              "the planning backend holds no memory: it counts allocations and runs no op");
    if (!guard_ || !p) return const_cast<void*>(p);
    return guard_->host(p, bytes);
}

void* CpuBackend::allocate(size_t bytes) {
    if (guard_) return guard_->allocate(bytes);
    if (planning_) return allocate_zeroed(bytes);
    void* p = std::aligned_alloc(64, std::max<size_t>((bytes + 63) / 64 * 64, 64));
    if (!p) throw std::bad_alloc();
    return p;
}

// Zeroed buffers from this size up get an anonymous mapping of their own: the kernel supplies
// zero pages when they are first touched, so no memset runs and pages never written (the fp32
// copies of weights that an integer model holds as integers) take no memory.
constexpr size_t kMappedMin = size_t{1} << 20;
constexpr size_t kPageBytes = 4096;

void* CpuBackend::allocate_zeroed(size_t bytes) {
    if (guard_ || (bytes < kMappedMin && !planning_)) return Backend::allocate_zeroed(bytes);
    const size_t len = std::max((bytes + kPageBytes - 1) / kPageBytes * kPageBytes, kPageBytes);
    void* p =
        planning_
            ? ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
            : ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    std::lock_guard<std::mutex> lock(mapped_mutex_);
    mapped_.emplace(p, len);
    return p;
}

void CpuBackend::deallocate(void* p) noexcept {
    if (guard_) return guard_->deallocate(p);
    if (p) {
        std::lock_guard<std::mutex> lock(mapped_mutex_);
        if (auto it = mapped_.find(p); it != mapped_.end()) {
            ::munmap(p, it->second);
            mapped_.erase(it);
            return;
        }
    }
    std::free(p);
}

void CpuBackend::upload(void* dst, const void* host_src, size_t bytes) {
    if (bytes && !planning_) std::memcpy(host_ptr(dst, bytes), host_src, bytes);
}

void CpuBackend::download(void* host_dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(host_dst, host_ptr(src, bytes), bytes);
}

void CpuBackend::copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes && !planning_) std::memmove(host_ptr(dst, bytes), host_ptr(src, bytes), bytes);
}

void CpuBackend::fill_bytes(void* dst, int value, size_t bytes) {
    if (bytes && !planning_) std::memset(host_ptr(dst, bytes), value, bytes);
}

void CpuBackend::copy(Mat dst, CMat src) {
    Scope h(*this, "copy");
    check_same_shape(dst, src, "copy");
    dst = h(dst);
    src = h(src);
    if (dst.dtype == src.dtype && dst.contiguous() && src.contiguous()) {
        return copy_contiguous(dst.data, src.data, dst.span_bytes());
    }
    with_float_type(dst.dtype, "copy", [&](auto d) {
        with_float_type(src.dtype, "copy", [&](auto s) {
            using D = decltype(d);
            using S = decltype(s);
            copy_rows(elems<D>(dst), dst.ld, elems<S>(src), src.ld, dst.rows, dst.cols);
        });
    });
}

void CpuBackend::fill(Mat dst, float value) {
    if (planning_) return;  // like fill_bytes: what a model's setup writes, never read
    Scope h(*this, "fill");
    dst = h(dst);
    with_float_type(dst.dtype, "fill", [&](auto d) {
        using D = decltype(d);
        D v;
        store(v, value);
        D* p = elems<D>(dst);
        for (int64_t r = 0; r < dst.rows; ++r)
            std::fill(p + r * dst.ld, p + r * dst.ld + dst.cols, v);
    });
}

void CpuBackend::add(Mat x, CMat y) {
    Scope h(*this, "add");
    check_same_shape(x, y, "add");
    x = h(x);
    y = h(y);
    with_float_type(x.dtype, "add", [&](auto a) {
        with_float_type(y.dtype, "add", [&](auto b) {
            using X = decltype(a);
            using Y = decltype(b);
            add_rows(elems<X>(x), x.ld, elems<Y>(y), y.ld, x.rows, x.cols);
        });
    });
}

void CpuBackend::scale(Vec x, float s) {
    Scope h(*this, "scale");
    x = h(x);
    with_float_type(x.dtype, "scale", [&](auto t) {
        using T = decltype(t);
        T* p = elems<T>(x);
        const int64_t n = x.n;
#pragma omp parallel for simd schedule(simd : static) if (n >= kParallelMin)
        for (int64_t i = 0; i < n; ++i) store(p[i], load(p[i]) * s);
    });
}

double CpuBackend::sum_squares(CVec x) {
    Scope h(*this, "sum_squares");
    x = h(x);
    return with_float_type(x.dtype, "sum_squares", [&](auto t) {
        using T = decltype(t);
        const T* p = elems<T>(x);
        const int64_t n = x.n, nblk = (n + kSumBlock - 1) / kSumBlock;
        if (nblk <= 1) return sum_squares_block(p, n);
        std::vector<double> part(static_cast<size_t>(nblk));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
        for (int64_t b = 0; b < nblk; ++b)
            part[size_t(b)] =
                sum_squares_block(p + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
        double acc = 0;
        for (double s : part) acc += s;
        return acc;
    });
}

}  // namespace ete::cpu
