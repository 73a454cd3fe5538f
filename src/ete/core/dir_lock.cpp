// ete/core/dir_lock.cpp
#include "ete/core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "ete/core/error.h"
#include "ete/core/log.h"

namespace ete {

std::string DirLock::describe_self() {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
    const std::time_t now = std::time(nullptr);
    char when[32] = {};
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return fmt::format("host {}, pid {}, since {}", host, ::getpid(), when);
}

namespace {

std::string read_holder(int fd) {
    char buf[512] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string s(buf, n > 0 ? size_t(n) : 0);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    for (char& c : s)
        if (c < 0x20) c = ' ';
    return s.empty() ? "unknown holder" : s;
}

}  // namespace

DirLock::DirLock(const std::string& dir) : path_(dir + "/ete.lock") {
    // The lock is truncated and rewritten: never through a symbolic link (O_NOFOLLOW), and never
    // into a FIFO, a device or a file linked from elsewhere, whose target would be overwritten.
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    ETE_CHECK(fd_ >= 0 || errno != ELOOP,
              "--out '{}': the run lock '{}' is a symbolic link; ETE never writes through one: "
              "remove it",
              dir, path_);
    ETE_CHECK(fd_ >= 0, "--out '{}': cannot create the run lock '{}' ({})", dir, path_,
              std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        const bool regular = S_ISREG(st.st_mode);
        ::close(fd_);
        fd_ = -1;
        throw_error(fmt::format(
            "--out '{}': the run lock '{}' is {}; ETE writes only a plain file of its own there: "
            "remove it",
            dir, path_, regular ? "a file with other hard links" : "not a regular file"));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        if (err == EWOULDBLOCK) {
            const std::string holder = read_holder(fd_);
            ::close(fd_);
            fd_ = -1;
            throw_error(fmt::format(
                "--out '{}' is in use by another run ({}): wait for it, stop it, or choose "
                "another --out",
                dir, holder));
        }
        // A file system without locks (some network mounts): say so, train without one.
        log_warn(
            "--out '{}': cannot lock '{}' ({}); nothing stops a second run from sharing "
            "this directory",
            dir, path_, std::strerror(err));
    }
    const std::string me = describe_self() + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
        log_warn("--out '{}': cannot record the holder in '{}' ({})", dir, path_,
                 std::strerror(errno));
}

DirLock::~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock; the file stays (a free lock is not stale)
}

}  // namespace ete
