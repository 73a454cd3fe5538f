// ete/data/token_shard.cpp — token shard writer (atomic) and memory-mapped reader.
#include "ete/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "ete/core/error.h"
#include "ete/core/file_util.h"

namespace ete {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; a big-endian host needs byte swaps here");

namespace {

uint32_t load_u32(const unsigned char* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

uint64_t load_u64(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

std::vector<unsigned char> header_bytes(uint32_t bytes_per_token, uint32_t vocab, uint64_t n) {
    std::vector<unsigned char> h(kTokenShardHeaderBytes);
    std::memcpy(h.data(), kTokenShardMagic, 8);
    std::memcpy(h.data() + 8, &bytes_per_token, 4);
    std::memcpy(h.data() + 12, &vocab, 4);
    std::memcpy(h.data() + 16, &n, 8);
    return h;
}

}  // namespace

TokenShardWriter::TokenShardWriter(std::string path, uint32_t vocab_size)
    : file_(std::move(path)),
      vocab_size_(vocab_size),
      bytes_per_token_(vocab_size != 0 && vocab_size <= 65536 ? 2 : 4) {
    auto h = header_bytes(bytes_per_token_, vocab_size_, 0);  // count patched by commit()
    file_.write(h.data(), h.size());
}

void TokenShardWriter::append(std::span<const int32_t> ids) {
    ETE_ASSERT(!committed_);
    const uint32_t limit = vocab_size_ != 0 ? vocab_size_ : static_cast<uint32_t>(INT32_MAX);
    constexpr size_t kBlock = 1 << 16;
    std::vector<unsigned char> buf(kBlock * bytes_per_token_);
    for (size_t begin = 0; begin < ids.size(); begin += kBlock) {
        size_t n = std::min(kBlock, ids.size() - begin);
        for (size_t i = 0; i < n; ++i) {
            int32_t id = ids[begin + i];
            ETE_CHECK(id >= 0 && static_cast<uint32_t>(id) < limit,
                      "token shard '{}': token {} has id {}, expected 0 <= id < {}", file_.path(),
                      count_ + begin + i, id, limit);
            if (bytes_per_token_ == 2) {
                auto v = static_cast<uint16_t>(id);
                std::memcpy(buf.data() + 2 * i, &v, 2);
            } else {
                auto v = static_cast<uint32_t>(id);
                std::memcpy(buf.data() + 4 * i, &v, 4);
            }
        }
        file_.write(buf.data(), n * bytes_per_token_);
    }
    count_ += ids.size();
}

void TokenShardWriter::commit() {
    ETE_ASSERT(!committed_);
    auto h = header_bytes(bytes_per_token_, vocab_size_, count_);
    file_.pwrite(0, h.data(), h.size());
    file_.commit();
    committed_ = true;
}

void write_token_shard(const std::string& path, std::span<const int32_t> ids, uint32_t vocab) {
    TokenShardWriter w(path, vocab);
    w.append(ids);
    w.commit();
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO: no blocking
    ETE_CHECK(fd >= 0, "token shard '{}': cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    map_bytes_ = ok ? static_cast<uint64_t>(st.st_size) : 0;
    if (!ok || map_bytes_ < kTokenShardHeaderBytes) {
        ::close(fd);
        throw_error(
            fmt::format("token shard '{}': {} bytes, expected a regular file of at least "
                        "{} bytes (header)",
                        path, map_bytes_, kTokenShardHeaderBytes));
    }
    void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    ETE_CHECK(p != MAP_FAILED, "token shard '{}': mmap failed: {}", path, std::strerror(err));
    map_ = static_cast<const unsigned char*>(p);
    register_mapping(map_, map_bytes_, path);
    try {
        ETE_CHECK(std::memcmp(map_, kTokenShardMagic, 8) == 0,
                  "token shard '{}': bad magic, expected the file to start with ETETOK01", path);
        bytes_per_token_ = load_u32(map_ + 8);
        vocab_size_ = load_u32(map_ + 12);
        count_ = load_u64(map_ + 16);
        ETE_CHECK(bytes_per_token_ == 2 || bytes_per_token_ == 4,
                  "token shard '{}': {} bytes per token, expected 2 or 4", path, bytes_per_token_);
        const uint64_t payload = map_bytes_ - kTokenShardHeaderBytes;
        ETE_CHECK(count_ <= payload / bytes_per_token_ && count_ * bytes_per_token_ == payload,
                  "token shard '{}': file size {} != 24 + count {} * {} bytes per token "
                  "(truncated or trailing bytes)",
                  path, map_bytes_, count_, bytes_per_token_);
    } catch (...) {
        release();
        throw;
    }
}

TokenShard::~TokenShard() {
    release();
}

void TokenShard::release() noexcept {
    if (map_ != nullptr) {
        unregister_mapping(map_);
        ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    }
    map_ = nullptr;
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      bytes_per_token_(o.bytes_per_token_),
      vocab_size_(o.vocab_size_),
      count_(o.count_) {
    o.map_ = nullptr;
    o.count_ = 0;
}

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
    if (this != &o) {
        release();
        path_ = std::move(o.path_);
        map_ = o.map_;
        map_bytes_ = o.map_bytes_;
        bytes_per_token_ = o.bytes_per_token_;
        vocab_size_ = o.vocab_size_;
        count_ = o.count_;
        o.map_ = nullptr;
        o.count_ = 0;
    }
    return *this;
}

void TokenShard::read(uint64_t first, uint64_t n, int32_t* out) const {
    ETE_CHECK(first <= count_ && n <= count_ - first,
              "token shard '{}': tokens [{}, {}) requested, the shard has {}", path_, first,
              first + n, count_);
    const unsigned char* p = map_ + kTokenShardHeaderBytes + first * bytes_per_token_;
    const uint64_t limit = vocab_size_ != 0 ? vocab_size_ : uint64_t{INT32_MAX} + 1;
    for (uint64_t i = 0; i < n; ++i) {
        uint64_t v;
        if (bytes_per_token_ == 2) {
            uint16_t s;
            std::memcpy(&s, p + 2 * i, 2);  // the mapping need not be aligned for u16/u32 reads
            v = s;
        } else {
            v = load_u32(p + 4 * i);
        }
        ETE_CHECK(v < limit, "token shard '{}': token {} has id {}, expected below {}", path_,
                  first + i, v, limit);
        out[i] = static_cast<int32_t>(v);
    }
}

int32_t TokenShard::at(uint64_t i) const {
    int32_t v;
    read(i, 1, &v);
    return v;
}

}  // namespace ete
