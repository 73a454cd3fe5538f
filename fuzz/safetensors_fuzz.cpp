// fuzz/safetensors_fuzz.cpp — libFuzzer target for SafetensorsFile (ete/io/safetensors.h).
//
// Each input is written to one in-memory scratch file per process (the reader maps paths) and
// opened. ete::Error from open() is the expected rejection; any other exception, a crash, a
// sanitizer report, or an ete::Error while reading a file open() accepted is a bug. Every accepted
// file is read in full, and each tensor's mapped bytes are compared with the same bytes of the
// fuzzer's input buffer: ASan does not guard the mmap, but it does guard that exactly-sized heap
// buffer, so an entry whose span runs past the file end is reported there.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "ete/core/error.h"
#include "ete/io/safetensors.h"

namespace {

// Aborts (a libFuzzer crash) with a message when an accepted file breaks a reader guarantee.
void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "safetensors_fuzz: invariant failed: %s\n", what);
    std::abort();
}

// The scratch file is one in-memory file per process (memfd), reached through /proc/self/fd so
// the reader maps it by path like any other file; it never touches the disk and is never left
// behind, even when libFuzzer ends the process with _Exit or a crash.
int scratch_fd() {
    static const int fd = ::memfd_create("ete_safetensors_fuzz", MFD_CLOEXEC);
    require(fd >= 0, "memfd_create failed");
    return fd;
}

const std::string& scratch_path() {
    static const std::string path = "/proc/self/fd/" + std::to_string(scratch_fd());
    return path;
}

void write_input(const uint8_t* data, size_t size) {
    require(::ftruncate(scratch_fd(), 0) == 0, "cannot truncate the scratch file");
    for (size_t done = 0; done < size;) {
        ssize_t n = ::pwrite(scratch_fd(), data + done, size - done, off_t(done));
        require(n > 0, "cannot write the scratch file");
        done += size_t(n);
    }
}

bool is_float(ete::DType t) {
    using ete::DType;
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

// Reads one accepted tensor every way the API allows and checks it against the raw input.
void read_entry(const ete::SafetensorsFile& f, const std::string& name, const uint8_t* data,
                size_t size) {
    const ete::SafetensorsEntry& e = f.info(name);
    require(e.end >= e.begin && e.bytes.size() == e.end - e.begin, "span length != offsets");
    require(f.data_start() + e.end <= size, "entry ends past the file");
    // Out-of-range offsets surface here as an ASan heap-buffer-overflow on `data`.
    require(e.bytes.empty() ||
                std::memcmp(e.bytes.data(), data + f.data_start() + e.begin, e.bytes.size()) == 0,
            "mapped bytes differ from the file bytes at data_offsets");
    ete::Tensor t = f.to_tensor(name);
    require(t.shape() == e.shape && t.dtype() == e.dtype, "to_tensor shape/dtype");
    require(t.nbytes() == e.bytes.size(), "to_tensor byte size");
    require(t.nbytes() == 0 || std::memcmp(t.data(), e.bytes.data(), t.nbytes()) == 0,
            "to_tensor bytes");
    if (is_float(e.dtype)) {
        ete::Tensor g = f.to_f32(name);
        require(g.shape() == e.shape && g.dtype() == ete::DType::F32, "to_f32 shape/dtype");
    } else {
        bool threw = false;
        try {
            f.to_f32(name);
        } catch (const ete::Error&) {
            threw = true;  // documented: to_f32 of a non-float dtype throws
        }
        require(threw, "to_f32 accepted a non-float dtype");
    }
}

// Every guarantee an accepted file carries: each tensor reads back, and the tensors tile the data.
void read_all(const ete::SafetensorsFile& f, const uint8_t* data, size_t size) {
    require(f.data_start() >= 8 && f.data_start() <= size, "data_start outside the file");
    uint64_t total = 0;
    for (const std::string& name : f.names()) {
        require(f.has(name), "names() lists an entry has() denies");
        read_entry(f, name, data, size);
        total += f.info(name).bytes.size();
    }
    require(total == size - f.data_start(), "tensor bytes do not tile the data buffer");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    write_input(data, size);
    std::optional<ete::SafetensorsFile> f;
    try {
        f.emplace(ete::SafetensorsFile::open(scratch_path()));
    } catch (const ete::Error&) {
        return 0;  // expected: a rejected file
    }
    // open() validates everything up front, so reading an accepted file must not throw either.
    try {
        read_all(*f, data, size);
    } catch (const ete::Error& e) {
        std::fprintf(stderr, "safetensors_fuzz: accepted file failed to read: %s\n", e.what());
        std::abort();
    }
    return 0;
}
