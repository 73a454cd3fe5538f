// ete/backend/cuda/cuda_backend.h — the CUDA backend (one GPU), declared once; each op is defined
// in the file of its concern:
//
//   cuda_backend.cpp  device, stream, memory (stream-ordered pool), transfers, selection
//   cuda_ops.cpp      views → kernels.h launchers: elementwise, norms, RoPE, attention, loss,
//                     AdamW, quantization (QAT, int8, NF4), dropout
//   cuda_gemm.cpp     GEMMs through cuBLASLt (fp32 accumulation)
//
// Every op is enqueued on the backend's one stream and returns without waiting; download,
// sum_squares and synchronize wait. Memory comes from the device's stream-ordered pool
// (cudaMallocAsync; never managed memory), kept by the pool when freed (release threshold: all),
// so a training step's allocations cost no cudaMalloc after the first step.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "ete/backend/backend.h"
#include "ete/backend/cuda/kernels.h"

namespace ete::cuda {

// Throws ete::Error naming the call, what it was for and the file:line when e is an error.
void check(cudaError_t e, const char* call, const char* file, int line);
void check(cublasStatus_t st, const char* call, const char* file, int line);
#define ETE_CU(call) ::ete::cuda::check((call), #call, __FILE__, __LINE__)
// After kernel launches: a launch error (bad configuration) surfaces here, with the op's name.
void check_launch(const char* op);

// "<name> (sm_XY, N GiB), driver, runtime, cuBLASLt" of a device.
std::string device_summary(int device);

// The float storage type of a view (throws naming the op for a non-float dtype).
Ft ft(DType t, const char* op);
cuda::Mat mat(ete::Mat m, const char* op);
cuda::CMat cmat(ete::CMat m, const char* op);
inline cuda::Mat mat(Vec v, const char* op) {
    return mat(ete::Mat(v), op);
}
inline cuda::CMat cmat(CVec v, const char* op) {
    return cmat(ete::CMat(v), op);
}
const float* f32(CVec v, const char* op);  // an F32 vector's pointer (null when empty)
float* f32(Vec v, const char* op);
const int32_t* i32(CVec v, const char* op);  // an I32 vector's pointer (null when empty)

class CudaBackend final : public Backend {
  public:
    explicit CudaBackend(int device);
    ~CudaBackend() override;

    std::string name() const override { return "cuda"; }
    std::string describe() const override;

    // cuda_backend.cpp
    void* allocate(size_t bytes) override;
    void deallocate(void* p) noexcept override;
    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    void copy_bytes(void* dst, const void* src, size_t bytes) override;
    void fill_bytes(void* dst, int value, size_t bytes) override;
    void synchronize() override;
    bool host_addressable() const override { return false; }

