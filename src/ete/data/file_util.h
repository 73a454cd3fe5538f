// ete/data/file_util.h — small file helpers for the data layer: whole-file reads and the
// write-to-temporary, fsync, rename commit that keeps a crash from leaving a complete-looking file.
//
// (The io layer sits above data, so data carries its own copy of this pattern.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ete::data {

// Reads a whole file into memory; `what` names the file's role in the error message.
std::string read_file(const std::string& path, std::string_view what);

// Writes `path` atomically: bytes go to `path.tmp.<pid>`; commit() fsyncs, renames over `path`
// and fsyncs the directory. Destroying an uncommitted writer removes the temporary file.
class AtomicFileWriter {
  public:
    AtomicFileWriter(std::string path, std::string_view what);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t bytes);
    void pwrite(uint64_t offset, const void* data,
                size_t bytes);  // overwrite already-written bytes
    void commit();
    const std::string& path() const { return path_; }

  private:
    std::string path_, tmp_path_, what_;
    int fd_ = -1;
};

}  // namespace ete::data
