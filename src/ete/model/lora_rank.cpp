// ete/model/lora_rank.cpp — truncated SVD of an adapter through LAPACK (OpenBLAS ships it).
#include "ete/model/lora_rank.h"

#include <algorithm>
#include <cmath>

#include "ete/backend/cpu/kernel_use.h"
#include "ete/core/error.h"

extern "C" {
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau,
             double* work, const int* lwork, int* info);
void dgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, double* a,
             const int* lda, double* s, double* u, const int* ldu, double* vt, const int* ldvt,
             double* work, const int* lwork, int* info);
}

namespace ete {

namespace {

// Thin QR of the column-major (m, n) matrix q (m >= n): q becomes Q, r (n, n) column-major R.
void thin_qr(std::vector<double>& q, int m, int n, std::vector<double>& r) {
    cpu::note_profiled_kernel();  // LAPACK runs on the OpenBLAS core a profile picks
    std::vector<double> tau(static_cast<size_t>(n)), work(static_cast<size_t>(std::max(1, 64 * n)));
    const int lwork = int(work.size());
    int info = 0;
    dgeqrf_(&m, &n, q.data(), &m, tau.data(), work.data(), &lwork, &info);
    ETE_CHECK(info == 0, "lora rank: LAPACK dgeqrf failed (info {})", info);
    r.assign(size_t(n * n), 0.0);
    for (int j = 0; j < n; ++j)
        for (int i = 0; i <= j; ++i) r[size_t(i + j * n)] = q[size_t(i + j * m)];
    dorgqr_(&m, &n, &n, q.data(), &m, tau.data(), work.data(), &lwork, &info);
    ETE_CHECK(info == 0, "lora rank: LAPACK dorgqr failed (info {})", info);
}

}  // namespace

std::vector<double> lora_shrink(float* a, float* b, int64_t in, int64_t out, int R, int r,
                                int r_new, float scale) {
    ETE_ASSERT(0 < r_new && r_new < r && r <= R && r <= in && r <= out);
    const int m_b = int(out), m_a = int(in);
    std::vector<double> qb(size_t(out * r)), qa(size_t(in * r)), rb, ra;
    for (int64_t i = 0; i < out; ++i)
        for (int k = 0; k < r; ++k) qb[size_t(i + k * out)] = b[i * R + k];  // B_r, column-major
    for (int k = 0; k < r; ++k)
        for (int64_t j = 0; j < in; ++j) qa[size_t(j + k * in)] = a[k * in + j];  // A_rᵀ
    thin_qr(qb, m_b, r, rb);
    thin_qr(qa, m_a, r, ra);
    // core = R_B · R_Aᵀ (r × r, column-major).
    std::vector<double> core(size_t(r * r), 0.0);
    for (int i = 0; i < r; ++i)
        for (int j = 0; j < r; ++j) {
            double s = 0;
            for (int k = 0; k < r; ++k) s += rb[size_t(i + k * r)] * ra[size_t(j + k * r)];
            core[size_t(i + j * r)] = s;
        }
    std::vector<double> sv(static_cast<size_t>(r)), u(static_cast<size_t>(r * r)), vt(u.size());
    std::vector<double> work(size_t(std::max(1, 10 * r)));
    const int lwork = int(work.size());
    int info = 0;
    dgesvd_("A", "A", &r, &r, core.data(), &r, sv.data(), u.data(), &r, vt.data(), &r, work.data(),
            &lwork, &info);
    ETE_CHECK(info == 0, "lora rank: LAPACK dgesvd failed (info {})", info);
    // B' = Q_B U_t Σ^½, A' = Σ^½ V_tᵀ Q_Aᵀ.
    for (int64_t i = 0; i < out; ++i)
        for (int t = 0; t < R; ++t) {
            double s = 0;
            if (t < r_new) {
                for (int k = 0; k < r; ++k) s += qb[size_t(i + k * out)] * u[size_t(k + t * r)];
                s *= std::sqrt(sv[size_t(t)]);
            }
            b[i * R + t] = float(s);
        }
    for (int t = 0; t < R; ++t)
        for (int64_t j = 0; j < in; ++j) {
            double s = 0;
            if (t < r_new) {
                for (int k = 0; k < r; ++k) s += vt[size_t(t + k * r)] * qa[size_t(j + k * in)];
                s *= std::sqrt(sv[size_t(t)]);
            }
            a[t * in + j] = float(s);
        }
    std::vector<double> dropped;
    for (int t = r_new; t < r; ++t) dropped.push_back(double(scale) * sv[size_t(t)]);
    return dropped;
}

void lora_grow(float* a, float* b, int64_t in, int64_t out, int R, int r, int r_new,
               const std::function<float(int64_t)>& init_a) {
    ETE_ASSERT(0 < r && r < r_new && r_new <= R);
    for (int64_t i = 0; i < out; ++i)
        for (int t = r; t < r_new; ++t) b[i * R + t] = 0.0f;
    for (int t = r; t < r_new; ++t)
        for (int64_t j = 0; j < in; ++j) a[t * in + j] = init_a(t * in + j);
}

}  // namespace ete
