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

using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

Topology load_topology() {
    hwloc_topology_t raw = nullptr;
    ETE_CHECK(hwloc_topology_init(&raw) == 0, "hwloc: cannot initialize a topology");
    Topology t(raw);
    ETE_CHECK(hwloc_topology_load(raw) == 0, "hwloc: cannot load this machine's topology");
    return t;
}

}  // namespace

std::vector<HostCore> host_cores() {
    const Topology t = load_topology();
    hwloc_topology_t raw = t.get();
    std::vector<HostCore> out;
    for (int i = 0; i < count(raw, HWLOC_OBJ_CORE); ++i) {
        hwloc_obj_t core = hwloc_get_obj_by_type(raw, HWLOC_OBJ_CORE, unsigned(i));
        HostCore c;
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(raw, HWLOC_OBJ_PACKAGE, core);
        if (pkg) {
            c.package = int(pkg->logical_index);
            hwloc_obj_t first =
                hwloc_get_next_obj_inside_cpuset_by_type(raw, pkg->cpuset, HWLOC_OBJ_CORE, nullptr);
            c.core_in_package = int(core->logical_index - (first ? first->logical_index : 0));
        } else {
            c.core_in_package = int(core->logical_index);
        }
        for (int n = 0; n < count(raw, HWLOC_OBJ_NUMANODE); ++n) {
            hwloc_obj_t numa = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, unsigned(n));
            if (numa && hwloc_bitmap_isincluded(core->cpuset, numa->cpuset)) {
                c.numa = int(numa->os_index);
                break;
            }
        }
        if (hwloc_obj_t l3 = hwloc_get_ancestor_obj_by_type(raw, HWLOC_OBJ_L3CACHE, core))
            c.l3 = int(l3->logical_index);
        out.push_back(c);
    }
    return out;
}

HostTopology discover_host() {
    const Topology t = load_topology();
    hwloc_topology_t raw = t.get();
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
