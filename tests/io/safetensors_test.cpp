// tests/io/safetensors_test.cpp — writer/reader round trip, one hand-crafted bad file per reject
// rule (each must name the file and the rule), and a deliberately misaligned tensor.
#include "ete/io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "test_util.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

std::string le64(uint64_t n) {
    std::string s(8, '\0');
    std::memcpy(s.data(), &n, 8);
    return s;
}

// A whole file: length prefix + header + data.
std::string st_file(const std::string& header, const std::string& data) {
    return le64(header.size()) + header + data;
}

// One header entry, e.g. entry("a", "F32", "[2]", "[0, 8]") -> "a": {...}.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + "\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape +
           ", \"data_offsets\": " + offsets + "}";
}

template <typename T>
Tensor make(Shape shape, DType dtype, const std::vector<T>& values) {
    Tensor t = Tensor::empty(std::move(shape), dtype);
    EXPECT_EQ(t.nbytes(), values.size() * sizeof(T));
    if (t.nbytes()) std::memcpy(t.data(), values.data(), t.nbytes());
    return t;
}

std::vector<float> floats(const Tensor& t) {
    return std::vector<float>(t.f32(), t.f32() + t.numel());
}

class SafetensorsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "ete_safetensors_XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string put(const std::string& bytes) {
        std::string path = dir_ + "/file_" + std::to_string(count_++) + ".safetensors";
        write_file_atomic(path, bytes);
        return path;
    }

    // open() must throw ete::Error whose one-line message names this file and contains `phrase`.
    void expect_reject(const std::string& bytes, const std::string& phrase) {
        std::string path = put(bytes);
        SCOPED_TRACE("file bytes: " + bytes.substr(std::min<size_t>(bytes.size(), 8)));
        try {
            SafetensorsFile::open(path);
            ADD_FAILURE() << "open() accepted a file that should fail with: " << phrase;
        } catch (const Error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << msg;
            EXPECT_NE(msg.find(phrase), std::string::npos) << msg;
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        }
    }

    std::string dir_;
    int count_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Valid files

TEST_F(SafetensorsTest, RoundTripAllDtypesScalarAndEmpty) {
    // Values exactly representable in their storage type, so to_f32 must reproduce them exactly.
    std::vector<uint16_t> f16_bits, bf16_bits;
    for (float v : {1.0f, -2.0f, 0.5f, 1024.0f, 0.375f}) f16_bits.push_back(f32_to_f16(v));
    for (float v : {1.0f, -3.5f, 256.0f, 0.15625f}) bf16_bits.push_back(f32_to_bf16(v));
    std::vector<std::pair<std::string, Tensor>> in = {
        {"f32", make<float>({2, 3}, DType::F32, {-1, -0.5f, 0, 0.5f, 1, 1.5f})},
        {"f16", make<uint16_t>({5}, DType::F16, f16_bits)},
        {"bf16", make<uint16_t>({2, 2}, DType::BF16, bf16_bits)},
        {"i32", make<int32_t>({3}, DType::I32, {-7, 0, 2147483647})},
        {"i64", make<int64_t>({2}, DType::I64, {-(int64_t(1) << 40), 123})},
        {"u8", make<uint8_t>({4}, DType::U8, {0, 1, 200, 255})},
        {"scalar", make<double>({}, DType::F64, {2.25})},
        {"empty", Tensor::empty({2, 0, 3}, DType::F32)},
    };
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\xc3\xa9llo"}};
    const std::string path = dir_ + "/model.safetensors";
    write_safetensors(path, in, meta);

    SafetensorsFile f = SafetensorsFile::open(path);
    // Writer order: element size descending, then name.
    std::vector<std::string> order = {"i64", "scalar", "empty", "f32", "i32", "bf16", "f16", "u8"};
    EXPECT_EQ(f.names(), order);
    EXPECT_EQ(f.metadata(), meta);
    for (const auto& [name, t] : in) {
        SCOPED_TRACE(name);
        ASSERT_TRUE(f.has(name));
        const SafetensorsEntry& e = f.info(name);
        EXPECT_EQ(e.dtype, t.dtype());
        EXPECT_EQ(e.shape, t.shape());
        Tensor back = f.to_tensor(name);
        EXPECT_EQ(back.dtype(), t.dtype());
        EXPECT_EQ(back.shape(), t.shape());
        ASSERT_EQ(back.nbytes(), t.nbytes());
        EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0);
    }
    EXPECT_EQ(f.info("scalar").shape, Shape{});
    EXPECT_EQ(f.info("empty").begin, f.info("empty").end);
    EXPECT_EQ(floats(f.to_f32("f16")), (std::vector<float>{1, -2, 0.5f, 1024, 0.375f}));
    EXPECT_EQ(floats(f.to_f32("bf16")), (std::vector<float>{1, -3.5f, 256, 0.15625f}));
    EXPECT_EQ(floats(f.to_f32("scalar")), std::vector<float>{2.25f});
    EXPECT_EQ(f.to_f32("empty").numel(), 0);

    // Layout: header padded to a multiple of 8; offsets contiguous from 0 in the written order,
    // each aligned to its element size; the last one ends at the end of the file.
    std::string raw = read_file(path);
    uint64_t n;
    std::memcpy(&n, raw.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(f.data_start(), 8 + n);
    uint64_t expected = 0;
    for (const std::string& name : f.names()) {
        EXPECT_EQ(f.info(name).begin, expected) << name;
        EXPECT_EQ(f.info(name).begin % dtype_size(f.info(name).dtype), 0u) << name;
        expected = f.info(name).end;
    }
    EXPECT_EQ(8 + n + expected, raw.size());
}

