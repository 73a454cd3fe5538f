// ete/train/prometheus.h — the Prometheus text exposition format (version 0.0.4) and the HTTP
// endpoint that serves it (cpp-httplib), on world rank 0 only (docs/operations.md, Metrics).
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

class MetricsServer {
  public:
    // Serves GET /metrics with body() at addr:port. Throws ete::Error naming
    // monitor.prometheus_addr / monitor.prometheus_port when the address cannot be bound.
    MetricsServer(const std::string& addr, int port, std::function<std::string()> body);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::thread thread_;
};

}  // namespace ete
