// ete/core/file_util.cpp — POSIX implementation of atomic writes, whole-file reads and mmap.
#include "ete/core/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>  // renameat2
#include <cstring>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <utility>

#include <xxhash.h>

#include "ete/core/error.h"

namespace ete {
namespace {

using HashState = std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)>;

HashState new_hash() {
    HashState h(XXH3_createState(), XXH3_freeState);
    ETE_CHECK(h && XXH3_64bits_reset(h.get()) == XXH_OK, "XXH3: cannot create a hash state");
    return h;
}

constexpr size_t kSinkBufferBytes = size_t(1) << 20;  // gathers small writes into 1 MiB chunks

std::string errno_text(int err) {
    return std::generic_category().message(err);
}

// Closes a descriptor on scope exit unless released; close errors here are ignored because the
// paths that care (the written file) close explicitly and check.
class FdGuard {
  public:
    explicit FdGuard(int fd) : fd_(fd) {}
    ~FdGuard() {
        if (fd_ >= 0) ::close(fd_);
    }
    FdGuard(const FdGuard&) = delete;
    FdGuard& operator=(const FdGuard&) = delete;
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }

  private:
    int fd_;
};

int open_checked(const std::string& path, int flags, const char* what) {
    int fd;
    // Reading: O_NONBLOCK so a FIFO given as a file fails the regular-file check instead of
    // blocking in open until a writer comes (no effect on regular files).
    const int extra = (flags & O_ACCMODE) == O_RDONLY ? O_NONBLOCK : 0;
    do {
        fd = ::open(path.c_str(), flags | extra | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    ETE_CHECK(fd >= 0, "{} {}: cannot open: {}", what, path, errno_text(errno));
    return fd;
}

// fsync of the parent directory makes the rename durable; `path` is the renamed target.
void fsync_parent_dir(const std::string& path) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    FdGuard fd(open_checked(dir, O_RDONLY | O_DIRECTORY, "write_file_atomic: directory of"));
    ETE_CHECK(::fsync(fd.get()) == 0, "write_file_atomic {}: fsync of directory {} failed: {}",
              path, dir, errno_text(errno));
}

}  // namespace

FileSink::FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
    buf_.reserve(kSinkBufferBytes);
    HashState h = new_hash();
    hash_ = std::shared_ptr<void>(h.release(),
                                  [](void* p) { XXH3_freeState(static_cast<XXH3_state_t*>(p)); });
}

uint64_t FileSink::digest() const {
    return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(hash_.get()));
}

void FileSink::write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    if (buf_.size() + n > kSinkBufferBytes) flush();
    if (n >= kSinkBufferBytes) {
        write_fd(p, n);
    } else {
        buf_.insert(buf_.end(), p, p + n);
    }
    written_ += n;
}

void FileSink::flush() {
    write_fd(buf_.data(), buf_.size());
    buf_.clear();
}

void FileSink::write_fd(const char* data, size_t n) {
    XXH3_64bits_update(static_cast<XXH3_state_t*>(hash_.get()), data, n);
    while (n > 0) {
        ssize_t w = ::write(fd_, data, n);
        if (w < 0 && errno == EINTR) continue;
        ETE_CHECK(w > 0, "write_file_atomic {}: write failed: {}", path_,
                  errno_text(w < 0 ? errno : EIO));
        data += w;
        n -= size_t(w);
    }
}

int append_whole(int fd, std::string_view bytes) {
    struct stat st {};
    const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += size_t(w);
    }
    if (done == bytes.size()) return 0;
    const int err = errno ? errno : EIO;
    if (before >= 0 && ::ftruncate(fd, before) != 0) return errno;
    return err;
}

uint64_t write_file_atomic(const std::string& path, std::string_view bytes) {
    return write_file_atomic(path, [bytes](FileSink& sink) { sink.write(bytes); });
}

uint64_t write_file_atomic(const std::string& path, const FileWriter& writer) {
    AtomicFileWriter file(path);
    FileSink sink(file.fd(), path);
    writer(sink);
    sink.flush();
    file.commit();
    return sink.digest();
}