TEST_F(SafetensorsTest, EmptyMetadataIsOmittedAndEmptyFileIsValid) {
    const std::string path = dir_ + "/none.safetensors";
    write_safetensors(path, {}, {});
    std::string raw = read_file(path);
    EXPECT_EQ(raw, le64(8) + "{}      ");  // the smallest file the official writer produces
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_TRUE(f.names().empty());
    EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, MisalignedTensorReadsCorrectly) {
    // Hand-made file whose data buffer starts at an odd offset, so the F32 tensor sits 1 byte
    // past a 4-byte boundary. Reading it through a typed pointer would be UB (caught by UBSan).
    std::string header = "{" + entry("w", "F32", "[3]", "[0, 12]") + ", " +
                         entry("h", "F16", "[2]", "[12, 16]") + "}";
    while ((8 + header.size()) % 8 != 1) header += ' ';
    std::string data(16, '\0');
    const float w[3] = {1.5f, -2.25f, 3.0e-3f};
    const uint16_t h[2] = {f32_to_f16(0.5f), f32_to_f16(-1.0f)};
    std::memcpy(data.data(), w, 12);
    std::memcpy(data.data() + 12, h, 4);
    SafetensorsFile f = SafetensorsFile::open(put(st_file(header, data)));
    EXPECT_EQ(f.data_start() % 8, 1u);
    EXPECT_NE(reinterpret_cast<uintptr_t>(f.bytes("w").data()) % alignof(float), 0u);
    EXPECT_EQ(floats(f.to_f32("w")), (std::vector<float>{1.5f, -2.25f, 3.0e-3f}));
    EXPECT_EQ(floats(f.to_f32("h")), (std::vector<float>{0.5f, -1.0f}));
    Tensor raw = f.to_tensor("w");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(raw.data()) % 64, 0u);  // the copy is aligned
    EXPECT_EQ(raw.f32()[1], -2.25f);
}

