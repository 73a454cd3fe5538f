// ete/backend/cpu/dnnl/dnnl_common.h — what the oneDNN files (dnnl_gemm.cpp: the 16-bit matmul,
// dnnl_gemm_s8.cpp: the int8 one) share: the process's CPU engine, a cached primitive's entry,
// per-thread scratchpads and the primitive cache's lock. Seen only by backend/cpu/dnnl/.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ete/core/error.h"

namespace ete::cpu::onednn {

using dims = dnnl::memory::dims;

// A cached primitive for one key, or none: then ETE's own code runs the key, for `why`.
struct Entry {
    std::optional<dnnl::matmul> prim;
    dnnl::memory::desc a_md, b_md, c_md, scratch_md;
    std::string impl;  // oneDNN's implementation name, or what runs instead
    std::string why;   // why oneDNN does not
};

// Each ISA value is the bit set of the levels it includes (avx512_core_amx ⊃ avx512_core_bf16).
bool isa_includes(dnnl::cpu_isa have, dnnl::cpu_isa want);
// "oneDNN 2.6.3 (ISA avx512_core_bf16)"
std::string version_isa();
// The process's one CPU engine.
dnnl::engine& cpu_engine();
// Guards both primitive caches.
std::mutex& cache_mutex();

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

// Runs e's primitive on src A, weights B and dst C on this thread's stream, and waits.
void execute(const Entry& e, const void* A, const void* B, void* C);

}  // namespace ete::cpu::onednn
