// ete/train/metrics_server.cpp — MetricsServer (prometheus.h): one thread polling the listening
// socket and every open connection. Why not cpp-httplib 0.11 (Debian 12): its accept loop hands
// every connection to an unbounded queue, so idle clients take descriptors without limit (the
// trainer's checkpoints then fail) and each occupies a worker for its whole read timeout (a scrape
// waits behind them).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "ete/core/error.h"
#include "ete/train/prometheus.h"

namespace ete {

using Clock = std::chrono::steady_clock;

// A named namespace, not the anonymous one: MetricsServer::Impl holds these.
namespace metrics_detail {
struct Conn {
    int fd = -1;
    Clock::time_point deadline;
    std::string in;   // request bytes so far
    std::string out;  // response bytes not yet sent (empty while reading)
    size_t sent = 0;
};
}  // namespace metrics_detail
using metrics_detail::Conn;

namespace {

// The connection cap: limits.max_connections, lowered so the server's descriptors (connections,
// the listening socket, the wake-up eventfd) leave limits.reserved_fds of RLIMIT_NOFILE to the
// rest of the process (checkpoints, logs, the data).
int cap_for(const MetricsServerLimits& limits) {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY)
        return limits.max_connections;
    const int64_t spare = int64_t(r.rlim_cur) - limits.reserved_fds - 2;
    return int(std::clamp<int64_t>(spare / 2, 1, limits.max_connections));
}

// The listening socket, bound (port 0: any free port), non-blocking; -1 when it cannot bind.
int bind_listener(const std::string& addr, int port) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const std::string service = std::to_string(port);
    if (::getaddrinfo(addr.c_str(), service.c_str(), &hints, &res) != 0) return -1;
    int fd = -1;
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
            ::close(fd);
            fd = -1;
        }
    }
    ::freeaddrinfo(res);
    return fd;
}

std::string response(int status, const char* reason, const std::string& type,
                     const std::string& body, bool head, const char* extra = "") {
    std::string r = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        status, reason, type, body.size(), extra);
    if (!head) r += body;
    return r;
}

// Whether the request head (request line and headers, CRLF-terminated) has header `name` (lower
// case; matched case-insensitively).
bool has_header(const std::string& head, const char* name) {
    std::string lower(head.size(), ' ');
    std::transform(head.begin(), head.end(), lower.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    return lower.find(std::string("\r\n") + name + ":") != std::string::npos;
}

}  // namespace

struct MetricsServer::Impl {
    MetricsServerLimits limits;
    std::function<std::string()> body;
    int listen_fd = -1, wake_fd = -1, cap = 1, port = 0;
    std::vector<Conn> conns;
    std::atomic<bool> stop{false};

    ~Impl() {
        for (Conn& c : conns) ::close(c.fd);
        if (listen_fd >= 0) ::close(listen_fd);
        if (wake_fd >= 0) ::close(wake_fd);
    }

