// ete/parallel/link_probe.cpp — the measured link matrix of link_probe.h.
#include "ete/parallel/link_probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ete/core/error.h"

namespace ete {

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::string host_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
    return buf;
}

// Half the round trip of `reps` ping-pongs of `bytes` with `peer`; the lower rank starts.
std::vector<double> ping_pong(Communicator& c, int peer, std::vector<uint8_t>& buf, uint64_t bytes,
                              int reps) {
    std::vector<double> half;
    const bool first = c.rank() < peer;
    for (int i = 0; i < reps; ++i) {
        const double t0 = now_s();
        if (first) {
            c.send(buf.data(), bytes, DType::U8, peer, 71);
            c.recv(buf.data(), bytes, DType::U8, peer, 71);
        } else {
            c.recv(buf.data(), bytes, DType::U8, peer, 71);
            c.send(buf.data(), bytes, DType::U8, peer, 71);
        }
        half.push_back((now_s() - t0) / 2);
    }
    return half;
}

// The best bus bandwidth of `reps` all-reduces of `bytes` of fp32 over c (GB/s; 0 alone).
double bus_gbps(Communicator& c, uint64_t bytes, int reps) {
    if (c.size() < 2) return 0;
    std::vector<float> v(bytes / 4, 1.0f);
    c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::Sum);  // warm-up
    double best = 1e300;
    for (int i = 0; i < reps; ++i) {
        c.barrier();
        const double t0 = now_s();
        c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::Sum);
        double t = now_s() - t0;
        c.all_reduce(&t, 1, DType::F64, ReduceOp::Max);  // the slowest rank's time
        best = std::min(best, t);
    }
    return 2.0 * (c.size() - 1) / c.size() * double(v.size() * 4) / best / 1e9;
}

}  // namespace

int tournament_rounds(int n) {
    return n < 2 ? 0 : (n % 2 == 0 ? n - 1 : n);
}

int tournament_partner(int n, int round, int rank) {
    // The circle method over an even m slots: slot m − 1 stays and meets slot round mod (m − 1);
    // every other pair sums to 2·round mod (m − 1). For odd n, slot m − 1 = n is the rest.
    const int m = n % 2 == 0 ? n : n + 1, M = m - 1;
    int partner;
    if (rank == M)
        partner = round % M;
    else if (rank == round % M)
        partner = M;
    else
        partner = ((2 * round - rank) % M + M) % M;
    return partner >= n ? -1 : partner;
}

LinkMatrix probe_links(Communicator& world, const ProbeOptions& opt) {
    const int n = world.size(), me = world.rank();
    ETE_CHECK(opt.bytes >= 8 && opt.latency_reps >= 1 && opt.bandwidth_reps >= 1,
              "link probe: {} bytes, {} latency and {} bandwidth reps: expected at least 8 bytes "
              "and 1 rep each",
              opt.bytes, opt.latency_reps, opt.bandwidth_reps);
    LinkMatrix m;
    // Host names, 64 bytes a rank.
    std::vector<char> mine(64, 0), all(size_t(64) * n, 0);
    const std::string h = host_name();
    std::memcpy(mine.data(), h.data(), std::min<size_t>(h.size(), 63));
    world.all_gather(mine.data(), all.data(), 64, DType::U8);
    for (int r = 0; r < n; ++r) m.hosts.emplace_back(all.data() + size_t(64) * r);
    // My row: each round's partner measured.
    std::vector<double> row_gbps(size_t(n), 0), row_lat(size_t(n), 0);
    std::vector<uint8_t> buf(opt.bytes, 1);
    for (int round = 0; round < tournament_rounds(n); ++round) {
        const int peer = tournament_partner(n, round, me);
        world.barrier();
        if (peer < 0) continue;
        std::vector<double> lat = ping_pong(world, peer, buf, 8, opt.latency_reps);
        std::sort(lat.begin(), lat.end());
        row_lat[size_t(peer)] = lat[lat.size() / 2] * 1e6;
        const std::vector<double> bw = ping_pong(world, peer, buf, opt.bytes, opt.bandwidth_reps);
        row_gbps[size_t(peer)] = double(opt.bytes) / *std::min_element(bw.begin(), bw.end()) / 1e9;
    }
    std::vector<double> g(size_t(n) * n), l(size_t(n) * n);
    world.all_gather(row_gbps.data(), g.data(), size_t(n), DType::F64);
    world.all_gather(row_lat.data(), l.data(), size_t(n), DType::F64);
    for (int r = 0; r < n; ++r) {
        m.gbps.emplace_back(g.begin() + size_t(r) * n, g.begin() + size_t(r + 1) * n);
        m.latency_us.emplace_back(l.begin() + size_t(r) * n, l.begin() + size_t(r + 1) * n);
    }
    m.world_bus_gbps = bus_gbps(world, opt.bytes, opt.bandwidth_reps);
    // Each host's ranks (color: the first rank on the host).
    int color = me;
    for (int r = 0; r < n; ++r)
        if (m.hosts[size_t(r)] == m.hosts[size_t(me)]) {
            color = r;
            break;
        }
    std::unique_ptr<Communicator> node = world.split(color, me, "node");
    const double mine_bus = bus_gbps(*node, opt.bytes, opt.bandwidth_reps);
    std::vector<double> per(static_cast<size_t>(n));
    world.all_gather(&mine_bus, per.data(), 1, DType::F64);
    for (int r = 0; r < n; ++r) {
        bool first = true;
        for (int q = 0; q < r; ++q) first = first && m.hosts[size_t(q)] != m.hosts[size_t(r)];
        const bool shared = std::count(m.hosts.begin(), m.hosts.end(), m.hosts[size_t(r)]) > 1;
        if (first && shared) {
            m.node_names.push_back(m.hosts[size_t(r)]);
            m.node_bus_gbps.push_back(per[size_t(r)]);
        }
    }
    return m;
}

}  // namespace ete
