// ete/backend/backend.cpp — backend selection by name, and the packed-rows validation every
// backend and the model share.
#include "ete/backend/backend.h"

#include <algorithm>
#include <cmath>

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

std::unique_ptr<Backend> make_backend(const std::string& name) {
    if (name == "cpu") return make_cpu_backend();
    if (name == "ref") return make_ref_backend();
    if (name == "guarded") return make_guarded_backend();
    if (name == "cuda") return make_cuda_backend();
    throw_error(fmt::format("backend '{}': expected one of cpu, ref, guarded, cuda", name));
}

}  // namespace ete