TEST_F(SafetensorsTest, NamesFollowHeaderOrderNotOffsetOrder) {
    std::string header = "{" + entry("zeta", "U8", "[2]", "[2, 4]") + ", " +
                         entry("alpha", "U8", "[2]", "[0, 2]") + "}";
    SafetensorsFile f = SafetensorsFile::open(put(st_file(header, "ABCD")));
    EXPECT_EQ(f.names(), (std::vector<std::string>{"zeta", "alpha"}));
    EXPECT_EQ(std::memcmp(f.bytes("zeta").data(), "CD", 2), 0);
    EXPECT_EQ(std::memcmp(f.bytes("alpha").data(), "AB", 2), 0);
}

TEST_F(SafetensorsTest, AccessorErrors) {
    const std::string path = dir_ + "/a.safetensors";
    write_safetensors(path, {{"ids", make<int32_t>({2}, DType::I32, {1, 2})}}, {});
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_FALSE(f.has("nope"));
    EXPECT_THROW(f.info("nope"), Error);
    try {
        f.to_f32("ids");
        ADD_FAILURE() << "to_f32 accepted an I32 tensor";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("dtype I32"), std::string::npos) << e.what();
    }
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateAndReservedNames) {
    const std::string path = dir_ + "/dup.safetensors";
    Tensor t = Tensor::zeros({2});
    try {
        write_safetensors(path, {{"a", t}, {"b", t}, {"a", t}}, {});
        ADD_FAILURE() << "duplicate accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("duplicate tensor name \"a\""), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(write_safetensors(path, {{"__metadata__", t}}, {}), Error);
    EXPECT_FALSE(fs::exists(path));  // nothing written, not even a partial file
}

// The streamed writer (tensors fetched by callback as their turn comes) writes the bytes the
// Tensor writer does; a callback that writes too few or too many bytes fails the write, and no
// file that looks complete is left.
TEST_F(SafetensorsTest, StreamedWriterGivesTheSameFileAndChecksEachTensorsSize) {
    const Tensor a = make<float>({2, 2}, DType::F32, {1, 2, 3, 4});
    const Tensor b = make<uint16_t>({3}, DType::BF16, {1, 2, 3});
    const std::string whole = dir_ + "/whole.safetensors",
                      streamed = dir_ + "/streamed.safetensors";
    write_safetensors(whole, {{"b", b}, {"a", a}}, {{"k", "v"}});
    std::vector<std::string> order;
    auto from = [&order](const std::string& name, const Tensor& t) {
        return StreamedTensor{name, t.dtype(), t.shape(), [&order, name, &t](FileSink& sink) {
                                  order.push_back(name);
                                  sink.write(t.data(), t.nbytes());
                              }};
    };
    write_safetensors_streamed(streamed, {from("b", b), from("a", a)}, {{"k", "v"}});
    EXPECT_EQ(read_file(streamed), read_file(whole));
    EXPECT_EQ(order, (std::vector<std::string>{"a", "b"}));  // the data order: F32 before BF16
    const std::string bad = dir_ + "/bad.safetensors";
    StreamedTensor short_write{
        "a", DType::F32, {2, 2}, [&a](FileSink& sink) { sink.write(a.data(), 12); }};
    EXPECT_EQ(error_of([&] { write_safetensors_streamed(bad, {short_write}); }),
              "write_safetensors " + bad + ": tensor \"a\" wrote 12 bytes, expected 16");
    EXPECT_FALSE(fs::exists(bad));
}

// ---------------------------------------------------------------------------------------------
// One test per reject rule. Each file is valid except for the one rule under test.

const std::string kGoodEntry = entry("a", "F32", "[2]", "[0, 8]");
const std::string kGoodData(8, '\0');

TEST_F(SafetensorsTest, RejectsFileShorterThan8Bytes) {
    expect_reject("abc", "shorter than 8 bytes");
    expect_reject("", "shorter than 8 bytes");
}

TEST_F(SafetensorsTest, RejectsHeaderLengthOverLimit) {
    expect_reject(le64(100'000'001) + "{}" + std::string(6, ' '), "exceeds the limit");
    expect_reject(le64(~uint64_t(0)) + "{}", "exceeds the limit");
}

