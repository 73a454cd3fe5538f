// ete/parallel/topology_hwloc.cpp — discover_host (parallel/topology.h): hwloc for packages,
// NUMA nodes, cores and caches; the kernel for network devices.
#include <hwloc.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/parallel/topology.h"

namespace ete {

namespace {

// The network and InfiniBand devices the kernel lists with a device behind them
// (/sys/class/net/X/device: not the loopback or virtual ones such as bridges and ifb;
// /sys/class/infiniband). hwloc finds them too, but only with its I/O discovery, whose PCI plugin
// leaks what it allocates.
std::vector<std::string> network_devices() {
    std::vector<std::string> out;
    for (const char* dir : {"/sys/class/net", "/sys/class/infiniband"}) {
        std::error_code ec;
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec))
            if (std::filesystem::exists(e.path() / "device", ec))
                names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        out.insert(out.end(), names.begin(), names.end());
    }
    return out;
}

struct TopologyDeleter {
    void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};

int count(hwloc_topology_t t, hwloc_obj_type_t type) {
    const int n = hwloc_get_nbobjs_by_type(t, type);
    return n < 0 ? 0 : n;
}

uint64_t first_cache(hwloc_topology_t t, hwloc_obj_type_t type) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, type, 0);
    return o && o->attr ? o->attr->cache.size : 0;
}

}  // namespace

HostTopology discover_host() {
    hwloc_topology_t raw = nullptr;
    ETE_CHECK(hwloc_topology_init(&raw) == 0, "hwloc: cannot initialize a topology");
    std::unique_ptr<hwloc_topology, TopologyDeleter> t(raw);
    ETE_CHECK(hwloc_topology_load(raw) == 0, "hwloc: cannot load this machine's topology");
    HostTopology h;
    h.packages = count(raw, HWLOC_OBJ_PACKAGE);
    h.numa_nodes = count(raw, HWLOC_OBJ_NUMANODE);
    h.cores = count(raw, HWLOC_OBJ_CORE);
    h.pus = count(raw, HWLOC_OBJ_PU);
    for (int i = 0; i < h.numa_nodes; ++i) {
        hwloc_obj_t n = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, unsigned(i));
        h.numa_bytes.push_back(n && n->attr ? n->attr->numanode.local_memory : 0);
    }
    h.l1d_bytes = first_cache(raw, HWLOC_OBJ_L1CACHE);
    h.l2_bytes = first_cache(raw, HWLOC_OBJ_L2CACHE);
    h.l3_bytes = first_cache(raw, HWLOC_OBJ_L3CACHE);
    h.l3_count = count(raw, HWLOC_OBJ_L3CACHE);
    if (hwloc_obj_t p = hwloc_get_obj_by_type(raw, HWLOC_OBJ_PACKAGE, 0))
        if (const char* m = hwloc_obj_get_info_by_name(p, "CPUModel")) h.cpu_model = m;
    h.nics = network_devices();
    return h;
}

}  // namespace ete
