// tests/train/metrics_server_test.cpp — the metrics endpoint (train/prometheus.h MetricsServer)
// against hostile clients: GET/HEAD only and no body, a bounded request head, a deadline per
// connection, a connection cap that idle clients cannot use to keep a scrape out, and
// descriptors left to the rest of the process.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ete/train/prometheus.h"

namespace ete {
namespace {

const std::string kBody = "# HELP ete_step Step.\n# TYPE ete_step gauge\nete_step 7\n";

// A connected client socket (blocking, 10 s receive/send timeouts), or -1.
int connect_to(int port, bool blocking = true) {
    const int fd =
        ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (blocking ? 0 : SOCK_NONBLOCK), 0);
    if (fd < 0) return -1;
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// Everything the server sends until it closes (or 10 s pass).
std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, size_t(n));
    return out;
}

std::string exchange(int port, const std::string& request) {
    const int fd = connect_to(port);
    if (fd < 0) return "connect failed";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string r = read_all(fd);
    ::close(fd);
    return r;
}

int open_fds() {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
}

TEST(MetricsServer, ServesGetAndHeadAndNothingElse) {
    MetricsServer s("127.0.0.1", 0, [] { return kBody; });
    ASSERT_GT(s.port(), 0);
    std::string r = exchange(s.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
              std::string::npos);
    EXPECT_NE(r.find("Content-Length: " + std::to_string(kBody.size()) + "\r\n"),
              std::string::npos);
    EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), kBody);
    r = exchange(s.port(), "HEAD /metrics?x=1 HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    EXPECT_EQ(r.find("\r\n\r\n") + 4, r.size());  // no body
    EXPECT_EQ(exchange(s.port(), "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
    r = exchange(s.port(), "DELETE /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r;
    EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos);
    r = exchange(s.port(), "GET /metrics HTTP/1.1\r\ncontent-LENGTH: 5\r\n\r\nhello");
    EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << r;
    EXPECT_EQ(exchange(s.port(), "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
}

// A chunked POST is answered and closed at the end of its head: the body is never read (it was
// buffered whole before: 382 MiB sent grew the trainer by as much).
TEST(MetricsServer, ABodyIsNeverRead) {
    MetricsServer s("127.0.0.1", 0, [] { return kBody; });
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    const std::string head = "POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
    const std::string r = read_all(fd);  // returns at the server's close, not after a timeout
    EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r;
    ::close(fd);
}

TEST(MetricsServer, AnOversizedHeadIsRefused) {
    MetricsServerLimits lim;
    lim.max_request_bytes = 1024;
    MetricsServer s(
        "127.0.0.1", 0, [] { return kBody; }, lim);
    const std::string r =
        exchange(s.port(), "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(4000, 'a'));
    EXPECT_EQ(r.rfind("HTTP/1.1 431", 0), 0u) << r;
}

// A client that sends nothing is closed at the deadline (recv sees the close, not its own
// 10 s timeout).
TEST(MetricsServer, ASilentClientIsClosedAtTheDeadline) {
    MetricsServerLimits lim;
    lim.timeout_ms = 200;
    MetricsServer s(
        "127.0.0.1", 0, [] { return kBody; }, lim);
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    char c;
    errno = 0;
    EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "errno " << errno;
    ::close(fd);
}

// 300 idle connections (the attack) hold at most the cap on the server's side, and a
// scrape still gets its answer: at the cap the oldest connection makes room.
TEST(MetricsServer, IdleConnectionsNeverKeepAScrapeOut) {
    MetricsServerLimits lim;
    lim.max_connections = 16;
    MetricsServer s(
        "127.0.0.1", 0, [] { return kBody; }, lim);
    const int before = open_fds();
    std::vector<int> idle;
    for (int i = 0; i < 300; ++i) {
        const int fd = connect_to(s.port(), false);
        ASSERT_GE(fd, 0) << i;
        idle.push_back(fd);
    }
    // Let the server accept what it will; its descriptors beyond the clients' are its share.
    int held = 0;
    for (int i = 0; i < 50; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        held = open_fds() - before - 300;
    }
    EXPECT_LE(held, lim.max_connections);
    const std::string r = exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
    for (int fd : idle) ::close(fd);
}

// Under a low descriptor limit the server takes one connection at a time and the rest of the
// process can still open files (checkpoints failed when idle clients took every descriptor).
TEST(MetricsServer, LeavesDescriptorsForTheRun) {
    int to_child[2], to_parent[2];
    ASSERT_EQ(::pipe(to_child), 0);
    ASSERT_EQ(::pipe(to_parent), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        rlimit r{};
        ::getrlimit(RLIMIT_NOFILE, &r);
        r.rlim_cur = 64;
        if (::setrlimit(RLIMIT_NOFILE, &r) != 0) _exit(90);
        int port = 0, failures = 0;
        {
            MetricsServer s("127.0.0.1", 0, [] { return kBody; });
            if (s.connection_cap() != 1) _exit(91);
            port = s.port();
            if (::write(to_parent[1], &port, sizeof(port)) != sizeof(port)) _exit(92);
            char go;
            if (::read(to_child[0], &go, 1) != 1) _exit(93);
            std::vector<int> files;
            for (int i = 0; i < 40; ++i) {  // what a checkpoint and the logs need
                const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd < 0) ++failures;
                files.push_back(fd);
            }
            for (int fd : files)
                if (fd >= 0) ::close(fd);
        }
        _exit(failures);
    }
    int port = 0;
    ASSERT_EQ(::read(to_parent[0], &port, sizeof(port)), ssize_t(sizeof(port)));
    std::vector<int> idle;
    for (int i = 0; i < 100; ++i) idle.push_back(connect_to(port, false));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(::write(to_child[1], "g", 1), 1);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "90+: set-up failed; else files that could not be opened";
    for (int fd : idle)
        if (fd >= 0) ::close(fd);
}

}  // namespace
}  // namespace ete
