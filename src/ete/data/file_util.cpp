// ete/data/file_util.cpp — whole-file reads and atomic (temporary + fsync + rename) writes.
#include "ete/data/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ete/core/error.h"

namespace ete::data {

std::string read_file(const std::string& path, std::string_view what) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ETE_CHECK(fd >= 0, "{} '{}': cannot open: {}", what, path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw_error(fmt::format("{} '{}': expected a regular file", what, path));
    }
    std::string out(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
        ssize_t n = ::read(fd, out.data() + done, out.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = errno;
            ::close(fd);
            throw_error(fmt::format("{} '{}': read failed after {} of {} bytes: {}", what, path,
                                    done, out.size(), n == 0 ? "unexpected end" : strerror(err)));
        }
        done += static_cast<size_t>(n);
    }
    ::close(fd);
    return out;
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string_view what)
    : path_(std::move(path)), what_(what) {
    tmp_path_ = fmt::format("{}.tmp.{}", path_, ::getpid());
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ETE_CHECK(fd_ >= 0, "{} '{}': cannot create temporary file '{}': {}", what_, path_, tmp_path_,
              std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(tmp_path_.c_str());
    }
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
    ETE_ASSERT(fd_ >= 0);
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        ssize_t n = ::write(fd_, p, bytes);
        if (n < 0 && errno == EINTR) continue;
        ETE_CHECK(n > 0, "{} '{}': write failed: {}", what_, path_, std::strerror(errno));
        p += n;
        bytes -= static_cast<size_t>(n);
    }
}

void AtomicFileWriter::pwrite(uint64_t offset, const void* data, size_t bytes) {
    ETE_ASSERT(fd_ >= 0);
    ssize_t n = ::pwrite(fd_, data, bytes, static_cast<off_t>(offset));
    ETE_CHECK(n == static_cast<ssize_t>(bytes), "{} '{}': write at offset {} failed: {}", what_,
              path_, offset, std::strerror(errno));
}

void AtomicFileWriter::commit() {
    ETE_ASSERT(fd_ >= 0);
    ETE_CHECK(::fsync(fd_) == 0, "{} '{}': fsync failed: {}", what_, path_, std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp_path_.c_str());
        throw_error(fmt::format("{} '{}': rename from '{}' failed: {}", what_, path_, tmp_path_,
                                std::strerror(err)));
    }
    // fsync of the directory makes the rename itself durable.
    std::string dir = std::filesystem::path(path_).parent_path().string();
    int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

}  // namespace ete::data
