// tests/test_util.h — small helpers shared by the test binaries.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/error.h"

namespace ete {

// The message of the ete::Error that f throws, or "<no error>" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

namespace testing {

template <typename T>
constexpr DType host_dtype() {
    if constexpr (std::is_same_v<T, float>) return DType::F32;
    if constexpr (std::is_same_v<T, double>) return DType::F64;
    if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t>);
}

// Views of host vectors, for the backends whose memory is host memory (cpu, ref). rows = 0 means
// one row of v.size() elements. 16-bit data lives in uint16_t vectors with an explicit dtype.
template <typename T>
Mat host_mat(std::vector<T>& v, int64_t rows, int64_t cols, int64_t ld = -1) {
    return {v.data(), host_dtype<T>(), rows, cols, ld};
}
template <typename T>
CMat host_cmat(const std::vector<T>& v, int64_t rows, int64_t cols, int64_t ld = -1) {
    return {v.data(), host_dtype<T>(), rows, cols, ld};
}
template <typename T>
Vec host_vec(std::vector<T>& v) {
    return {v.data(), host_dtype<T>(), int64_t(v.size())};
}
template <typename T>
CVec host_cvec(const std::vector<T>& v) {
    return {v.data(), host_dtype<T>(), int64_t(v.size())};
}
inline Mat host_mat16(std::vector<uint16_t>& v, DType t, int64_t rows, int64_t cols,
                      int64_t ld = -1) {
    return {v.data(), t, rows, cols, ld};
}

// A buffer of backend memory holding a copy of host data (any backend, the guarded one too).
class DeviceCopy {
  public:
    template <typename T>
    DeviceCopy(Backend& be, const std::vector<T>& host, DType t = host_dtype<T>())
        : be_(&be),
          dtype_(t),
          n_(int64_t(host.size() * sizeof(T) / dtype_size(t))),
          buf_(be, host.size() * sizeof(T)) {
        be.upload(buf_.data(), host.data(), buf_.bytes());
    }
    Vec vec() const { return {buf_.data(), dtype_, n_}; }
    Mat mat(int64_t rows, int64_t cols) const { return {buf_.data(), dtype_, rows, cols}; }
    template <typename T>
    std::vector<T> download() const {
        std::vector<T> h(buf_.bytes() / sizeof(T));
        be_->download(h.data(), buf_.data(), buf_.bytes());
        return h;
    }

  private:
    Backend* be_;
    DType dtype_;
    int64_t n_;
    DeviceBuffer buf_;
};

}  // namespace testing
}  // namespace ete
