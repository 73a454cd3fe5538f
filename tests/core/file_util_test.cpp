// tests/io/file_util_test.cpp — atomic writes (no temp left, old file kept on failure), reads,
// mmap.
#include "ete/core/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ete/core/error.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

class FileUtilTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "ete_file_util_XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Every entry of the test directory, so a leftover "x.tmp.<pid>" shows up.
    std::vector<std::string> listing() const {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename());
        std::sort(out.begin(), out.end());
        return out;
    }

    std::string dir_;
};

std::string error_message(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected ete::Error";
    return "";
}

TEST_F(FileUtilTest, AtomicWriteCreatesFileAndLeavesNoTemp) {
    const std::string path = dir_ + "/out.bin";
    std::string payload("a\0b\xff", 4);  // embedded NUL and high byte survive byte-for-byte
    write_file_atomic(path, payload);
    EXPECT_EQ(read_file(path), payload);
    EXPECT_EQ(listing(), std::vector<std::string>{"out.bin"});
}

TEST_F(FileUtilTest, AtomicWriteReplacesExistingFile) {
    const std::string path = dir_ + "/out.txt";
    write_file_atomic(path, "old content that is longer");
    write_file_atomic(path, "new");
    EXPECT_EQ(read_file(path), "new");  // truncated to the new length, not overwritten in place
    EXPECT_EQ(listing(), std::vector<std::string>{"out.txt"});
}

TEST_F(FileUtilTest, WriterCallbackStreamsLargeAndSmallPieces) {
    const std::string path = dir_ + "/stream.bin";
    // Mix of pieces below and above the sink's 1 MiB buffer, so both write paths are exercised
    // and their order must be kept.
    std::string big(3 << 20, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 131 % 251);
    uint64_t counted = 0;
    write_file_atomic(path, [&](FileSink& sink) {
        sink.write("head");
        sink.write(big);
        sink.write("tail");
        counted = sink.bytes_written();
    });
    std::string expected = "head" + big + "tail";
    EXPECT_EQ(counted, expected.size());
    EXPECT_TRUE(read_file(path) == expected);
}

TEST_F(FileUtilTest, ThrowingWriterKeepsOldFileAndRemovesTemp) {
    const std::string path = dir_ + "/keep.txt";
    write_file_atomic(path, "old");
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    uintmax_t tmp_size_at_throw = 0;
    auto failing = [&](FileSink& sink) {
        sink.write(std::string(2 << 20, 'x'));  // past the buffer, so bytes reach the temp file
        tmp_size_at_throw = fs::file_size(tmp);
        throw std::runtime_error("writer failed midway");
    };
    EXPECT_THROW(write_file_atomic(path, failing), std::runtime_error);
    EXPECT_EQ(tmp_size_at_throw, uintmax_t(2 << 20));  // a partial file really existed
    EXPECT_EQ(read_file(path), "old");
    EXPECT_EQ(listing(), std::vector<std::string>{"keep.txt"});
}

TEST_F(FileUtilTest, TempFileExistsOnlyWhileWriting) {
    const std::string path = dir_ + "/t.txt";
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    bool seen = false;
    write_file_atomic(path, [&](FileSink& sink) {
        sink.write("x");
        seen = fs::exists(tmp);  // the documented temp name, in the target's directory
    });
    EXPECT_TRUE(seen);
    EXPECT_FALSE(fs::exists(tmp));
}

