// ete/io/bnb_nf4.cpp
#include "ete/io/bnb_nf4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* const kAux[] = {".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
                            kBnbNf4State};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The bytes of entry `name` as a vector of T, checking its dtype and element count.
template <typename T>
std::vector<T> entry(const SafetensorsFile& f, const std::string& name, DType dtype, size_t count,
                     const char* what) {
    ETE_CHECK(f.has(name), "{}: tensor '{}' is missing ({} of a bitsandbytes NF4 weight)", f.path(),
              name, what);
    const SafetensorsEntry& e = f.info(name);
    ETE_CHECK(e.dtype == dtype, "{}: tensor '{}' has dtype {}, expected {}", f.path(), name,
              dtype_name(e.dtype), dtype_name(dtype));
    ETE_CHECK(e.bytes.size() == count * sizeof(T), "{}: tensor '{}' has {} elements, expected {}",
              f.path(), name, e.bytes.size() / sizeof(T), count);
    std::vector<T> v(count);
    if (count) std::memcpy(v.data(), e.bytes.data(), e.bytes.size());
    return v;
}

template <typename T>
Tensor tensor_of(const std::vector<T>& v, Shape shape, DType dtype) {
    Tensor t = Tensor::empty(std::move(shape), dtype);
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(T));
    return t;
}

void check_values_finite(const std::vector<float>& v, const SafetensorsFile& f,
                         const std::string& name) {
    check_tensor_finite(v.data(), int64_t(v.size()), f.path(), name);
}

// Finite and in [lo, hi]: a block's absmax is a magnitude (negative flips its block's signs) and
// no real weight is near 1e8 (3e38 made every product overflow: NaN losses, exit 0).
void check_range(const std::vector<float>& v, float lo, float hi, const SafetensorsFile& f,
                 const std::string& name) {
    check_values_finite(v, f, name);
    for (size_t i = 0; i < v.size(); ++i)
        ETE_CHECK(v[i] >= lo && v[i] <= hi, "{}: tensor '{}' element {} is {}, expected [{}, {}]",
                  f.path(), name, i, v[i], lo, hi);
}

constexpr float kMaxAbsmax = 1e8f;

}  // namespace

bool is_bnb_aux_name(const std::string& name) {
    for (const char* s : kAux)
        if (ends_with(name, s)) return true;
    return false;
}

bool is_bnb_quantized(const SafetensorsFile& f, const std::string& name) {
    return f.has(name + kBnbNf4State) || f.has(name + ".quant_state.bitsandbytes__fp4");
}

