// ete/core/file_util.h — whole-file reads, crash-safe writes and read-only memory maps.
//
// write_file_atomic gives "old file or new file, never a torn one" (DESIGN.md §7): bytes go to
// `path + ".tmp.<pid>"` in the same directory, the file is fsynced, renamed over the target, and
// the directory is fsynced so the rename itself survives a crash. On any failure the temporary
// file is removed and the target is left untouched. The temporary name is per process, so two
// threads of one process must not write the same target at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ete {

// Appends bytes to an open file descriptor. Small writes are gathered in a buffer; large ones go
// straight to the file, so streaming a multi-GB tensor never copies it. Errors throw ete::Error
// naming `path` (the user-visible target, not the temporary name).
class FileSink {
  public:
    FileSink(int fd, std::string path);
    FileSink(const FileSink&) = delete;
    FileSink& operator=(const FileSink&) = delete;

    void write(const void* data, size_t n);
    void write(std::string_view s) { write(s.data(), s.size()); }
    void flush();  // pushes buffered bytes to the descriptor (not to disk: that is fsync's job)
    uint64_t bytes_written() const { return written_; }
    // XXH3-64 of every byte pushed to the descriptor so far, in order (flush() first to cover
    // all written): a file's content hash without reading it back.
    uint64_t digest() const;

  private:
    void write_fd(const char* data, size_t n);

    int fd_;
    std::string path_;
    std::vector<char> buf_;
    uint64_t written_ = 0;
    std::shared_ptr<void> hash_;  // XXH3_state_t
};

// XXH3-64 of a whole file, read sequentially (its pages are dropped from the cache as they
// go, so hashing a checkpoint larger than memory does not evict the working set); the same
// value FileSink::digest() gave the writer. Throws naming the path.
uint64_t file_digest(const std::string& path);

using FileWriter = std::function<void(FileSink&)>;

// A file streamed under its temporary name and published by commit(), for content whose header
// is only known at the end (pwrite), such as token shards. Destroyed without commit(), it removes
// the temporary file and leaves the target untouched. write_file_atomic is built on it.
class AtomicFileWriter {
  public:
    explicit AtomicFileWriter(std::string path);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t n);
    void pwrite(uint64_t offset, const void* data, size_t n);  // overwrite written bytes
    void commit();  // fsync, close, rename over the target, fsync the directory
    const std::string& path() const { return path_; }
    int fd() const { return fd_; }

  private:
    std::string path_, tmp_;
    int fd_ = -1;
};

// Both return the content's XXH3-64 (file_digest of the committed file).
uint64_t write_file_atomic(const std::string& path, std::string_view bytes);
// `writer` streams the content into the sink; if it throws, its exception propagates unchanged
// after the temporary file is removed.
uint64_t write_file_atomic(const std::string& path, const FileWriter& writer);

// Writes a whole directory atomically: `fill(tmp)` writes its files into a temporary sibling,
// which is fsynced and renamed over `dir`, so `dir` is either the old or the new one, never half.
// If fill throws, the temporary is removed and an ete::Error "<what> '<dir>': <reason>" thrown.
void write_dir_atomic(const std::string& dir, const std::string& what,
                      const std::function<void(const std::string& tmp)>& fill);

// Puts the complete directory `tmp` at `target` (same file system). An existing target is swapped
// with tmp in one step (renameat2 RENAME_EXCHANGE), so no crash leaves target missing; its old
// contents end at tmp, which is then removed. Where the file system cannot exchange, the old
// target is renamed to `aside` first, and a crash between the two renames leaves it complete
// there. Throws std::filesystem::filesystem_error (the target as it was).
void replace_dir(const std::string& tmp, const std::string& target, const std::string& aside);

// What write_dir_atomic(dir) calls of other processes left when killed: `dir.tmp.PID` (half
// written) is deleted, `dir.old.PID` (a complete old copy set aside by replace_dir's fallback) is
// put back when dir is missing, else deleted. Only where no other process can be writing dir
// (the run lock held). Returns the number of entries acted on.
int recover_dir_leftovers(const std::string& dir);

// Appends `bytes` to an O_APPEND descriptor whole or not at all: a short or failed write (disk
// full, EFBIG) is cut back off the file. Returns 0, or the errno of the failure.
int append_whole(int fd, std::string_view bytes);

// Reads a whole regular file (devices and FIFOs are refused: they never end) of at most max_bytes
// (configs, tokenizers, JSON: 1 GiB; a corpus passes more); throws ete::Error naming the path.
constexpr uint64_t kMaxSmallFileBytes = uint64_t(1) << 30;
std::string read_file(const std::string& path, uint64_t max_bytes = kMaxSmallFileBytes);

// A file mapping the SIGBUS handler can name: when a mapped file is truncated or rewritten in place
// under a running process, the next read past its new end faults, and the process ends with a
// one-line error naming the file instead of a bare "Bus error". MappedFile registers itself;
// code that maps files on its own calls these.
void register_mapping(const void* p, size_t n, const std::string& path);
void unregister_mapping(const void* p);

// A read-only private mapping of a whole regular file. Zero-length files map to size() == 0 and
// data() == nullptr. The bytes are only as stable as the file: truncating it while mapped makes
// later reads fault (SIGBUS), which is why ETE writes files only by atomic rename.
class MappedFile {
  public:
    MappedFile() = default;
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::byte* data() const { return data_; }
    size_t size() const { return size_; }
    std::span<const std::byte> bytes() const { return {data_, size_}; }
    const std::string& path() const { return path_; }
    // Drops the resident pages wholly inside [offset, offset + len) (madvise DONTNEED): reading
    // them again re-reads the file. Lets a loader stream a large file without its pages piling up
    // in the resident set.
    void release(size_t offset, size_t len) const;

  private:
    void reset() noexcept;

    const std::byte* data_ = nullptr;
    size_t size_ = 0;
    std::string path_;
};

}  // namespace ete
