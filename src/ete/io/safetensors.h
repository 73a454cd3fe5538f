// ete/io/safetensors.h — strict safetensors reader (memory-mapped) and streaming atomic writer.
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then the data buffer.
// Each header entry is `name: {"dtype", "shape", "data_offsets": [begin, end)}` with offsets
// relative to the data buffer; the optional "__metadata__" entry is a string -> string map.
//
// open() validates everything before returning (DESIGN.md §7, REFERENCE.md) and each violation
// throws a one-line ete::Error naming the file and the rule. It is stricter than the reference
// reader: duplicate keys, unknown or missing entry fields and non-integer numbers are errors.
// The data of a tensor may sit at any file offset (a hostile or hand-made file can misalign it),
// so accessors hand out raw bytes and typed access always goes through a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ete/core/file_util.h"
#include "ete/core/tensor.h"

namespace ete {

struct SafetensorsEntry {
    DType dtype = DType::F32;
    Shape shape;
    uint64_t begin = 0;  // data_offsets, relative to the start of the data buffer
    uint64_t end = 0;
    std::span<const std::byte> bytes;  // the mapped bytes; no alignment guarantee
};

class SafetensorsFile {
  public:
    static SafetensorsFile open(const std::string& path);

    const std::string& path() const { return file_.path(); }
    const std::vector<std::string>& names() const { return names_; }  // header order
    bool has(const std::string& name) const { return entries_.count(name) != 0; }
    const SafetensorsEntry& info(const std::string& name) const;  // throws for unknown names
    std::span<const std::byte> bytes(const std::string& name) const { return info(name).bytes; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    uint64_t data_start() const { return data_start_; }  // file offset of the data buffer: 8 + N

    // Copies into an owned, 64-byte aligned Tensor of the file's dtype and shape.
    Tensor to_tensor(const std::string& name) const;
    // Copies and converts F32, F16, BF16 or F64 to an owned F32 tensor; other dtypes throw.
    Tensor to_f32(const std::string& name) const;
    // Drops tensor `name`'s pages from the resident set once it has been copied out (a loader
    // reading tensor by tensor then holds one tensor, not the whole file).
    void release(const std::string& name) const;

  private:
    SafetensorsFile() = default;

    MappedFile file_;
    uint64_t data_start_ = 0;
    std::vector<std::string> names_;
    std::unordered_map<std::string, SafetensorsEntry> entries_;
    std::map<std::string, std::string> metadata_;
};

// The index of the first NaN or infinity in v[0, n), or n when every value is finite.
int64_t first_non_finite(const float* v, int64_t n);
// Throws ete::Error "PATH: tensor 'NAME' element I is nan, expected a finite value" at the first
// NaN or infinity of v[0, n): every tensor a user hands ETE (weights, adapters, quantization
// statistics) passes here, so a broken file is refused instead of producing NaN results.
void check_tensor_finite(const float* v, int64_t n, const std::string& path,
                         const std::string& name);

// Writes tensors (any dtype, contiguous) atomically. Data is ordered like the official writer:
// by dtype alignment (element size) descending, then by name, so every tensor's offset inside the
// data buffer is a multiple of its element size; the header is space-padded to a multiple of 8 so
// the buffer itself starts 8-aligned. "__metadata__" is written only when `metadata` is non-empty.
// Duplicate or reserved names, and names or metadata that are not valid UTF-8, throw ete::Error.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor whose bytes a callback writes when its turn comes: the header needs only its dtype and
// shape, so a file of many tensors is written while holding one (checkpoints of a model near the
// memory limit). `write` must put exactly numel · dtype_size bytes into the sink (checked: a
// mismatch throws and the file is not committed).
struct StreamedTensor {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    std::function<void(FileSink&)> write;
};
// The same file layout and checks as write_safetensors.
// Returns the file's XXH3-64 content hash (core/file_util.h file_digest).
uint64_t write_safetensors_streamed(const std::string& path,
                                    const std::vector<StreamedTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata = {});

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace ete
