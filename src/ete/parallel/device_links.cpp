// ete/parallel/device_links.cpp — link tables from topologies (device_links.h).
#include "ete/parallel/device_links.h"

#include <algorithm>
#include <map>

#include "ete/core/error.h"

namespace ete {

namespace {

// An empty table of n devices, nodes of the given sizes, every pair on the network.
DeviceLinks network_of(const std::vector<int>& per_node) {
    DeviceLinks l;
    for (size_t k = 0; k < per_node.size(); ++k)
        for (int i = 0; i < per_node[k]; ++i) l.node.push_back(int(k));
    const size_t n = l.node.size();
    l.gbps.assign(n, std::vector<double>(n, kNetworkGbps));
    l.name.assign(n, std::vector<std::string>(n, "net"));
    return l;
}

}  // namespace

double nominal_gbps(const Link& l) {
    switch (l.cls) {
        case LinkClass::NVLink:
            return 25.0 * std::max(l.nvlinks, 1);
        case LinkClass::PIX:
            return 24;
        case LinkClass::PXB:
            return 20;
        case LinkClass::PHB:
            return 16;
        case LinkClass::NODE:
            return 12;
        case LinkClass::SYS:
            return 10;
        case LinkClass::Self:
            break;
    }
    return 0;
}

DeviceLinks gpu_links(const GpuTopology& g, const std::vector<int>& gpus_per_node) {
    DeviceLinks l = network_of(gpus_per_node);
    size_t base = 0;
    for (int k : gpus_per_node) {
        ETE_CHECK(k <= int(g.gpus.size()), "placement: {} ranks on a node with {} GPUs", k,
                  g.gpus.size());
        for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) {
                if (i == j) continue;
                l.gbps[base + i][base + j] = nominal_gbps(g.gpu_gpu[i][j]);
                l.name[base + i][base + j] = link_name(g.gpu_gpu[i][j]);
            }
        base += size_t(k);
    }
    return l;
}

DeviceLinks core_links(const std::vector<HostCore>& cores, const std::vector<int>& ranks_per_node,
                       std::vector<std::vector<int>>* block_cores) {
    ETE_CHECK(!cores.empty(), "placement: hwloc found no cores on this host");
    DeviceLinks l = network_of(ranks_per_node);
    const int nc = int(cores.size());
    size_t base = 0;
    for (int k : ranks_per_node) {
        const int per = std::max(1, nc / std::max(k, 1));
        std::vector<int> first(static_cast<size_t>(k));
        for (int i = 0; i < k; ++i) {
            std::vector<int> block;
            for (int c = 0; c < per; ++c) block.push_back((i * per + c) % nc);
            first[size_t(i)] = block[0];
            if (block_cores) block_cores->push_back(block);
        }
        for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) {
                if (i == j) continue;
                const HostCore &a = cores[size_t(first[i])], &b = cores[size_t(first[j])];
                std::pair<const char*, double> link{"SYS", 10};
                if (a.l3 >= 0 && a.l3 == b.l3)
                    link = {"L3", 40};
                else if (a.numa == b.numa)
                    link = {"NUMA", 25};
                else if (a.package == b.package)
                    link = {"package", 16};
                l.gbps[base + i][base + j] = link.second;
                l.name[base + i][base + j] = link.first;
            }
        base += size_t(k);
    }
    return l;
}

std::string rankfile_slots(const std::vector<HostCore>& cores, const std::vector<int>& which) {
    std::map<int, std::vector<int>> by_package;
    for (int c : which)
        by_package[cores[size_t(c)].package].push_back(cores[size_t(c)].core_in_package);
    std::string out;
    for (auto& [pkg, list] : by_package) {
        std::sort(list.begin(), list.end());
        list.erase(std::unique(list.begin(), list.end()), list.end());
        for (size_t i = 0; i < list.size();) {
            size_t j = i;
            while (j + 1 < list.size() && list[j + 1] == list[j] + 1) ++j;
            out += fmt::format(
                "{}{}:{}", out.empty() ? "" : ",", pkg,
                i == j ? std::to_string(list[i]) : fmt::format("{}-{}", list[i], list[j]));
            i = j + 1;
        }
    }
    return out;
}

}  // namespace ete