TEST_F(SafetensorsTest, RejectsHeaderPastFileEnd) {
    expect_reject(le64(64) + "{\"a\": 1}", "runs past the file end");
}

TEST_F(SafetensorsTest, RejectsHeaderNotUtf8) {
    expect_reject(st_file("{\"a\xff\": 1}", ""), "not valid UTF-8");
    expect_reject(st_file("{\"\xc0\xaf\": 1}", ""), "not valid UTF-8");      // overlong '/'
    expect_reject(st_file("{\"\xed\xa0\x80\": 1}", ""), "not valid UTF-8");  // surrogate
    expect_reject(st_file("{\"\xe2\x82\": 1}", ""), "not valid UTF-8");      // truncated
}

TEST_F(SafetensorsTest, RejectsHeaderNotStartingWithBrace) {
    expect_reject(st_file("  [1, 2]", ""), "does not start with '{'");
    expect_reject(st_file("\"x\"", ""), "does not start with '{'");
    expect_reject(st_file("", ""), "does not start with '{'");
    expect_reject(st_file("\xef\xbb\xbf{}", ""), "does not start with '{'");  // BOM
}

TEST_F(SafetensorsTest, RejectsHeaderNotJsonObject) {
    expect_reject(st_file("{\"a\": }", ""), "not a valid JSON object");
    expect_reject(st_file("{", ""), "not a valid JSON object");
    expect_reject(st_file("{} {}", ""), "not a valid JSON object");
    expect_reject(st_file("{\"a\": 1} /* c */", ""), "not a valid JSON object");
    // Deep nesting is refused while parsing rather than built (a 100 MB header of '[' would
    // otherwise allocate gigabytes).
    expect_reject(st_file("{\"a\": " + std::string(50, '[') + std::string(50, ']') + "}", ""),
                  "not a valid JSON object: nested deeper than 8 levels");
}

TEST_F(SafetensorsTest, RejectsDuplicateKeys) {
    expect_reject(st_file("{" + kGoodEntry + ", " + kGoodEntry + "}", kGoodData),
                  "duplicate key \"a\"");
    std::string dup_field =
        "{\"a\": {\"dtype\": \"F32\", \"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, "
        "8]}}";
    expect_reject(st_file(dup_field, kGoodData), "duplicate key \"dtype\"");
    std::string dup_meta = "{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}, " + kGoodEntry + "}";
    expect_reject(st_file(dup_meta, kGoodData), "duplicate key \"k\"");
}

TEST_F(SafetensorsTest, RejectsEntryNotObject) {
    expect_reject(st_file("{\"a\": [\"F32\", [2], [0, 8]]}", kGoodData),
                  "entry \"a\" is not an object");
}

TEST_F(SafetensorsTest, RejectsEntryMissingField) {
    expect_reject(st_file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", kGoodData),
                  "entry \"a\" is missing field \"data_offsets\"");
    expect_reject(st_file("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", kGoodData),
                  "entry \"a\" is missing field \"shape\"");
    expect_reject(st_file("{\"a\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", kGoodData),
                  "entry \"a\" is missing field \"dtype\"");
}

TEST_F(SafetensorsTest, RejectsEntryUnknownField) {
    std::string header =
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8], \"strides\": "
        "[1]}}";
    expect_reject(st_file(header, kGoodData), "entry \"a\" has unknown field \"strides\"");
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
    expect_reject(st_file("{" + entry("a", "F8_E4M3", "[8]", "[0, 8]") + "}", kGoodData),
                  "has unknown dtype");
    expect_reject(st_file("{" + entry("a", "f32", "[2]", "[0, 8]") + "}", kGoodData),
                  "has unknown dtype");  // names are case-sensitive
    std::string numeric = "{\"a\": {\"dtype\": 4, \"shape\": [2], \"data_offsets\": [0, 8]}}";
    expect_reject(st_file(numeric, kGoodData), "has unknown dtype");
}

