// ete/parallel/topology.cpp — the `nvidia-smi topo -m` parser (parallel/topology.h).
#include "ete/parallel/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "ete/core/error.h"

namespace ete {

namespace {

constexpr const char* kAffinityColumns[] = {"CPU Affinity", "NUMA Affinity", "GPU NUMA ID"};

std::vector<std::string> split_ws(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string t; in >> t;) out.push_back(t);
    return out;
}

bool is_gpu_name(const std::string& s) {
    return s.size() > 3 && s.compare(0, 3, "GPU") == 0 &&
           std::all_of(s.begin() + 3, s.end(), [](char c) { return std::isdigit(uint8_t(c)); });
}

// The header: device columns in order, and the affinity columns in the order they appear.
struct Header {
    std::vector<std::string> devices;
    std::vector<std::string> affinity;
};

bool parse_header(std::string line, Header& h) {
    std::vector<std::pair<size_t, std::string>> found;
    for (const char* col : kAffinityColumns) {
        const size_t at = line.find(col);
        if (at == std::string::npos) continue;
        found.emplace_back(at, col);
        line.replace(at, std::string(col).size(), std::string(std::string(col).size(), ' '));
    }
    std::sort(found.begin(), found.end());
    h.devices = split_ws(line);
    if (h.devices.empty() || h.devices[0] != "GPU0") return false;
    for (const auto& f : found) h.affinity.push_back(f.second);
    return true;
}

Link parse_link(const std::string& cell, const std::string& where, int line, const std::string& row,
                const std::string& col) {
    static const std::map<std::string, LinkClass> kClasses = {
        {"X", LinkClass::Self},  {"PIX", LinkClass::PIX},   {"PXB", LinkClass::PXB},
        {"PHB", LinkClass::PHB}, {"NODE", LinkClass::NODE}, {"SYS", LinkClass::SYS}};
    if (auto it = kClasses.find(cell); it != kClasses.end()) return {it->second, 0};
    if (cell.size() > 2 && cell.compare(0, 2, "NV") == 0 && cell.size() <= 5 &&
        std::all_of(cell.begin() + 2, cell.end(), [](char c) { return std::isdigit(uint8_t(c)); }))
        return {LinkClass::NVLink, std::stoi(cell.substr(2))};
    throw_error(
        fmt::format("{}:{}: the link of {} to {} is '{}' (expected X, NV#, PIX, PXB, "
                    "PHB, NODE or SYS)",
                    where, line, row, col, cell.substr(0, 32)));
}

int parse_numa(const std::string& cell, const std::string& where, int line,
               const std::string& row) {
    if (cell == "N/A") return -1;
    ETE_CHECK(
        !cell.empty() && cell.size() <= 6 &&
            std::all_of(cell.begin(), cell.end(), [](char c) { return std::isdigit(uint8_t(c)); }),
        "{}:{}: {}'s NUMA affinity is '{}' (expected a node number or N/A)", where, line, row,
        cell.substr(0, 32));
    return std::stoi(cell);
}

}  // namespace

std::string link_name(const Link& l) {
    switch (l.cls) {
        case LinkClass::Self:
            return "X";
        case LinkClass::NVLink:
            return fmt::format("NV{}", l.nvlinks);
        case LinkClass::PIX:
            return "PIX";
        case LinkClass::PXB:
            return "PXB";
        case LinkClass::PHB:
            return "PHB";
        case LinkClass::NODE:
            return "NODE";
        case LinkClass::SYS:
            return "SYS";
    }
    return "?";
}

const char* link_class_meaning(LinkClass c) {
    switch (c) {
        case LinkClass::Self:
            return "the device itself";
        case LinkClass::NVLink:
            return "a bonded set of NVLinks";
        case LinkClass::PIX:
            return "at most a single PCIe bridge";
        case LinkClass::PXB:
            return "multiple PCIe bridges, without the PCIe host bridge";
        case LinkClass::PHB:
            return "PCIe and a PCIe host bridge (typically the CPU)";
        case LinkClass::NODE:
            return "PCIe and the interconnect between PCIe host bridges within a NUMA node";
        case LinkClass::SYS:
            return "PCIe and the SMP interconnect between NUMA nodes";
    }
    return "?";
}

