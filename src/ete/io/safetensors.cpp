// ete/io/safetensors.cpp — header validation, typed copies out of the map, and the writer.
#include "ete/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_set>

#include "ete/core/error.h"

namespace ete {

// The length prefix and the tensor bytes are little-endian; they are copied without swapping.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

// nlohmann::json (std::map objects) rather than ordered_json, whose linear key lookup would make a
// header with millions of keys quadratic; header order is recorded while parsing instead.
using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr const char* kMetadataKey = "__metadata__";

// JSON-quotes a name so hostile names (newlines, control bytes) keep error messages on one line.
std::string quote(const std::string& s) {
    return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A JSON number that is a non-negative integer; floats such as 2.0 or 1e3 are rejected.
bool json_to_u64(const Json& j, uint64_t* out) {
    if (j.is_number_unsigned()) {
        *out = j.get<uint64_t>();
        return true;
    }
    if (j.is_number_integer() && j.get<int64_t>() >= 0) {  // e.g. "-0"
        *out = uint64_t(j.get<int64_t>());
        return true;
    }
    return false;
}

// Builds the header DOM from parse events, like nlohmann's own parser, and also records what that
// parser drops: keys repeated inside one object (it keeps the last silently) and the top-level
// key order. Its callback parser is not used because it rescans the parent object after every
// nested object, which is quadratic in the number of tensors.
class HeaderBuilder : public nlohmann::json_sax<Json> {
  public:
    // A valid header nests 3 deep ({entry{shape[]}}); the slack lets a shape like [[2]] reach the
    // shape check and get its specific message.
    static constexpr size_t kMaxDepth = 8;

    Json root;
    std::vector<std::string> order;  // top-level keys in file order
    std::string duplicate;           // first repeated key, if any
    std::string error;               // parse error, if any

    bool null() override { return put(nullptr) != nullptr; }
    bool boolean(bool v) override { return put(v) != nullptr; }
    bool number_integer(number_integer_t v) override { return put(v) != nullptr; }
    bool number_unsigned(number_unsigned_t v) override { return put(v) != nullptr; }
    bool number_float(number_float_t v, const string_t&) override { return put(v) != nullptr; }
    bool string(string_t& v) override { return put(std::move(v)) != nullptr; }
    bool binary(binary_t& v) override { return put(Json::binary(std::move(v))) != nullptr; }
    bool start_object(size_t) override { return open(Json::object()); }
    bool start_array(size_t) override { return open(Json::array()); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }

    bool key(string_t& k) override {
        if (stack_.back()->contains(k) && duplicate.empty()) duplicate = k;
        if (stack_.size() == 1) order.push_back(k);
        key_ = std::move(k);
        return true;
    }

    bool parse_error(size_t, const std::string&, const Json::exception& e) override {
        error = e.what();
        return false;
    }

  private:
    // Places a value in the open container (or as the root). Pointers to open containers stay
    // valid: nothing is added to a container while one of its children is open.
    Json* put(Json v) {
        if (stack_.empty()) return &(root = std::move(v));
        Json& parent = *stack_.back();
        if (parent.is_array()) {
            parent.push_back(std::move(v));
            return &parent.back();
        }
        return &(parent[key_] = std::move(v));
    }
    bool open(Json container) {
        if (stack_.size() >= kMaxDepth) {
            error = fmt::format("nested deeper than {} levels", kMaxDepth);
            return false;
        }
        stack_.push_back(put(std::move(container)));
        return true;
    }
    bool close() {
        stack_.pop_back();
        return true;
    }

    std::vector<Json*> stack_;
    std::string key_;
};

struct Header {
    Json json;
    std::vector<std::string> order;  // top-level keys in file order
};

Header parse_header_json(const std::string& path, std::string_view text) {
    ETE_CHECK(is_valid_utf8(text), "safetensors {}: header is not valid UTF-8", path);
    size_t first = text.find_first_not_of(" \t\r\n");
    ETE_CHECK(first != std::string_view::npos && text[first] == '{',
              "safetensors {}: header does not start with '{{' (expected a JSON object)", path);
    HeaderBuilder b;
    bool ok = Json::sax_parse(text.begin(), text.end(), &b);
    ETE_CHECK(ok && b.error.empty(), "safetensors {}: header is not a valid JSON object: {}", path,
              b.error);
    ETE_CHECK(b.duplicate.empty(), "safetensors {}: duplicate key {} in header", path,
              quote(b.duplicate));
    ETE_CHECK(b.root.is_object(), "safetensors {}: header is not a valid JSON object", path);
    return {std::move(b.root), std::move(b.order)};
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const Json& j) {
    ETE_CHECK(j.is_object(), "safetensors {}: __metadata__ must be an object of string values",
              path);
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : j.items()) {
        ETE_CHECK(v.is_string(),
                  "safetensors {}: __metadata__ must be an object of string values, but {} is {}",
                  path, quote(k), v.type_name());
        out[k] = v.get<std::string>();
    }
    return out;
}

Shape parse_shape(const std::string& path, const std::string& name, const Json& j) {
    auto fail = [&] {
        throw_error(
            fmt::format("safetensors {}: entry {} shape must be an array of non-negative "
                        "integers, got {}",
                        path, quote(name), j.dump(-1, ' ', false, Json::error_handler_t::replace)));
    };
    if (!j.is_array()) fail();
    Shape shape;
    for (const auto& d : j) {
        uint64_t v;
        if (!json_to_u64(d, &v) || v > uint64_t(std::numeric_limits<int64_t>::max())) fail();
        shape.push_back(int64_t(v));
    }
    return shape;
}

// Element count and byte size, both checked for overflow. Every prefix product must fit int64,
// not only the total: Tensor's shape_numel multiplies left to right under that rule, so a
// zero-element shape such as [2^62, 2, 0] must be refused here rather than throw in to_tensor.
uint64_t checked_nbytes(const std::string& path, const std::string& name, const Shape& shape,
                        DType dtype) {
    uint64_t numel = 1;
    bool overflow = false;
    for (int64_t d : shape) {
        overflow |= __builtin_mul_overflow(numel, uint64_t(d), &numel);
        overflow |= numel > uint64_t(std::numeric_limits<int64_t>::max());
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(dtype)), &nbytes);
    ETE_CHECK(!overflow, "safetensors {}: entry {} element count overflows for shape {}", path,
              quote(name), shape_str(shape));
    return nbytes;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const Json& j) {
    ETE_CHECK(j.is_object(), "safetensors {}: entry {} is not an object (got {})", path,
              quote(name), j.type_name());
    for (const auto& [k, v] : j.items()) {
        ETE_CHECK(k == "dtype" || k == "shape" || k == "data_offsets",
                  "safetensors {}: entry {} has unknown field {} (expected only dtype, shape, "
                  "data_offsets)",
                  path, quote(name), quote(k));
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
        ETE_CHECK(j.contains(field), "safetensors {}: entry {} is missing field \"{}\"", path,
                  quote(name), field);
    }
    SafetensorsEntry e;
    const Json& dt = j["dtype"];
    ETE_CHECK(dt.is_string() && dtype_from_name(dt.get<std::string>(), &e.dtype),
              "safetensors {}: entry {} has unknown dtype {}", path, quote(name),
              dt.dump(-1, ' ', false, Json::error_handler_t::replace));
    e.shape = parse_shape(path, name, j["shape"]);
    uint64_t nbytes = checked_nbytes(path, name, e.shape, e.dtype);
    const Json& off = j["data_offsets"];
    bool ok = off.is_array() && off.size() == 2 && json_to_u64(off[0], &e.begin) &&
              json_to_u64(off[1], &e.end) && e.end >= e.begin;
    ETE_CHECK(ok,
              "safetensors {}: entry {} data_offsets must be two non-negative integers [begin, "
              "end] with end >= begin, got {}",
              path, quote(name), off.dump(-1, ' ', false, Json::error_handler_t::replace));
    ETE_CHECK(e.end - e.begin == nbytes,
              "safetensors {}: entry {} byte length {} does not equal shape {} x {} bytes = {}",
              path, quote(name), e.end - e.begin, shape_str(e.shape), dtype_size(e.dtype), nbytes);
    return e;
}