TEST_F(SafetensorsTest, RejectsBadShape) {
    for (std::string shape :
         {"[-1]", "[1.5]", "[2.0]", "\"2\"", "[[2]]", "{}", "[true]", "[9223372036854775808]"}) {
        SCOPED_TRACE(shape);
        expect_reject(st_file("{" + entry("a", "F32", shape, "[0, 8]") + "}", kGoodData),
                      "shape must be an array of non-negative integers");
    }
}

TEST_F(SafetensorsTest, RejectsElementCountOverflow) {
    // 2^64 elements; 2^63 elements (past int64); 2^61 F64 elements = 2^64 bytes.
    for (std::string shape :
         {"[4294967296, 4294967296]", "[4611686018427387904, 2]", "[2305843009213693952]"}) {
        SCOPED_TRACE(shape);
        std::string dtype = shape == "[2305843009213693952]" ? "F64" : "F32";
        expect_reject(st_file("{" + entry("a", dtype, shape, "[0, 8]") + "}", kGoodData),
                      "element count overflows");
    }
    // Zero elements, but a partial product past int64 (found by the fuzzer's author): a Tensor
    // could not hold the shape, so open() must refuse it rather than fail on read.
    expect_reject(
        st_file("{" + entry("z", "F32", "[4611686018427387904, 2, 0]", "[0, 0]") + "}", ""),
        "element count overflows");
}

TEST_F(SafetensorsTest, RejectsBadDataOffsets) {
    for (std::string offsets :
         {"[8, 0]", "[0]", "[0, 4, 8]", "[-1, 7]", "[0, 8.0]", "\"0,8\"", "[0, null]"}) {
        SCOPED_TRACE(offsets);
        expect_reject(st_file("{" + entry("a", "F32", "[2]", offsets) + "}", kGoodData),
                      "data_offsets must be two non-negative integers");
    }
}

TEST_F(SafetensorsTest, RejectsByteLengthMismatch) {
    expect_reject(st_file("{" + entry("a", "F32", "[2]", "[0, 4]") + "}", std::string(4, '\0')),
                  "byte length 4 does not equal shape [2] x 4 bytes = 8");
    expect_reject(st_file("{" + entry("a", "BF16", "[2]", "[0, 8]") + "}", kGoodData),
                  "byte length 8 does not equal shape [2] x 2 bytes = 4");
}

TEST_F(SafetensorsTest, RejectsNonContiguousOffsets) {
    const std::string a = entry("a", "U8", "[4]", "[0, 4]");
    expect_reject(
        st_file("{" + a + ", " + entry("b", "U8", "[4]", "[8, 12]") + "}", std::string(12, '\0')),
        "not contiguous: entry \"b\" begins at 8, expected 4");  // gap
    expect_reject(
        st_file("{" + a + ", " + entry("b", "U8", "[4]", "[2, 6]") + "}", std::string(6, '\0')),
        "not contiguous: entry \"b\" begins at 2, expected 4");  // overlap
    expect_reject(st_file("{" + entry("a", "U8", "[4]", "[4, 8]") + "}", std::string(8, '\0')),
                  "not contiguous: entry \"a\" begins at 4, expected 0");  // not from 0
}

TEST_F(SafetensorsTest, RejectsDataEndNotAtFileEnd) {
    expect_reject(st_file("{" + kGoodEntry + "}", std::string(10, '\0')),
                  "does not match");  // trailing bytes
    expect_reject(st_file("{" + kGoodEntry + "}", std::string(4, '\0')),
                  "does not match");  // truncated data
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
    for (std::string meta :
         {"{\"k\": 1}", "{\"k\": null}", "{\"k\": {\"x\": \"y\"}}", "[\"k\"]", "\"k=v\""}) {
        SCOPED_TRACE(meta);
        expect_reject(st_file("{\"__metadata__\": " + meta + ", " + kGoodEntry + "}", kGoodData),
                      "__metadata__ must be an object of string values");
    }
}

}  // namespace
}  // namespace ete