    // The whole request head is in c.in: the response to send.
    std::string answer(const std::string& head) const {
        const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
        if (sp1 == std::string::npos || sp2 == std::string::npos)
            return response(400, "Bad Request", "text/plain", "bad request line\n", false);
        const std::string method = head.substr(0, sp1);
        std::string target = head.substr(sp1 + 1, sp2 - sp1 - 1);
        target = target.substr(0, target.find('?'));
        const bool head_only = method == "HEAD";
        if (method != "GET" && !head_only)
            return response(405, "Method Not Allowed", "text/plain", "GET only\n", false,
                            "Allow: GET, HEAD\r\n");
        if (has_header(head, "content-length") || has_header(head, "transfer-encoding"))
            return response(400, "Bad Request", "text/plain", "a GET carries no body\n", false);
        if (target == "/metrics")
            return response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body(),
                            head_only);
        if (target == "/")
            return response(200, "OK", "text/plain", "ete: metrics at /metrics\n", head_only);
        return response(404, "Not Found", "text/plain", "not found: see /metrics\n", head_only);
    }

    // Reads what is there; false = close the connection now.
    bool on_readable(Conn& c) {
        char buf[4096];
        for (;;) {
            const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
            if (n == 0) return false;
            if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
            c.in.append(buf, size_t(n));
            const size_t end = c.in.find("\r\n\r\n");
            if (end != std::string::npos) {
                c.out = answer(c.in.substr(0, end + 2));
                c.in.clear();
                ::shutdown(c.fd, SHUT_RD);  // one request per connection; the rest is ignored
                return on_writable(c);
            }
            if (c.in.size() > limits.max_request_bytes) {
                c.out = response(431, "Request Header Fields Too Large", "text/plain",
                                 "request head too large\n", false);
                return on_writable(c);
            }
        }
    }

    bool on_writable(Conn& c) {
        while (c.sent < c.out.size()) {
            const ssize_t n =
                ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
            if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
            c.sent += size_t(n);
        }
        return false;  // all sent: close
    }

    // Accepts what is pending; at the cap the connection closest to its deadline (the one idle
    // longest) makes room, so idle clients can never keep a scrape out.
    void accept_pending() {
        for (;;) {
            const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno != EMFILE && errno != ENFILE) return;  // EAGAIN: nothing pending
                if (!conns.empty()) {
                    close_at(oldest());  // no descriptor to spare: make one
                    continue;
                }
                // The process has none left and this server holds none: wait instead of
                // spinning on a listening socket that stays readable.
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                return;
            }
            if (int(conns.size()) >= cap) close_at(oldest());
            Conn c;
            c.fd = fd;
            c.deadline = Clock::now() + std::chrono::milliseconds(limits.timeout_ms);
            conns.push_back(std::move(c));
        }
    }

    size_t oldest() const {
        return size_t(
            std::min_element(conns.begin(), conns.end(),
                             [](const Conn& a, const Conn& b) { return a.deadline < b.deadline; }) -
            conns.begin());
    }

    void close_at(size_t i) {
        ::close(conns[i].fd);
        conns[i] = std::move(conns.back());
        conns.pop_back();
    }

    void run() {
        std::vector<pollfd> fds;
        for (;;) {
            fds.assign({{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}});
            for (const Conn& c : conns)
                fds.push_back({c.fd, short(c.out.empty() ? POLLIN : POLLOUT), 0});
            if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) return;
            if (fds[0].revents || stop) return;
            // Connections first (their indices match fds[2..]), then new ones.
            const auto now = Clock::now();
            for (size_t i = conns.size(); i-- > 0;) {
                const short ev = fds[i + 2].revents;
                bool keep = now < conns[i].deadline;
                if (keep && (ev & (POLLERR | POLLHUP | POLLNVAL)) && !(ev & POLLIN)) keep = false;
                if (keep && (ev & POLLIN))
                    keep = on_readable(conns[i]);
                else if (keep && (ev & POLLOUT))
                    keep = on_writable(conns[i]);
                if (!keep) close_at(i);
            }
            if (fds[1].revents & POLLIN) accept_pending();
        }
    }
};

MetricsServer::MetricsServer(const std::string& addr, int port, std::function<std::string()> body,
                             const MetricsServerLimits& limits)
    : impl_(std::make_unique<Impl>()) {
    impl_->limits = limits;
    impl_->body = std::move(body);
    impl_->cap = cap_for(limits);
    impl_->listen_fd = bind_listener(addr, port);
    ETE_CHECK(impl_->listen_fd >= 0,
              "monitor.prometheus_addr = '{}', monitor.prometheus_port = {}: cannot listen there "
              "(in use, or not an address of this host)",
              addr, port);
    sockaddr_storage sa{};
    socklen_t len = sizeof(sa);
    ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&sa), &len);
    impl_->port = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(sa).sin6_port
                                                 : reinterpret_cast<sockaddr_in&>(sa).sin_port);
    impl_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ETE_CHECK(impl_->wake_fd >= 0, "metrics server: eventfd failed ({})", std::strerror(errno));
    thread_ = std::thread([this] { impl_->run(); });
}

MetricsServer::~MetricsServer() {
    impl_->stop = true;  // seen within one poll timeout (100 ms) even if the wake-up write fails
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(impl_->wake_fd, &one, sizeof(one));
    if (thread_.joinable()) thread_.join();
}

int MetricsServer::port() const {
    return impl_->port;
}

int MetricsServer::connection_cap() const {
    return impl_->cap;
}

}  // namespace ete
