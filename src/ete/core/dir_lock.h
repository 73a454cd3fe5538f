// ete/core/dir_lock.h — one owner per run directory.
//
// A run owns its --out directory while it trains: DIR/ete.lock is held with flock(2) and names
// the holder (host, pid, start time). A second run on the same directory — same host or another
// sharing the file system — is refused with the holder's name. The kernel releases the lock when
// the holder dies, however it dies, so a stale file of a dead run is recognised by its lock being
// free and is simply taken over.
#pragma once

#include <string>

namespace ete {

class DirLock {
  public:
    // Throws ete::Error "--out 'DIR' is in use by another run (...)" when the lock is held.
    explicit DirLock(const std::string& dir);
    ~DirLock();
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;

    // "host <h>, pid <p>, since <UTC time>": what this lock records about its holder.
    static std::string describe_self();

  private:
    int fd_ = -1;
    std::string path_;
};

}  // namespace ete
