// ete/backend/cpu/cpu_backend.h — the optimized CPU backend (OpenMP + SIMD + OpenBLAS, oneDNN for
// 16-bit GEMMs), declared once; each op is defined in the file of its concern:
//
//   memory.cpp       allocation, transfers, copy/fill/add/scale/sum_squares
//   gemm.cpp         gemm (OpenBLAS sgemm for f32, oneDNN for bf16/fp16), the core-type fix,
//                    and the int8 GEMM (oneDNN's int8 matmul, or exact loops)
//   nf4.cpp          NF4 dequantization and the tiled NF4 GEMM
//   elementwise.cpp  bias, embeddings, SwiGLU, GELU
//   norm.cpp         RMSNorm, LayerNorm
//   attention.cpp    RoPE, flash attention
//   loss.cpp         cross-entropy
//   optim.cpp        AdamW
//   optim8.cpp       8-bit AdamW (compiled without floating-point contraction)
//   dropout.cpp      counter-based dropout (LoRA's adapter input)
//   fake_quant.cpp   QAT: block min/max, quantization parameters, fake quant and its STE
//   int8.cpp         the integer model: activation quantization, packed int8 GEMM, dequantization
//
// Memory. Normally plain host memory. In guarded mode (make_guarded_backend) every allocation is
// mapped twice (cpu/guarded_memory.h): the address handed out is PROT_NONE, so any load or store
// from outside this backend faults, and the ops translate each view to its read-write alias first
// — checking on the way that the view lies inside one live allocation. The kernels are the same.
// In planning mode (make_planning_backend) an allocation is address space only (PROT_NONE,
// MAP_NORESERVE): a model of any size can be built to count its memory, uploads and fills do
// nothing, and any op or download throws.
// Each op starts with a Scope: it translates views, and reports to the profiler when one is set.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ete/backend/backend.h"

namespace ete::cpu {

class GuardedMemory;

class CpuBackend final : public Backend {
  public:
    enum class Memory { Host, Guarded, Planning };
    explicit CpuBackend(Memory memory = Memory::Host);
    ~CpuBackend() override;

    std::string name() const override {
        return guard_ ? "guarded" : planning_ ? "planning" : "cpu";
    }
    std::string describe() const override;
    // The per-thread buffers, and a 16-bit compute dtype's fp32 staging where its GEMMs run the
    // sgemm fallback (dnnl_gemm.h).
    uint64_t gemm_workspace_bytes(DType compute, uint64_t largest, int threads) const override;

    // memory.cpp
    void* allocate(size_t bytes) override;
    void* allocate_zeroed(size_t bytes) override;
    void deallocate(void* p) noexcept override;
    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    void copy_bytes(void* dst, const void* src, size_t bytes) override;
    void fill_bytes(void* dst, int value, size_t bytes) override;
    void synchronize() override {}
    bool host_addressable() const override { return !guard_; }
    void copy(Mat dst, CMat src) override;
    void fill(Mat dst, float value) override;
    void add(Mat x, CMat y) override;
    void scale(Vec x, float s) override;
    double sum_squares(CVec x) override;

    // dropout.cpp
    void dropout(Mat y, CMat x, const DropoutMask& mask, bool accumulate) override;

    // gemm.cpp
    void gemm(CMat a, bool trans_a, CMat b, bool trans_b, Mat c, float alpha, float beta) override;

    void gemm_s8(CMat a, CMat w, Mat c) override;

    // int8.cpp
    std::unique_ptr<S8Weight> prepare_s8(CMat w) override;
    void gemm_s8(CMat a, const S8Weight& w, Mat c) override;
    void gemm_s8_scaled(CMat a, const S8Weight& w, Mat y, CVec scale, int32_t zero,
                        float beta) override;
    void quantize_s8(Mat q, CMat x, CVec scale, CVec zero, const QuantGrid& g) override;
    void dequantize_s32(Mat y, CMat acc, CVec a_scale, CVec a_zero, int a_offset, CVec w_scale,
                        CVec w_sum, float beta) override;

    // nf4.cpp
    void gemm_nf4(CMat a, const Nf4View& w, bool trans_w, Mat c, float alpha, float beta) override;
    void dequantize_nf4(Mat out, const Nf4View& w, int64_t row0) override;