GpuTopology parse_nvidia_smi_topo(const std::string& text, const std::string& where) {
    std::vector<std::string> lines;
    {
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
    }
    Header h;
    size_t header_line = 0;
    while (header_line < lines.size() && !parse_header(lines[header_line], h)) ++header_line;
    ETE_CHECK(header_line < lines.size(),
              "{}: no GPU matrix (expected the output of nvidia-smi topo -m: a header line "
              "starting with GPU0)",
              where);
    const size_t D = h.devices.size();
    std::map<std::string, std::pair<int, std::vector<std::string>>> rows;  // name -> line, cells
    std::map<std::string, std::string> nic_legend;
    for (size_t i = header_line + 1; i < lines.size(); ++i) {
        const std::vector<std::string> t = split_ws(lines[i]);
        if (t.empty()) continue;
        if (t.size() == 2 && t[0].size() > 1 && t[0].back() == ':' && t[0].rfind("NIC", 0) == 0)
            nic_legend[t[0].substr(0, t[0].size() - 1)] = t[1];
        if (std::find(h.devices.begin(), h.devices.end(), t[0]) == h.devices.end()) continue;
        ETE_CHECK(t.size() >= D + 1, "{}:{}: the row of {} has {} cells, expected {} (truncated?)",
                  where, i + 1, t[0], t.size() - 1, D);
        ETE_CHECK(rows.emplace(t[0], std::make_pair(int(i + 1), t)).second,
                  "{}:{}: a second row for {}", where, i + 1, t[0]);
    }
    GpuTopology g;
    std::vector<size_t> gpu_cols, nic_cols;
    for (size_t c = 0; c < D; ++c) (is_gpu_name(h.devices[c]) ? gpu_cols : nic_cols).push_back(c);
    for (size_t c : gpu_cols) g.gpus.push_back(h.devices[c]);
    for (size_t c : nic_cols) {
        const auto it = nic_legend.find(h.devices[c]);
        g.nics.push_back(it != nic_legend.end() ? it->second : h.devices[c]);
    }
    const size_t G = g.gpus.size();
    g.gpu_gpu.assign(G, std::vector<Link>(G));
    g.gpu_nic.assign(G, std::vector<Link>(nic_cols.size()));
    for (size_t i = 0; i < G; ++i) {
        const auto r = rows.find(g.gpus[i]);
        ETE_CHECK(r != rows.end(), "{}: no row for {} (truncated?)", where, g.gpus[i]);
        const auto& [line, t] = r->second;
        for (size_t j = 0; j < G; ++j)
            g.gpu_gpu[i][j] = parse_link(t[1 + gpu_cols[j]], where, line, g.gpus[i], g.gpus[j]);
        for (size_t k = 0; k < nic_cols.size(); ++k)
            g.gpu_nic[i][k] =
                parse_link(t[1 + nic_cols[k]], where, line, g.gpus[i], h.devices[nic_cols[k]]);
        std::string cpus = "N/A";
        int numa = -1;
        for (size_t a = 0; a < h.affinity.size() && 1 + D + a < t.size(); ++a) {
            const std::string& cell = t[1 + D + a];
            if (h.affinity[a] == std::string("CPU Affinity")) cpus = cell.substr(0, 256);
            if (h.affinity[a] == std::string("NUMA Affinity"))
                numa = parse_numa(cell, where, line, g.gpus[i]);
        }
        g.cpu_affinity.push_back(cpus);
        g.numa_affinity.push_back(numa);
    }
    for (size_t i = 0; i < G; ++i)
        for (size_t j = 0; j < G; ++j) {
            ETE_CHECK((g.gpu_gpu[i][j].cls == LinkClass::Self) == (i == j),
                      "{}: the link of {} to {} is {} (expected X exactly on the diagonal)", where,
                      g.gpus[i], g.gpus[j], link_name(g.gpu_gpu[i][j]));
            ETE_CHECK(g.gpu_gpu[i][j] == g.gpu_gpu[j][i],
                      "{}: the link of {} to {} is {} but the other way {} (expected a symmetric "
                      "matrix)",
                      where, g.gpus[i], g.gpus[j], link_name(g.gpu_gpu[i][j]),
                      link_name(g.gpu_gpu[j][i]));
        }
    return g;
}

std::string nvidia_smi_topo_text() {
    FILE* p = ::popen("nvidia-smi topo -m 2>/dev/null", "r");
    if (!p) return "";
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0 && out.size() < (1u << 20);)
        out.append(buf, n);
    return ::pclose(p) == 0 ? out : "";
}

}  // namespace ete