// The data buffer must be tiled exactly: sorted by offset, each tensor begins where the previous
// ended (the first at 0), and the last one ends at the end of the file.
void check_layout(const std::string& path,
                  const std::unordered_map<std::string, SafetensorsEntry>& entries,
                  uint64_t data_start, uint64_t file_size) {
    std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
    for (const auto& [name, e] : entries) spans.emplace_back(e.begin, e.end, &name);
    std::sort(spans.begin(), spans.end());
    uint64_t expected = 0;
    for (const auto& [begin, end, name] : spans) {
        ETE_CHECK(begin == expected,
                  "safetensors {}: tensor data is not contiguous: entry {} begins at {}, expected "
                  "{} (gap or overlap)",
                  path, quote(*name), begin, expected);
        expected = end;
    }
    const uint64_t buffer_size = file_size - data_start;  // no wrap: open() checked 8 + N <= size
    ETE_CHECK(expected == buffer_size,
              "safetensors {}: tensor data needs {} bytes after the header, which does not match "
              "the file size {} ({})",
              path, expected, file_size, expected < buffer_size ? "trailing bytes" : "truncated");
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    SafetensorsFile f;
    f.file_ = MappedFile(path);
    const uint64_t size = f.file_.size();
    ETE_CHECK(size >= 8,
              "safetensors {}: file is {} bytes, shorter than 8 bytes (the header length)", path,
              size);
    uint64_t n;
    std::memcpy(&n, f.file_.data(), 8);
    ETE_CHECK(n <= kMaxHeaderBytes,
              "safetensors {}: header length {} exceeds the limit of {} bytes", path, n,
              kMaxHeaderBytes);
    ETE_CHECK(8 + n <= size, "safetensors {}: header length {} runs past the file end ({} bytes)",
              path, n, size);
    f.data_start_ = 8 + n;
    std::string_view text(reinterpret_cast<const char*>(f.file_.data()) + 8, size_t(n));
    Header header = parse_header_json(path, text);
    for (const std::string& name : header.order) {
        const Json& value = header.json[name];
        if (name == kMetadataKey) {
            f.metadata_ = parse_metadata(path, value);
            continue;
        }
        SafetensorsEntry e = parse_entry(path, name, value);
        f.names_.push_back(name);
        f.entries_.emplace(name, std::move(e));
    }
    check_layout(path, f.entries_, f.data_start_, size);
    for (auto& [name, e] : f.entries_) {
        e.bytes = {f.file_.data() + f.data_start_ + e.begin, size_t(e.end - e.begin)};
    }
    return f;
}