    // elementwise.cpp
    void bias_forward(Mat y, CVec b) override;
    void bias_backward(Vec d_b, CMat d_y) override;
    void embedding_forward(Mat out, CVec ids, CMat table, int64_t first_id) override;
    void embedding_backward(Mat d_table, CMat d_out, CVec ids, int64_t first_id) override;
    void pos_embedding_forward(Mat out, CMat wpe, CVec doc_start, int B, int T) override;
    void pos_embedding_backward(Mat d_wpe, CMat d_out, CVec doc_start, int B, int T) override;
    void swiglu_forward(Mat out, CMat gate_up) override;
    void swiglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) override;
    void geglu_forward(Mat out, CMat gate_up) override;
    void geglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) override;
    void swiglu_quantize(Mat q, CMat gate_up, CVec scale, CVec zero, const QuantGrid& g) override;
    void rmsnorm_quantize(Mat q, CMat x, CVec w, float eps, CVec scale, CVec zero,
                          const QuantGrid& g) override;
    void gelu_forward(Mat out, CMat x) override;
    void gelu_backward(Mat d_x, CMat d_out, CMat x) override;

    // norm.cpp
    void rmsnorm_forward(Mat out, Vec rstd, CMat x, CVec w, float eps) override;
    void rmsnorm_backward(Mat d_x, Vec d_w, CMat d_out, CMat x, CVec w, CVec rstd) override;
    void layernorm_forward(Mat out, Vec mean, Vec rstd, CMat x, CVec w, CVec b, float eps) override;
    void layernorm_backward(Mat d_x, Vec d_w, Vec d_b, CMat d_out, CMat x, CVec w, CVec mean,
                            CVec rstd) override;

    // attention.cpp
    void rope_forward(Mat qkv, CMat cos, CMat sin, AttnDims d) override;
    void rope_backward(Mat d_qkv, CMat cos, CMat sin, AttnDims d) override;
    void attention_forward(Mat out, Vec lse, CMat qkv, AttnDims d, float scale) override;
    void attention_backward(Mat d_qkv, CMat d_out, CMat out, CVec lse, CMat qkv, AttnDims d,
                            float scale) override;

    // loss.cpp
    void cross_entropy_forward_backward(Mat logits, Vec losses, CVec targets, float d_scale,
                                        Mat d_logits) override;
    void softcap_forward(Mat x, Mat d_cap, float cap) override;
    void softcap_backward(Mat d_x, CMat d_cap) override;
    void cross_entropy_forward(Vec losses, CMat logits, CVec targets) override;
    void cross_entropy_stats(Vec lse, Vec target_logit, CMat logits, CVec targets) override;
    void cross_entropy_backward(Mat d_logits, CMat logits, CVec lse, CVec targets,
                                float d_scale) override;

    // fake_quant.cpp
    void min_max(Vec lo, Vec hi, CMat x, int64_t group) override;
    void quant_params(Vec scale, Vec zero, CVec lo, CVec hi, const QuantGrid& g) override;
    void fake_quant(Mat y, CMat x, CVec scale, CVec zero, Vec mask, int64_t group,
                    const QuantGrid& g) override;
    void fake_quant_backward(Mat d_x, CMat d_y, CVec mask) override;
    void fake_quant_own_range(Mat y, CMat x, Vec scale, int64_t group, const QuantGrid& g) override;
    void fake_quant_scale_grad(Vec d_scale, CMat x, CMat d_y, CVec scale, CVec zero, int64_t group,
                               const QuantGrid& g) override;

    // optim.cpp
    void adamw_step(Vec p, CVec g, Vec m, Vec v, const AdamWStep& s, Vec p_compute) override;
    void adamw8bit_step(Vec p, CVec g, Vec m_codes, Vec v_codes, Vec m_absmax, Vec v_absmax,
                        int64_t block, const AdamWStep& s, Vec p_compute) override;

  private:
    // One op: host views of its arguments, and its timing when a profiler is set.
    class Scope {
      public:
        Scope(const CpuBackend& be, const char* op, double flops = 0)
            : be_(be), op_(op), flops_(flops) {
            if (be_.profiler_) t0_ = std::chrono::steady_clock::now();
        }
        ~Scope() {
            if (!be_.profiler_) return;
            std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0_;
            be_.profiler_->record(op_, dt.count(), flops_);
        }
        template <typename P>
        MatViewT<P> operator()(MatViewT<P> m) const {
            m.data = static_cast<P>(be_.host_ptr(m.data, m.span_bytes()));
            return m;
        }
        template <typename P>
        VecViewT<P> operator()(VecViewT<P> v) const {
            v.data = static_cast<P>(be_.host_ptr(v.data, v.bytes()));
            return v;
        }
        AttnDims operator()(AttnDims d) const {
            d.doc_start = (*this)(d.doc_start);
            return d;
        }

      private:
        const CpuBackend& be_;
        const char* op_;
        double flops_;
        std::chrono::steady_clock::time_point t0_{};
    };

    // SwiGLU (gelu = false) or GeGLU: the checks and the dispatch they share.
    void glu_forward(Mat out, CMat gate_up, bool gelu);
    void glu_backward(Mat d_gate_up, CMat d_out, CMat gate_up, bool gelu);
    // The host address of [p, p + bytes) of this backend's memory (p itself unless guarded).
    void* host_ptr(const void* p, size_t bytes) const;
    // An NF4 view with every pointer translated like host_ptr.
    Nf4View host_view(const Nf4View& w) const;

    std::unique_ptr<GuardedMemory> guard_;
    bool planning_ = false;  // make_planning_backend: address space only
    // allocate_zeroed's anonymous mappings (address -> length), which deallocate unmaps.
    std::mutex mapped_mutex_;
    std::unordered_map<void*, size_t> mapped_;
    // Host scratch of the ops that need one (dequantized NF4 tiles); grows, never shrinks. Only
    // this backend's kernels see it, so it is plain host memory even in guarded mode.
    std::vector<std::byte> workspace_;
};

}  // namespace ete::cpu
