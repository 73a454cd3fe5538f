// ete/backend/cuda/cuda_backend.cpp — the CUDA backend's device, stream, memory and transfers, the
// view conversions the ops share, and make_cuda_backend.
#include "ete/backend/cuda/cuda_backend.h"
#include "ete/backend/cuda/cublaslt_api.h"

#include <cstdint>
#include <cstdlib>

#include "ete/core/error.h"
#include "ete/core/nf4.h"

namespace ete {
namespace cuda {

void check(cudaError_t e, const char* call, const char* file, int line) {
    if (e == cudaSuccess) return;
    throw_error(fmt::format("[cuda] {} failed: {} ({}) at {}:{}", call, cudaGetErrorString(e),
                            cudaGetErrorName(e), file, line));
}

void check(cublasStatus_t st, const char* call, const char* file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    throw_error(
        fmt::format("[cuda] {} failed: cuBLAS status {} at {}:{}", call, int(st), file, line));
}

void check_launch(const char* op) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return;
    throw_error(fmt::format("[cuda] {}: kernel launch failed: {}", op, cudaGetErrorString(e)));
}

Ft ft(DType t, const char* op) {
    switch (t) {
        case DType::F32:
            return Ft::F32;
        case DType::BF16:
            return Ft::BF16;
        case DType::F16:
            return Ft::F16;
        default:
            throw_error(
                fmt::format("[cuda] {}: dtype {}, expected F32, BF16 or F16", op, dtype_name(t)));
    }
}

cuda::Mat mat(ete::Mat m, const char* op) {
    return {m.data, ft(m.dtype, op), m.rows, m.cols, m.ld};
}
cuda::CMat cmat(ete::CMat m, const char* op) {
    return {m.data, ft(m.dtype, op), m.rows, m.cols, m.ld};
}

const float* f32(CVec v, const char* op) {
    if (v.empty()) return nullptr;
    ETE_CHECK(v.dtype == DType::F32, "[cuda] {}: dtype {}, expected F32", op, dtype_name(v.dtype));
    return static_cast<const float*>(v.data);
}
float* f32(Vec v, const char* op) {
    return const_cast<float*>(f32(CVec(v), op));
}
const int32_t* i32(CVec v, const char* op) {
    if (v.empty()) return nullptr;
    ETE_CHECK(v.dtype == DType::I32, "[cuda] {}: dtype {}, expected I32", op, dtype_name(v.dtype));
    return static_cast<const int32_t*>(v.data);
}

CudaBackend::CudaBackend(int device) : device_(device) {
    int count = 0;
    ETE_CU(cudaGetDeviceCount(&count));
    ETE_CHECK(device >= 0 && device < count, "[cuda] device {}: expected 0..{} ({} visible)",
              device, count - 1, count);
    ETE_CU(cudaSetDevice(device));
    ETE_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The pool keeps what is freed (no release back to the driver at synchronization points).
    cudaMemPool_t pool = nullptr;
    ETE_CU(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    ETE_CU(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    ETE_CU(lt().cublasLtCreate(&lt_));
    lt_workspace_bytes_ = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper
    ETE_CU(cudaMalloc(&lt_workspace_, lt_workspace_bytes_));
    ETE_CU(cudaMallocHost(reinterpret_cast<void**>(&host_double_), sizeof(double)));
    ETE_CU(cudaMalloc(reinterpret_cast<void**>(&nf4_code_), sizeof(kNf4Code)));
    ETE_CU(cudaMemcpy(nf4_code_, kNf4Code.data(), sizeof(kNf4Code), cudaMemcpyHostToDevice));

    describe_ = fmt::format("cuda:{} {}", device, device_summary(device));
}

std::string device_summary(int device) {
    cudaDeviceProp prop{};
    ETE_CU(cudaGetDeviceProperties(&prop, device));
    int driver = 0, runtime = 0;
    ETE_CU(cudaDriverGetVersion(&driver));
    ETE_CU(cudaRuntimeGetVersion(&runtime));
    const size_t ltv = lt().cublasLtGetVersion();
    return fmt::format("{} (sm_{}{}, {:.1f} GiB), driver {}.{}, runtime {}.{}, cuBLASLt {}.{}.{}",
                       prop.name, prop.major, prop.minor,
                       double(prop.totalGlobalMem) / double(1ull << 30), driver / 1000,
                       driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, ltv / 10000,
                       ltv / 100 % 100, ltv % 100);
}

CudaBackend::~CudaBackend() {
    // Errors here cannot be reported (a destructor); the device is left as the driver has it.
    cudaStreamSynchronize(stream_);
    if (scratch_) cudaFree(scratch_);
    if (lt_workspace_) cudaFree(lt_workspace_);
    if (host_double_) cudaFreeHost(host_double_);
    if (nf4_code_) cudaFree(nf4_code_);
    if (lt_) lt().cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaBackend::describe() const {
    return describe_;
}

void* CudaBackend::allocate(size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes ? bytes : 1, stream_);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw_error(
            fmt::format("[cuda] out of device memory: {:.2f} GiB requested, {:.2f} of "
                        "{:.2f} GiB free on cuda:{}",
                        double(bytes) / double(1ull << 30), double(free_b) / double(1ull << 30),
                        double(total_b) / double(1ull << 30), device_));
    }
    ETE_CU(e);
    return p;
}

void CudaBackend::deallocate(void* p) noexcept {
    if (p) cudaFreeAsync(p, stream_);
}

void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
    if (bytes == 0) return;
    ETE_CU(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    // The caller may reuse host_src at once; pageable sources are staged by the driver, but a
    // pinned one would still be read later, so wait.
    ETE_CU(cudaStreamSynchronize(stream_));
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    ETE_CU(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    ETE_CU(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    ETE_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill_bytes(void* dst, int value, size_t bytes) {
    if (bytes == 0) return;
    ETE_CU(cudaMemsetAsync(dst, value, bytes, stream_));
}

void CudaBackend::synchronize() {
    ETE_CU(cudaStreamSynchronize(stream_));
}

void* CudaBackend::scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    if (scratch_) ETE_CU(cudaFreeAsync(scratch_, stream_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    ETE_CU(cudaMallocAsync(&scratch_, bytes, stream_));
    scratch_bytes_ = bytes;
    return scratch_;
}

}  // namespace cuda

std::string cuda_unavailable_reason() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fmt::format("no CUDA device usable: {} ({})", cudaGetErrorString(e),
                           cudaGetErrorName(e));
    }
    return count > 0 ? std::string() : std::string("no CUDA device visible");
}

std::string cuda_summary() {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) return "CUDA: " + why;
    int count = 0;
    ETE_CU(cudaGetDeviceCount(&count));
    return fmt::format("CUDA: {} device{}, cuda:0 {}", count, count == 1 ? "" : "s",
                       cuda::device_summary(0));
}

int cuda_device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
    const std::string why = cuda_unavailable_reason();
    ETE_CHECK(why.empty(), "[cuda] backend 'cuda': {}", why);
    return std::make_unique<cuda::CudaBackend>(device);
}

// The device: ETE_CUDA_DEVICE when set, else 0 (the trainer picks by local rank instead).
std::unique_ptr<Backend> make_cuda_backend() {
    const std::string why = cuda_unavailable_reason();
    ETE_CHECK(why.empty(), "[cuda] backend 'cuda': {}", why);
    return make_cuda_backend(
        pick_cuda_device(std::getenv("ETE_CUDA_DEVICE"), 0, cuda_device_count()));
}

}  // namespace ete