const SafetensorsEntry& SafetensorsFile::info(const std::string& name) const {
    auto it = entries_.find(name);
    ETE_CHECK(it != entries_.end(), "safetensors {}: no tensor named {}", path(), quote(name));
    return it->second;
}

Tensor SafetensorsFile::to_tensor(const std::string& name) const {
    const SafetensorsEntry& e = info(name);
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (!e.bytes.empty()) std::memcpy(t.data(), e.bytes.data(), e.bytes.size());
    return t;
}

void SafetensorsFile::release(const std::string& name) const {
    const SafetensorsEntry& e = info(name);
    file_.release(size_t(data_start_ + e.begin), size_t(e.end - e.begin));
}

Tensor SafetensorsFile::to_f32(const std::string& name) const {
    const SafetensorsEntry& e = info(name);
    ETE_CHECK(e.dtype == DType::F32 || e.dtype == DType::F16 || e.dtype == DType::BF16 ||
                  e.dtype == DType::F64,
              "safetensors {}: tensor {} has dtype {}, to_f32 expects F32, F16, BF16 or F64",
              path(), quote(name), dtype_name(e.dtype));
    Tensor t = Tensor::empty(e.shape, DType::F32);
    // convert_to_f32 reads the source with memcpy, so a misaligned mapped pointer is safe.
    convert_to_f32(t.f32(), e.bytes.data(), e.dtype, size_t(t.numel()));
    return t;
}