TEST_F(FileUtilTest, FailedRenameRemovesTempAndNamesPath) {
    const std::string path = dir_ + "/target_is_dir";
    fs::create_directory(path);  // renaming a file over a directory fails with EISDIR
    std::string msg = error_message([&] { write_file_atomic(path, "data"); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("rename"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(EISDIR)), std::string::npos) << msg;
    EXPECT_EQ(listing(), std::vector<std::string>{"target_is_dir"});
}

TEST_F(FileUtilTest, MissingDirectoryNamesPathAndErrno) {
    const std::string path = dir_ + "/no_such_dir/out.bin";
    std::string msg = error_message([&] { write_file_atomic(path, "data"); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
}

TEST_F(FileUtilTest, ReadFileErrors) {
    const std::string missing = dir_ + "/missing.txt";
    std::string msg = error_message([&] { read_file(missing); });
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
    msg = error_message([&] { read_file(dir_); });
    EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST_F(FileUtilTest, MappedFileBytesAndMove) {
    const std::string path = dir_ + "/m.bin";
    write_file_atomic(path, "mapped!");
    MappedFile a(path);
    ASSERT_EQ(a.size(), 7u);
    EXPECT_EQ(std::memcmp(a.data(), "mapped!", 7), 0);
    EXPECT_EQ(a.path(), path);
    const std::byte* p = a.data();
    MappedFile b(std::move(a));
    EXPECT_EQ(b.data(), p);  // moving keeps the one mapping; the source gives it up
    EXPECT_EQ(b.size(), 7u);
    EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_EQ(a.data(), nullptr);
    MappedFile c;
    c = std::move(b);
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(std::memcmp(c.data(), "mapped!", 7), 0);
}

TEST_F(FileUtilTest, MappedFileZeroLengthAndErrors) {
    const std::string empty = dir_ + "/empty.bin";
    write_file_atomic(empty, "");
    MappedFile m(empty);
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(m.data(), nullptr);
    EXPECT_TRUE(m.bytes().empty());
    std::string msg = error_message([&] { MappedFile x(dir_ + "/missing.bin"); });
    EXPECT_NE(msg.find("missing.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::strerror(ENOENT)), std::string::npos) << msg;
    msg = error_message([&] { MappedFile x(dir_); });
    EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

// Runs fn in a child process; returns its exit status (-signal when killed) and its stderr.
std::pair<int, std::string> in_child(const std::function<void()>& fn) {
    int pipe_fd[2];
    EXPECT_EQ(::pipe(pipe_fd), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(pipe_fd[0]);
        ::dup2(pipe_fd[1], STDERR_FILENO);
        fn();
        _exit(0);
    }
    ::close(pipe_fd[1]);
    std::string err;
    char buf[512];
    for (ssize_t n; (n = ::read(pipe_fd[0], buf, sizeof(buf))) > 0;) err.append(buf, size_t(n));
    ::close(pipe_fd[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), err};
}

// A file truncated while mapped: the next read past its new end is a SIGBUS, which now ends the
// process with one line naming the file (before: a bare "Bus error", no file named).
TEST_F(FileUtilTest, ATruncatedMappedFileIsNamed) {
    const std::string path = dir_ + "/data.bin";
    write_file_atomic(path, std::string(3 * 4096, 'x'));
    const auto [code, err] = in_child([&] {
        MappedFile m(path);
        if (::truncate(path.c_str(), 0) != 0) _exit(3);
        volatile char c = char(m.data()[2 * 4096]);
        (void)c;
    });
    EXPECT_EQ(code, 1) << err;
    EXPECT_EQ(err, "ete: error: the file '" + path +
                       "' was truncated or replaced in place while this process read it (SIGBUS): "
                       "never modify the data or checkpoint files of a running job\n");
}

// Devices and FIFOs are not files: read without end before (a config of /dev/zero grew until
// memory ran out; a FIFO blocked in open).
TEST_F(FileUtilTest, SpecialFilesAreRefused) {
    EXPECT_NE(error_message([] { read_file("/dev/zero"); }).find("not a regular file"),
              std::string::npos);
    const std::string fifo = dir_ + "/fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_NE(error_message([&] { read_file(fifo); }).find("/fifo: not a regular file"),
              std::string::npos);
    EXPECT_NE(error_message([&] { MappedFile m(fifo); }).find("not a regular file"),
              std::string::npos);
    write_file_atomic(dir_ + "/big", std::string(100, 'x'));
    EXPECT_NE(
        error_message([&] { read_file(dir_ + "/big", 99); }).find("100 bytes, more than the 99"),
        std::string::npos);
}

// replace_dir swaps a complete directory in: the old contents are gone, nothing is left beside.
TEST_F(FileUtilTest, ReplaceDirSwapsInOneStep) {
    const std::string target = dir_ + "/final", tmp = dir_ + "/final.tmp.1",
                      aside = dir_ + "/final.old.1";
    fs::create_directories(tmp);
    write_file_atomic(tmp + "/a", "new");
    replace_dir(tmp, target, aside);  // no target yet
    EXPECT_EQ(read_file(target + "/a"), "new");
    fs::create_directories(tmp);
    write_file_atomic(tmp + "/b", "newer");
    replace_dir(tmp, target, aside);
    EXPECT_EQ(read_file(target + "/b"), "newer");
    EXPECT_FALSE(fs::exists(target + "/a"));
    EXPECT_EQ(listing(), std::vector<std::string>{"final"});
    write_dir_atomic(target, "saving",
                     [](const std::string& t) { write_file_atomic(t + "/c", "x"); });
    EXPECT_EQ(read_file(target + "/c"), "x");
    EXPECT_EQ(listing(), std::vector<std::string>{"final"});
}

// What killed saves of other processes leave: a half-written dir.tmp.PID is deleted; a complete
// dir.old.PID goes back when dir is missing (a kill between the fallback's two renames), and is
// deleted when dir is there. This process's own are left alone.
TEST_F(FileUtilTest, LeftoversOfKilledSavesAreRecovered) {
    const std::string target = dir_ + "/final", mine = std::to_string(::getpid());
    fs::create_directories(target + ".tmp.999999");
    fs::create_directories(target + ".old.999998");
    write_file_atomic(target + ".old.999998/model", "the only copy");
    fs::create_directories(target + ".tmp." + mine);
    fs::create_directories(dir_ + "/finale.tmp.999999");  // another name
    EXPECT_EQ(recover_dir_leftovers(target), 2);
    EXPECT_EQ(read_file(target + "/model"), "the only copy");
    EXPECT_EQ(listing(),
              (std::vector<std::string>{"final", "final.tmp." + mine, "finale.tmp.999999"}));
    fs::create_directories(target + ".old.999997");
    EXPECT_EQ(recover_dir_leftovers(target), 1);
    EXPECT_EQ(read_file(target + "/model"), "the only copy");
    EXPECT_FALSE(fs::exists(target + ".old.999997"));
}

}  // namespace
}  // namespace ete
