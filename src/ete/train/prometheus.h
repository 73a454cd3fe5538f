// ete/train/prometheus.h — the Prometheus text exposition format (version 0.0.4) and the HTTP
// endpoint that serves it (metrics_server.cpp), on world rank 0 only (docs/operations.md,
// Metrics).
//
// The server answers on its own thread from a snapshot the training loop replaces after each
// step under a mutex held for a copy: a scrape never waits for a step, and a step never waits
// for a scrape.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ete {

struct MetricSample {
    std::string
        labels;  // rendered label pairs without braces, e.g. rank="1",cause="nan"; "" = none
    double value = 0;
};

struct MetricFamily {
    std::string name;  // ete_..., base units, counters end in _total
    std::string help;
    std::string type;  // gauge | counter
    std::vector<MetricSample> samples;
};

// `# HELP`, `# TYPE` and one line per sample; values as Prometheus spells them (NaN, +Inf).
std::string render_exposition(const std::vector<MetricFamily>& families);
// A label value escaped for the exposition (backslash, double quote, newline).
std::string label_value(const std::string& v);

// What the metrics endpoint lets clients take (docs/operations.md, Metrics). Every request is
// one GET or HEAD without a body, answered and closed.
struct MetricsServerLimits {
    int max_connections = 64;         // open at once; at the cap the oldest makes room
    int timeout_ms = 5000;            // from accept to the last byte sent, else closed
    size_t max_request_bytes = 8192;  // request line and headers
    int reserved_fds = 64;            // RLIMIT_NOFILE descriptors the server never takes
};

class MetricsServer {
  public:
    // Serves GET /metrics with body() at addr:port (0: any free port; port() says which) on
    // its own thread. Throws ete::Error naming monitor.prometheus_addr / monitor.prometheus_port
    // when the address cannot be bound.
    MetricsServer(const std::string& addr, int port, std::function<std::string()> body,
                  const MetricsServerLimits& limits = {});
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    int port() const;
    // The most connections held at once: min(max_connections, (RLIMIT_NOFILE - reserved_fds -
    // 2) / 2), at least 1 — the server never holds more than cap + 2 descriptors.
    int connection_cap() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::thread thread_;
};

}  // namespace ete