namespace {

using NamedTensor = std::pair<std::string, Tensor>;

// Validates names and tensors, then orders them like the official writer (see header).
std::vector<const StreamedTensor*> writer_order(const std::string& path,
                                                const std::vector<StreamedTensor>& tensors) {
    std::unordered_set<std::string> seen;
    std::vector<const StreamedTensor*> order;
    for (const StreamedTensor& t : tensors) {
        ETE_CHECK(t.name != kMetadataKey, "write_safetensors {}: tensor name {} is reserved", path,
                  quote(t.name));
        ETE_CHECK(is_valid_utf8(t.name), "write_safetensors {}: tensor name {} is not valid UTF-8",
                  path, quote(t.name));
        ETE_CHECK(seen.insert(t.name).second, "write_safetensors {}: duplicate tensor name {}",
                  path, quote(t.name));
        order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const StreamedTensor* a, const StreamedTensor* b) {
        size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
        return sa != sb ? sa > sb : a->name < b->name;
    });
    return order;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::vector<StreamedTensor> st;
    for (const NamedTensor& nt : tensors) {
        const Tensor& t = nt.second;
        ETE_CHECK(t.defined(), "write_safetensors {}: tensor {} has no data", path,
                  quote(nt.first));
        st.push_back({nt.first, t.dtype(), t.shape(),
                      [&t](FileSink& sink) { sink.write(t.data(), t.nbytes()); }});
    }
    write_safetensors_streamed(path, st, metadata);
}

uint64_t write_safetensors_streamed(const std::string& path,
                                    const std::vector<StreamedTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
    std::vector<const StreamedTensor*> order = writer_order(path, tensors);
    // The header is assembled as text so its entries follow the data order, as the official
    // writer's do (an std::map-backed json object would sort them by name).
    std::string text = "{";
    if (!metadata.empty()) {
        for (const auto& [k, v] : metadata) {
            ETE_CHECK(is_valid_utf8(k) && is_valid_utf8(v),
                      "write_safetensors {}: metadata entry {} is not valid UTF-8", path, quote(k));
        }
        text += quote(kMetadataKey) + ":" + Json(metadata).dump();
    }
    auto nbytes = [](const StreamedTensor& t) {
        return uint64_t(shape_numel(t.shape)) * dtype_size(t.dtype);
    };
    uint64_t offset = 0;
    for (const StreamedTensor* t : order) {
        Json e = {{"dtype", std::string(dtype_name(t->dtype))},
                  {"shape", t->shape},
                  {"data_offsets", {offset, offset + nbytes(*t)}}};
        text += (text.size() > 1 ? "," : "") + quote(t->name) + ":" + e.dump();
        offset += nbytes(*t);
    }
    text += "}";
    text.append((8 - text.size() % 8) % 8, ' ');  // data buffer starts 8-aligned in the file
    const uint64_t n = text.size();
    return write_file_atomic(path, [&](FileSink& sink) {
        sink.write(&n, 8);
        sink.write(text);
        for (const StreamedTensor* t : order) {
            const uint64_t before = sink.bytes_written();
            t->write(sink);
            // A short or long write would shift every later tensor: never a file that looks whole.
            ETE_CHECK(sink.bytes_written() - before == nbytes(*t),
                      "write_safetensors {}: tensor {} wrote {} bytes, expected {}", path,
                      quote(t->name), sink.bytes_written() - before, nbytes(*t));
        }
    });
}

bool is_valid_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t n = s.size(), i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;  // stray continuation byte or 0xf8..0xff
        }
        if (n - i < len) return false;
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        // Overlong forms, UTF-16 surrogates and values past Unicode are not UTF-8.
        if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return false;
        i += len;
    }
    return true;
}

int64_t first_non_finite(const float* v, int64_t n) {
    return std::find_if(v, v + n, [](float x) { return !std::isfinite(x); }) - v;
}

void check_tensor_finite(const float* v, int64_t n, const std::string& path,
                         const std::string& name) {
    const int64_t bad = first_non_finite(v, n);
    ETE_CHECK(bad == n, "{}: tensor '{}' element {} is {}, expected a finite value", path, name,
              bad, v[bad]);
}

}  // namespace ete
