// ete/data/token_shard.h — the token shard file: a flat array of token ids with a small header.
//
// Layout (a stable contract; all integers little-endian):
//   bytes  0..7   ASCII "ETETOK01"
//   bytes  8..11  u32 bytes per token: 2 (u16 ids) or 4 (u32 ids)
//   bytes 12..15  u32 vocab size (0 = unknown); when known, every id is below it
//   bytes 16..23  u64 token count N
//   bytes 24..    N ids
// and the file size is exactly 24 + N * bytes_per_token. Writers pick u16 when the vocab has at
// most 65536 ids. Files are written under a temporary name, fsynced and renamed, so a file with
// the final name is always complete.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ete/core/file_util.h"

namespace ete {

inline constexpr char kTokenShardMagic[8] = {'E', 'T', 'E', 'T', 'O', 'K', '0', '1'};
inline constexpr uint64_t kTokenShardHeaderBytes = 24;

// Streams ids into a shard; nothing appears under `path` until commit().
class TokenShardWriter {
  public:
    // vocab_size 0 = unknown (ids are then stored as u32).
    TokenShardWriter(std::string path, uint32_t vocab_size);
    void append(std::span<const int32_t> ids);  // each id must be >= 0 and below the vocab size
    void commit();
    uint64_t count() const { return count_; }
    uint32_t bytes_per_token() const { return bytes_per_token_; }

  private:
    AtomicFileWriter file_;
    uint32_t vocab_size_;
    uint32_t bytes_per_token_;
    uint64_t count_ = 0;
    bool committed_ = false;
};

void write_token_shard(const std::string& path, std::span<const int32_t> ids, uint32_t vocab_size);

// A memory-mapped, validated shard. Move-only.
class TokenShard {
  public:
    explicit TokenShard(const std::string& path);
    ~TokenShard();
    TokenShard(TokenShard&& other) noexcept;
    TokenShard& operator=(TokenShard&& other) noexcept;
    TokenShard(const TokenShard&) = delete;
    TokenShard& operator=(const TokenShard&) = delete;

    uint64_t size() const { return count_; }  // number of tokens
    uint32_t vocab_size() const { return vocab_size_; }
    uint32_t bytes_per_token() const { return bytes_per_token_; }
    const std::string& path() const { return path_; }

    int32_t at(uint64_t i) const;  // bounds- and id-checked
    // Copies tokens [first, first + n) to `out`; throws naming the file when the range is out of
    // bounds or an id is not below the vocab size (or above INT32_MAX for u32 shards).
    void read(uint64_t first, uint64_t n, int32_t* out) const;

  private:
    void release() noexcept;

    std::string path_;
    const unsigned char* map_ = nullptr;  // whole file
    uint64_t map_bytes_ = 0;
    uint32_t bytes_per_token_ = 0;
    uint32_t vocab_size_ = 0;
    uint64_t count_ = 0;
};

}  // namespace ete