    // cuda_ops.cpp
    void copy(ete::Mat dst, ete::CMat src) override;
    void fill(ete::Mat dst, float value) override;
    void add(ete::Mat x, ete::CMat y) override;
    void scale(Vec x, float s) override;
    void dropout(ete::Mat y, ete::CMat x, const DropoutMask& mask, bool accumulate) override;
    double sum_squares(CVec x) override;
    void bias_forward(ete::Mat y, CVec b) override;
    void bias_backward(Vec d_b, ete::CMat d_y) override;
    void embedding_forward(ete::Mat out, CVec ids, ete::CMat table, int64_t first_id) override;
    void embedding_backward(ete::Mat d_table, ete::CMat d_out, CVec ids, int64_t first_id) override;
    void pos_embedding_forward(ete::Mat out, ete::CMat wpe, CVec doc_start, int B, int T) override;
    void pos_embedding_backward(ete::Mat d_wpe, ete::CMat d_out, CVec doc_start, int B,
                                int T) override;
    void rmsnorm_forward(ete::Mat out, Vec rstd, ete::CMat x, CVec w, float eps) override;
    void rmsnorm_backward(ete::Mat d_x, Vec d_w, ete::CMat d_out, ete::CMat x, CVec w,
                          CVec rstd) override;
    void layernorm_forward(ete::Mat out, Vec mean, Vec rstd, ete::CMat x, CVec w, CVec b,
                           float eps) override;
    void layernorm_backward(ete::Mat d_x, Vec d_w, Vec d_b, ete::CMat d_out, ete::CMat x, CVec w,
                            CVec mean, CVec rstd) override;
    void rope_forward(ete::Mat qkv, ete::CMat cos, ete::CMat sin, AttnDims d) override;
    void rope_backward(ete::Mat d_qkv, ete::CMat cos, ete::CMat sin, AttnDims d) override;
    void attention_forward(ete::Mat out, Vec lse, ete::CMat qkv, AttnDims d, float scale) override;
    void attention_backward(ete::Mat d_qkv, ete::CMat d_out, ete::CMat out, CVec lse, ete::CMat qkv,
                            AttnDims d, float scale) override;
    void swiglu_forward(ete::Mat out, ete::CMat gate_up) override;
    void swiglu_backward(ete::Mat d_gate_up, ete::CMat d_out, ete::CMat gate_up) override;
    void geglu_forward(ete::Mat out, ete::CMat gate_up) override;
    void geglu_backward(ete::Mat d_gate_up, ete::CMat d_out, ete::CMat gate_up) override;
    void gelu_forward(ete::Mat out, ete::CMat x) override;
    void softcap_forward(ete::Mat x, ete::Mat d_cap, float cap) override;
    void softcap_backward(ete::Mat d_x, ete::CMat d_cap) override;
    void gelu_backward(ete::Mat d_x, ete::CMat d_out, ete::CMat x) override;
    void cross_entropy_forward_backward(ete::Mat logits, Vec losses, CVec targets, float d_scale,
                                        ete::Mat d_logits) override;
    void cross_entropy_forward(Vec losses, ete::CMat logits, CVec targets) override;
    void cross_entropy_stats(Vec lse, Vec target_logit, ete::CMat logits, CVec targets) override;
    void cross_entropy_backward(ete::Mat d_logits, ete::CMat logits, CVec lse, CVec targets,
                                float d_scale) override;
    void adamw_step(Vec p, CVec g, Vec m, Vec v, const AdamWStep& s, Vec p_compute) override;
    void adamw8bit_step(Vec p, CVec g, Vec m_codes, Vec v_codes, Vec m_absmax, Vec v_absmax,
                        int64_t block, const AdamWStep& s, Vec p_compute) override;

    // cuda_gemm.cpp
    void gemm(ete::CMat a, bool trans_a, ete::CMat b, bool trans_b, ete::Mat c, float alpha,
              float beta) override;

    // quantization and dropout (cuda_ops.cpp → quant.cu)
    void gemm_nf4(ete::CMat a, const Nf4View& w, bool trans_w, ete::Mat c, float alpha,
                  float beta) override;
    void gemm_s8(ete::CMat a, ete::CMat w, ete::Mat c) override;
    using Backend::gemm_s8;
    void gemm_s8_scaled(ete::CMat a, const S8Weight& w, ete::Mat y, CVec scale, int32_t zero,
                        float beta) override;
    void quantize_s8(ete::Mat q, ete::CMat x, CVec scale, CVec zero, const QuantGrid& g) override;
    void dequantize_s32(ete::Mat y, ete::CMat acc, CVec a_scale, CVec a_zero, int a_offset,
                        CVec w_scale, CVec w_sum, float beta) override;
    void dequantize_nf4(ete::Mat out, const Nf4View& w, int64_t row0) override;
    void min_max(Vec lo, Vec hi, ete::CMat x, int64_t group) override;
    void quant_params(Vec scale, Vec zero, CVec lo, CVec hi, const QuantGrid& g) override;
    void fake_quant(ete::Mat y, ete::CMat x, CVec scale, CVec zero, Vec mask, int64_t group,
                    const QuantGrid& g) override;
    void fake_quant_backward(ete::Mat d_x, ete::CMat d_y, CVec mask) override;
    void fake_quant_scale_grad(Vec d_scale, ete::CMat x, ete::CMat d_y, CVec scale, CVec zero,
                               int64_t group, const QuantGrid& g) override;

    cudaStream_t stream() const { return stream_; }

    // The kernels' view of an NF4 weight (its code table in device memory).
    cuda::Nf4 nf4(const Nf4View& w) const;

  private:
    // Device scratch of at least `bytes` for one op's temporaries (stream-ordered, so ops that
    // follow each other on the stream may reuse it).
    void* scratch(size_t bytes);

    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    void* lt_workspace_ = nullptr;
    size_t lt_workspace_bytes_ = 0;
    void* scratch_ = nullptr;
    size_t scratch_bytes_ = 0;
    double* host_double_ = nullptr;  // pinned: sum_squares' result
    float* nf4_code_ = nullptr;      // device: kNf4Code
    std::string describe_;
};

}  // namespace ete::cuda
