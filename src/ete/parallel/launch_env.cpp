// ete/parallel/launch_env.cpp — launcher detection from environment variables, and the world
// communicator that matches it.
#include "ete/parallel/launch_env.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include "ete/core/error.h"
#include "ete/parallel/mpi_comm.h"
#include "ete/parallel/self_comm.h"

namespace ete {
namespace {

// Alternative names of one value, tried in order; unused slots are null.
using Names = std::array<const char*, 3>;

// One launcher's variable names.
struct LauncherVars {
    const char* launcher;
    const char* rank;
    Names size, local_rank, local_size;
    bool per_node_list;  // local size may be Slurm's "2(x3),1" per-node form
};

// A variable that is set, with its name for error messages.
struct Var {
    const char* name = nullptr;
    const char* value = nullptr;
    explicit operator bool() const { return value != nullptr; }
};

Var first_set(const GetenvFn& env, const Names& names) {
    for (const char* n : names) {
        if (!n) break;
        if (const char* v = env(n)) return {n, v};
    }
    return {};
}

// A plain decimal integer that fits an int ("", "+1", "-1", "1 ", "0x1" are malformed).
bool parse_int(std::string_view s, int& out) {
    if (s.empty()) return false;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

int parse_var(const Var& v) {
    int out = 0;
    ETE_CHECK(parse_int(v.value, out), "{} = '{}': expected a non-negative integer", v.name,
              v.value);
    return out;
}

// Entry `node` of a Slurm per-node count list: comma-separated entries, each "N" or "N(xR)"
// (N tasks on each of R nodes). The whole list is checked, not only up to `node`.
int slurm_node_count(const Var& v, int node) {
    auto malformed = [&] {
        throw_error(fmt::format("{} = '{}': expected per-node counts like 4, 4,2 or 2(x3),1",
                                v.name, v.value));
    };
    std::string_view s = v.value;
    long long nodes = 0;  // nodes covered by the entries so far
    int found = -1;
    for (bool last = false; !last;) {
        size_t comma = s.find(',');
        last = comma == std::string_view::npos;
        std::string_view entry = s.substr(0, comma);
        if (!last) s.remove_prefix(comma + 1);
        int count = 0, repeat = 1;
        size_t paren = entry.find("(x");
        if (!parse_int(entry.substr(0, paren), count)) malformed();
        if (paren != std::string_view::npos) {
            std::string_view rep = entry.substr(paren + 2);
            if (rep.empty() || rep.back() != ')') malformed();
            if (!parse_int(rep.substr(0, rep.size() - 1), repeat) || repeat < 1) malformed();
        }
        if (found < 0 && node < nodes + repeat) found = count;
        nodes += repeat;
    }
    ETE_CHECK(found >= 0, "{} = '{}' lists {} node{} but SLURM_NODEID = {}", v.name, v.value, nodes,
              nodes == 1 ? "" : "s", node);
    return found;
}

int local_size_of(const GetenvFn& env, const LauncherVars& l, const Var& v) {
    if (!l.per_node_list) return parse_var(v);
    Var node = first_set(env, {"SLURM_NODEID"});
    return slurm_node_count(v, node ? parse_var(node) : 0);
}

LaunchInfo read_launcher(const GetenvFn& env, const LauncherVars& l, const Var& rank) {
    Var size = first_set(env, l.size);
    ETE_CHECK(size, "{} is set but {} is not: the launch environment is incomplete", rank.name,
              l.size[0]);
    LaunchInfo info;
    info.launcher = l.launcher;
    info.rank = parse_var(rank);
    info.world_size = parse_var(size);
    ETE_CHECK(info.world_size >= 1, "{} = {}: expected at least 1 rank", size.name,
              info.world_size);
    ETE_CHECK(info.rank < info.world_size, "{} = {} but {} = {}: expected a rank below the size",
              rank.name, info.rank, size.name, info.world_size);
    Var local_rank = first_set(env, l.local_rank);
    Var local_size = first_set(env, l.local_size);
    // Unknown placement: all ranks on one node, or blocks of local_size consecutive ranks.
    info.local_size = local_size ? local_size_of(env, l, local_size) : info.world_size;
    info.local_rank = local_rank ? parse_var(local_rank) : info.rank % std::max(info.local_size, 1);
    const char* ls_name = local_size ? local_size.name : size.name;
    ETE_CHECK(info.local_size >= 1 && info.local_size <= info.world_size,
              "{} = {}: expected a node-local size in [1, {}]", ls_name, info.local_size,
              info.world_size);
    ETE_CHECK(info.local_rank < info.local_size,
              "{} = {} but {} = {}: expected a local rank below the local size",
              local_rank ? local_rank.name : rank.name, info.local_rank, ls_name, info.local_size);
    return info;
}

const LauncherVars kLaunchers[] = {
    {"openmpi",
     "OMPI_COMM_WORLD_RANK",
     {"OMPI_COMM_WORLD_SIZE"},
     {"OMPI_COMM_WORLD_LOCAL_RANK"},
     {"OMPI_COMM_WORLD_LOCAL_SIZE"},
     false},
    {"pmi",
     "PMI_RANK",
     {"PMI_SIZE"},
     {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
     {"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"},
     false},
    {"slurm",
     "SLURM_PROCID",
     {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"},
     {"SLURM_LOCALID"},
     {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"},
     true},
    {"torchrun", "RANK", {"WORLD_SIZE"}, {"LOCAL_RANK"}, {"LOCAL_WORLD_SIZE"}, false},
};

}  // namespace

LaunchInfo detect_launch(const GetenvFn& env) {
    for (const LauncherVars& l : kLaunchers) {
        Var rank = first_set(env, {l.rank});
        if (!rank) continue;
        // RANK alone is too generic a name to mean torchrun.
        if (std::string_view(l.launcher) == "torchrun" && !env("WORLD_SIZE")) continue;
        return read_launcher(env, l, rank);
    }
    return LaunchInfo{};
}

LaunchInfo detect_launch() {
    return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

std::unique_ptr<Communicator> make_world(const LaunchInfo& info) {
    bool alone = info.world_size == 1 && (info.launcher == "none" || info.launcher == "torchrun");
    if (alone) return make_self_communicator();
    ETE_CHECK(info.launcher != "torchrun",
              "torchrun started {} ranks (RANK/WORLD_SIZE) but ETE's ranks communicate through "
              "MPI: start them with `mpirun -np {} ete ...`, `ete launch -n {} -- ...` or srun",
              info.world_size, info.world_size, info.world_size);
    auto world = mpi_world_communicator();
    ETE_CHECK(world->size() == info.world_size && world->rank() == info.rank,
              "MPI says rank {} of {} but the {} environment says rank {} of {}: start every rank "
              "with mpirun or srun (a batch script line without srun runs one process)",
              world->rank(), world->size(), info.launcher, info.rank, info.world_size);
    return world;
}

}  // namespace ete