uint64_t file_digest(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ETE_CHECK(fd >= 0, "{}: cannot open ({})", path, std::strerror(errno));
    HashState h = new_hash();
    std::vector<char> buf(8 << 20);
    off_t done = 0;
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = errno;
            ::close(fd);
            ETE_CHECK(n == 0, "{}: read failed ({})", path, std::strerror(err));
            break;
        }
        XXH3_64bits_update(h.get(), buf.data(), size_t(n));
        ::posix_fadvise(fd, done, n, POSIX_FADV_DONTNEED);
        done += n;
    }
    return XXH3_64bits_digest(h.get());
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
    fd_ = open_checked(tmp_, O_WRONLY | O_CREAT | O_TRUNC, "write_file_atomic: temporary");
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) {  // not committed: drop the partial file
        ::close(fd_);
        ::unlink(tmp_.c_str());
    }
}

void AtomicFileWriter::write(const void* data, size_t n) {
    ETE_ASSERT(fd_ >= 0);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        ETE_CHECK(w > 0, "write_file_atomic {}: write failed: {}", path_,
                  errno_text(w < 0 ? errno : EIO));
        p += w;
        n -= size_t(w);
    }
}

void AtomicFileWriter::pwrite(uint64_t offset, const void* data, size_t n) {
    ETE_ASSERT(fd_ >= 0);
    ssize_t w = ::pwrite(fd_, data, n, off_t(offset));
    ETE_CHECK(w == ssize_t(n), "write_file_atomic {}: write at offset {} failed: {}", path_, offset,
              errno_text(w < 0 ? errno : EIO));
}

void AtomicFileWriter::commit() {
    ETE_ASSERT(fd_ >= 0);
    ETE_CHECK(::fsync(fd_) == 0, "write_file_atomic {}: fsync failed: {}", path_,
              errno_text(errno));
    // close() can report a deferred write error (e.g. on NFS), so it is checked too.
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp_.c_str());
        throw_error(fmt::format("write_file_atomic {}: rename from {} failed: {}", path_, tmp_,
                                errno_text(err)));
    }
    fsync_parent_dir(path_);
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
    FdGuard fd(open_checked(path, O_RDONLY, "read_file"));
    struct stat st;
    ETE_CHECK(::fstat(fd.get(), &st) == 0, "read_file {}: stat failed: {}", path,
              errno_text(errno));
    ETE_CHECK(!S_ISDIR(st.st_mode), "read_file {}: is a directory, expected a file", path);
    // A device or FIFO (/dev/zero, a named pipe) would be read without end.
    ETE_CHECK(S_ISREG(st.st_mode), "{}: not a regular file (a device, FIFO or socket)", path);
    ETE_CHECK(uint64_t(st.st_size) <= max_bytes, "{}: {} bytes, more than the {} expected of it",
              path, uint64_t(st.st_size), max_bytes);
    std::string out;
    out.reserve(size_t(st.st_size));
    char chunk[1 << 16];
    for (;;) {  // read to EOF rather than trusting st_size (pipes, /proc files)
        ssize_t r = ::read(fd.get(), chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR) continue;
        ETE_CHECK(r >= 0, "read_file {}: read failed: {}", path, errno_text(errno));
        if (r == 0) break;
        out.append(chunk, size_t(r));
        ETE_CHECK(out.size() <= max_bytes, "{}: more than the {} bytes expected of it", path,
                  max_bytes);
    }
    return out;
}

namespace {

// Mappings the SIGBUS handler can name: a file truncated while mapped faults on the next read of
// a page past its new end, and the process would otherwise die with a bare "Bus error".
struct MapEntry {
    std::atomic<const std::byte*> begin{nullptr};
    std::atomic<size_t> size{0};
    char path[480] = {};
};
MapEntry g_maps[128];
std::mutex g_maps_mu;  // registration only; the handler reads without it

void write_stderr(const char* s) {
    if (::write(STDERR_FILENO, s, std::strlen(s)) < 0) return;
}

extern "C" void on_sigbus(int, siginfo_t* si, void*) {
    const auto* a = static_cast<const std::byte*>(si->si_addr);
    for (MapEntry& m : g_maps) {
        const std::byte* b = m.begin.load();
        if (!b || a < b || a >= b + m.size.load()) continue;
        write_stderr("ete: error: the file '");
        write_stderr(m.path);
        write_stderr(
            "' was truncated or replaced in place while this process read it (SIGBUS): "
            "never modify the data or checkpoint files of a running job\n");
        _exit(1);
    }
    write_stderr("ete: error: bus error (SIGBUS) outside ETE's mapped files\n");
    ::signal(SIGBUS, SIG_DFL);
    ::raise(SIGBUS);
}

}  // namespace

