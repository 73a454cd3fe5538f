// ete/train/tensorboard.cpp
#include "ete/train/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"

namespace ete {

namespace {

constexpr std::array<uint32_t, 256> kCrcTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[i] = c;
    }
    return t;
}();

void varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out += char((v & 0x7f) | 0x80);
        v >>= 7;
    }
    out += char(v);
}

template <typename T>
void fixed(std::string& out, T v) {  // little-endian, as x86 and the wire format are
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
}

void bytes_field(std::string& out, int field, const std::string& s) {
    varint(out, uint64_t(field) << 3 | 2);
    varint(out, s.size());
    out += s;
}

std::string file_version_event(double wall_time) {
    std::string e;
    varint(e, 1 << 3 | 1);  // wall_time: double
    fixed(e, wall_time);
    bytes_field(e, 3, "brain.Event:2");  // file_version
    return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
    const auto* p = static_cast<const uint8_t*>(data);
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
    const uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tb_scalar_event(int64_t step, double wall_time,
                            const std::vector<std::pair<std::string, double>>& scalars) {
    std::string summary;
    for (const auto& [tag, v] : scalars) {
        std::string value;
        bytes_field(value, 1, tag);  // Summary.Value.tag
        varint(value, 2 << 3 | 5);   // simple_value: float
        fixed(value, float(v));
        bytes_field(summary, 1, value);  // Summary.value (repeated)
    }
    std::string e;
    varint(e, 1 << 3 | 1);
    fixed(e, wall_time);
    varint(e, 2 << 3 | 0);  // step: int64
    varint(e, uint64_t(step));
    bytes_field(e, 5, summary);  // Event.summary
    return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir) {
    const std::string dir = run_dir + "/tensorboard";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    ETE_CHECK(!ec, "monitor.tensorboard: cannot create '{}' ({})", dir, ec.message());
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
    const std::time_t now = std::time(nullptr);
    path_ = fmt::format("{}/events.out.tfevents.{}.{}.{}", dir, int64_t(now), host, ::getpid());
    // A new file (its name is this process's): never one planted under that name, nor a link.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    ETE_CHECK(fd_ >= 0, "monitor.tensorboard: cannot create '{}' ({})", path_,
              std::strerror(errno));
    write_record(file_version_event(double(now)));
}

TensorBoardWriter::~TensorBoardWriter() {
    if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, double wall_time,
                                    const std::vector<std::pair<std::string, double>>& scalars) {
    write_record(tb_scalar_event(step, wall_time, scalars));
}

void TensorBoardWriter::write_record(const std::string& event) {
    std::string rec;
    const uint64_t len = event.size();
    fixed(rec, len);
    fixed(rec, masked_crc32c(&len, sizeof(len)));
    rec += event;
    fixed(rec, masked_crc32c(event.data(), event.size()));
    const int err = append_whole(fd_, rec);
    if (err == 0) {
        failing_ = false;
        return;
    }
    if (!failing_)
        log_warn("tensorboard '{}': cannot append ({}); records are lost until writes succeed",
                 path_, std::strerror(err));
    failing_ = true;
}

}  // namespace ete