Nf4Tensor read_bnb_nf4(const SafetensorsFile& f, const std::string& name, const Shape& shape) {
    const std::string where = fmt::format("{}: tensor '{}'", f.path(), name);
    ETE_CHECK(!f.has(name + ".quant_state.bitsandbytes__fp4"),
              "{} is bitsandbytes fp4, which ETE does not read (expected nf4)", where);
    ETE_CHECK(shape.size() == 2, "{}: a quantized tensor where the model has a {}-d parameter",
              where, shape.size());
    const auto state_bytes = f.bytes(name + kBnbNf4State);
    const json st = parse_json(
        std::string_view(reinterpret_cast<const char*>(state_bytes.data()), state_bytes.size()),
        where + ": its quant state");
    ETE_CHECK(st.is_object() && st.value("quant_type", "") == "nf4",
              "{}: quant state quant_type '{}', expected nf4", where,
              st.is_object() ? st.value("quant_type", "") : "");
    ETE_CHECK(st.contains("shape") && st["shape"] == json(shape),
              "{}: quant state shape {}, expected {}", where,
              st.contains("shape") ? st["shape"].dump() : "missing", shape_str(shape));
    const int64_t bs = json_get(st, "blocksize", int64_t(0), where + ": quant state");
    nf4_check_blocksize(bs, where.c_str());
    Nf4Tensor t;
    t.rows = shape[0];
    t.cols = shape[1];
    t.blocksize = int(bs);
    const size_t nb = size_t(t.blocks());
    const SafetensorsEntry& w = f.info(name);
    ETE_CHECK(w.dtype == DType::U8, "{}: dtype {}, expected U8 packed codes", where,
              dtype_name(w.dtype));
    t.packed = entry<uint8_t>(f, name, DType::U8, size_t((t.numel() + 1) / 2), "the codes");
    const auto qmap = entry<float>(f, name + ".quant_map", DType::F32, 16, "the code table");
    for (int i = 0; i < 16; ++i)
        ETE_CHECK(qmap[size_t(i)] == kNf4Code[size_t(i)],
                  "{}: quant_map[{}] = {}, expected the NF4 value {}", where, i, qmap[size_t(i)],
                  kNf4Code[size_t(i)]);
    const bool dq = f.has(name + ".nested_absmax");
    if (!dq) {
        t.absmax = entry<float>(f, name + ".absmax", DType::F32, nb, "the block absmax");
        check_range(t.absmax, 0.0f, kMaxAbsmax, f, name + ".absmax");
    } else {
        t.nested_blocksize =
            json_get(st, "nested_blocksize", int(kNf4NestedBlock), where + ": quant state");
        ETE_CHECK(t.nested_blocksize > 0 && t.nested_blocksize <= (1 << 20),
                  "{}: nested_blocksize {} out of range", where, t.nested_blocksize);
        const size_t nn = (nb + size_t(t.nested_blocksize) - 1) / size_t(t.nested_blocksize);
        t.absmax_q = entry<uint8_t>(f, name + ".absmax", DType::U8, nb, "the 8-bit block absmax");
        t.nested_absmax =
            entry<float>(f, name + ".nested_absmax", DType::F32, nn, "the nested absmax");
        t.nested_map =
            entry<float>(f, name + ".nested_quant_map", DType::F32, 256, "the 8-bit map");
        check_range(t.nested_absmax, 0.0f, kMaxAbsmax, f, name + ".nested_absmax");
        // bitsandbytes' signed dynamic map: 256 values in [-1, 1] reaching 1 (all zeros decoded
        // every absmax to the offset).
        check_range(t.nested_map, -1.0f, 1.0f, f, name + ".nested_quant_map");
        ETE_CHECK(*std::max_element(t.nested_map.begin(), t.nested_map.end()) >= 0.5f,
                  "{}: tensor '{}' is not bitsandbytes' dynamic map (its largest value is {}, "
                  "expected 1)",
                  f.path(), name + ".nested_quant_map",
                  *std::max_element(t.nested_map.begin(), t.nested_map.end()));
        ETE_CHECK(st.contains("nested_offset") && st["nested_offset"].is_number(),
                  "{}: quant state has no numeric nested_offset", where);
        t.offset = json_get(st, "nested_offset", 0.0f, where + ": quant state", false);
        ETE_CHECK(std::isfinite(t.offset) && std::fabs(t.offset) <= kMaxAbsmax,
                  "{}: nested_offset {} is out of range (expected |offset| <= {})", where, t.offset,
                  kMaxAbsmax);
    }
    t.check(where.c_str());
    return t;
}

void append_bnb_nf4(std::vector<std::pair<std::string, Tensor>>& out, const std::string& name,
                    const Nf4Tensor& t, const std::string& dtype_name) {
    out.emplace_back(name, tensor_of(t.packed, {int64_t(t.packed.size()), 1}, DType::U8));
    out.emplace_back(
        name + ".quant_map",
        tensor_of(std::vector<float>(kNf4Code.begin(), kNf4Code.end()), {16}, DType::F32));
    json st = {{"quant_type", "nf4"},
               {"blocksize", t.blocksize},
               {"dtype", dtype_name},
               {"shape", {t.rows, t.cols}}};
    if (t.double_quant()) {
        out.emplace_back(name + ".absmax",
                         tensor_of(t.absmax_q, {int64_t(t.absmax_q.size())}, DType::U8));
        out.emplace_back(name + ".nested_absmax",
                         tensor_of(t.nested_absmax, {int64_t(t.nested_absmax.size())}, DType::F32));
        out.emplace_back(name + ".nested_quant_map", tensor_of(t.nested_map, {256}, DType::F32));
        st["nested_blocksize"] = t.nested_blocksize;
        st["nested_dtype"] = "float32";
        st["nested_offset"] = t.offset;
    } else {
        out.emplace_back(name + ".absmax",
                         tensor_of(t.absmax, {int64_t(t.absmax.size())}, DType::F32));
    }
    const std::string s = st.dump();
    out.emplace_back(name + kBnbNf4State, tensor_of(std::vector<uint8_t>(s.begin(), s.end()),
                                                    {int64_t(s.size())}, DType::U8));
}

}  // namespace ete