void register_mapping(const void* mapping, size_t n, const std::string& path) {
    const auto* p = static_cast<const std::byte*>(mapping);
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, nullptr);
    });
    std::lock_guard<std::mutex> lock(g_maps_mu);
    for (MapEntry& m : g_maps) {
        if (m.begin.load() != nullptr) continue;
        std::snprintf(m.path, sizeof(m.path), "%s", path.c_str());
        m.size = n;
        m.begin = p;  // last: the handler reads an entry only once begin is set
        return;
    }
    // A full table only loses the file's name in the message.
}

void unregister_mapping(const void* p) {
    std::lock_guard<std::mutex> lock(g_maps_mu);
    for (MapEntry& m : g_maps) {
        if (m.begin.load() != p) continue;
        m.begin = nullptr;
        m.size = 0;
        return;
    }
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
    FdGuard fd(open_checked(path, O_RDONLY, "mmap"));
    struct stat st;
    ETE_CHECK(::fstat(fd.get(), &st) == 0, "mmap {}: stat failed: {}", path, errno_text(errno));
    ETE_CHECK(S_ISREG(st.st_mode), "mmap {}: not a regular file", path);
    size_ = size_t(st.st_size);
    if (size_ == 0) return;  // mmap rejects length 0; an empty span needs no mapping
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    ETE_CHECK(p != MAP_FAILED, "mmap {}: mapping {} bytes failed: {}", path, size_,
              errno_text(errno));
    data_ = static_cast<const std::byte*>(p);
    register_mapping(data_, size_, path_);
}

MappedFile::~MappedFile() {
    reset();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        reset();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        path_ = std::move(other.path_);
    }
    return *this;
}

void MappedFile::reset() noexcept {
    if (data_) {
        unregister_mapping(data_);
        ::munmap(const_cast<std::byte*>(data_), size_);
    }
    data_ = nullptr;
    size_ = 0;
}

void MappedFile::release(size_t offset, size_t len) const {
    if (!data_ || offset >= size_) return;
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    const size_t end = std::min(size_, offset + len);
    const size_t first = (offset + page - 1) / page * page, last = end / page * page;
    if (last > first) ::madvise(const_cast<std::byte*>(data_) + first, last - first, MADV_DONTNEED);
}

namespace {

void fsync_dir(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

}  // namespace

void replace_dir(const std::string& tmp, const std::string& target, const std::string& aside) {
    namespace fs = std::filesystem;
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        fs::remove_all(tmp);  // the old target
        return;
    }
    const int err = errno;
    if (err != ENOENT && err != EINVAL && err != ENOSYS)
        throw fs::filesystem_error("exchange", tmp, target,
                                   std::error_code(err, std::generic_category()));
    // ENOENT: no target yet; EINVAL/ENOSYS: no exchange on this file system.
    const bool had = fs::exists(target);
    if (had) fs::rename(target, aside);
    try {
        fs::rename(tmp, target);
    } catch (...) {
        if (had) fs::rename(aside, target);
        throw;
    }
    if (had) fs::remove_all(aside);
}

int recover_dir_leftovers(const std::string& dir) {
    namespace fs = std::filesystem;
    const fs::path target = fs::absolute(dir);
    const fs::path parent = target.parent_path();
    if (!fs::is_directory(parent)) return 0;
    const std::string base = target.filename().string(), mine = std::to_string(::getpid());
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(parent)) names.push_back(e.path().filename());
    int n = 0;
    for (const std::string& name : names) {
        for (const char* kind : {".tmp.", ".old."}) {
            const std::string prefix = base + kind;
            if (name.rfind(prefix, 0) != 0 || name.substr(prefix.size()) == mine) continue;
            if (kind[1] == 'o' && !fs::exists(target))
                fs::rename(parent / name, target);
            else
                fs::remove_all(parent / name);
            ++n;
        }
    }
    return n;
}

void write_dir_atomic(const std::string& dir, const std::string& what,
                      const std::function<void(const std::string& tmp)>& fill) {
    namespace fs = std::filesystem;
    fs::path target = fs::absolute(dir);
    fs::create_directories(target.parent_path());
    const std::string tmp = target.string() + ".tmp." + std::to_string(::getpid());
    const std::string old = target.string() + ".old." + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    try {
        fill(tmp);
        fsync_dir(tmp);
        replace_dir(tmp, target.string(), old);
        fsync_dir(target.parent_path().string());
    } catch (const std::exception& e) {
        std::error_code ec;
        fs::remove_all(tmp, ec);
        throw_error(fmt::format("{} '{}': {}", what, dir, e.what()));
    }
}

}  // namespace ete
