// tests/parallel/launch_env_test.cpp — launcher detection through a fake environment: each
// launcher's variables, precedence between launchers, Slurm's per-node count forms, and the
// one-line errors for malformed or inconsistent values.
#include "ete/parallel/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "test_util.h"

namespace ete {
namespace {

using Env = std::map<std::string, std::string>;

LaunchInfo detect(const Env& env) {
    return detect_launch([&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    });
}

std::string detect_error(const Env& env) {
    return error_of([&] { detect(env); });
}

void expect_info(const LaunchInfo& i, const char* launcher, int rank, int size, int local_rank,
                 int local_size) {
    EXPECT_EQ(i.launcher, launcher);
    EXPECT_EQ(i.rank, rank) << launcher;
    EXPECT_EQ(i.world_size, size) << launcher;
    EXPECT_EQ(i.local_rank, local_rank) << launcher;
    EXPECT_EQ(i.local_size, local_size) << launcher;
}

TEST(LaunchEnv, NoneWhenNothingSet) {
    expect_info(detect({}), "none", 0, 1, 0, 1);
    // RANK alone is a generic name, not a torchrun launch.
    expect_info(detect({{"RANK", "3"}}), "none", 0, 1, 0, 1);
}

TEST(LaunchEnv, OpenMpi) {
    expect_info(detect({{"OMPI_COMM_WORLD_RANK", "5"},
                        {"OMPI_COMM_WORLD_SIZE", "8"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}),
                "openmpi", 5, 8, 1, 4);
}

TEST(LaunchEnv, Pmi) {
    expect_info(detect({{"PMI_RANK", "2"},
                        {"PMI_SIZE", "4"},
                        {"MPI_LOCALRANKID", "0"},
                        {"MPI_LOCALNRANKS", "2"}}),
                "pmi", 2, 4, 0, 2);
    // The PMI_LOCAL_* spellings when Hydra's MPI_LOCAL* are absent.
    expect_info(detect({{"PMI_RANK", "3"},
                        {"PMI_SIZE", "4"},
                        {"PMI_LOCAL_RANK", "1"},
                        {"PMI_LOCAL_SIZE", "2"}}),
                "pmi", 3, 4, 1, 2);
}

TEST(LaunchEnv, Slurm) {
    expect_info(detect({{"SLURM_PROCID", "3"},
                        {"SLURM_NTASKS", "4"},
                        {"SLURM_LOCALID", "1"},
                        {"SLURM_NTASKS_PER_NODE", "2"}}),
                "slurm", 3, 4, 1, 2);
    // A step's own counts win over the allocation's (srun -n 2 inside an 8-task allocation).
    expect_info(detect({{"SLURM_PROCID", "1"},
                        {"SLURM_NTASKS", "8"},
                        {"SLURM_STEP_NUM_TASKS", "2"},
                        {"SLURM_LOCALID", "1"},
                        {"SLURM_TASKS_PER_NODE", "8"},
                        {"SLURM_STEP_TASKS_PER_NODE", "2"}}),
                "slurm", 1, 2, 1, 2);
}

// "N(xR)" repeats N for R nodes; the entry of SLURM_NODEID is this node's local size.
TEST(LaunchEnv, SlurmPerNodeForms) {
    auto local_size = [](const std::string& per_node, const std::string& node_id) {
        Env env = {{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "16"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_TASKS_PER_NODE", per_node}};
        if (!node_id.empty()) env["SLURM_NODEID"] = node_id;
        return detect(env).local_size;
    };
    EXPECT_EQ(local_size("4", ""), 4);
    EXPECT_EQ(local_size("4,2", "0"), 4);
    EXPECT_EQ(local_size("4,2", "1"), 2);
    EXPECT_EQ(local_size("2(x3)", "2"), 2);
    EXPECT_EQ(local_size("2(x3),1", "2"), 2);
    EXPECT_EQ(local_size("2(x3),1", "3"), 1);
    EXPECT_EQ(local_size("5,2(x3),1", "0"), 5);
    EXPECT_EQ(local_size("5,2(x3),1", "3"), 2);
    EXPECT_EQ(local_size("5,2(x3),1", "4"), 1);
    EXPECT_EQ(local_size("3(x2)", ""), 3);  // no SLURM_NODEID: node 0
}

TEST(LaunchEnv, SlurmPerNodeErrors) {
    Env base = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}};
    auto err = [&](const std::string& per_node, const char* node_id = "0") {
        Env env = base;
        env["SLURM_TASKS_PER_NODE"] = per_node;
        env["SLURM_NODEID"] = node_id;
        return detect_error(env);
    };
    const std::string expect_forms = ": expected per-node counts like 4, 4,2 or 2(x3),1";
    EXPECT_EQ(err("2(x"), "SLURM_TASKS_PER_NODE = '2(x'" + expect_forms);
    EXPECT_EQ(err("2(x3"), "SLURM_TASKS_PER_NODE = '2(x3'" + expect_forms);
    EXPECT_EQ(err("2(x0)"), "SLURM_TASKS_PER_NODE = '2(x0)'" + expect_forms);
    EXPECT_EQ(err("4,,2"), "SLURM_TASKS_PER_NODE = '4,,2'" + expect_forms);
    EXPECT_EQ(err("four"), "SLURM_TASKS_PER_NODE = 'four'" + expect_forms);
    EXPECT_EQ(err("2(x3),1", "4"),
              "SLURM_TASKS_PER_NODE = '2(x3),1' lists 4 nodes but "
              "SLURM_NODEID = 4");
}

TEST(LaunchEnv, TorchRun) {
    expect_info(
        detect(
            {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}),
        "torchrun", 1, 2, 1, 2);
}

// Open MPI, then PMI, then Slurm, then torchrun: mpirun inside a Slurm job is an Open MPI launch.
TEST(LaunchEnv, Precedence) {
    Env all = {{"OMPI_COMM_WORLD_RANK", "1"},
               {"OMPI_COMM_WORLD_SIZE", "2"},
               {"PMI_RANK", "2"},
               {"PMI_SIZE", "3"},
               {"SLURM_PROCID", "3"},
               {"SLURM_NTASKS", "4"},
               {"RANK", "4"},
               {"WORLD_SIZE", "5"}};
    EXPECT_EQ(detect(all).launcher, "openmpi");
    EXPECT_EQ(detect(all).rank, 1);
    all.erase("OMPI_COMM_WORLD_RANK");
    EXPECT_EQ(detect(all).launcher, "pmi");
    EXPECT_EQ(detect(all).rank, 2);
    all.erase("PMI_RANK");
    EXPECT_EQ(detect(all).launcher, "slurm");
    EXPECT_EQ(detect(all).rank, 3);
    all.erase("SLURM_PROCID");
    EXPECT_EQ(detect(all).launcher, "torchrun");
    EXPECT_EQ(detect(all).rank, 4);
}

// Without node-local variables every rank is assumed to share one node.
TEST(LaunchEnv, MissingLocalMeansOneNode) {
    expect_info(detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}}), "openmpi",
                2, 3, 2, 3);
    // Local size known, local rank not: block placement (rank 5 of 2-rank nodes is local 1).
    expect_info(detect({{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"PMI_LOCAL_SIZE", "2"}}), "pmi", 5,
                6, 1, 2);
}

TEST(LaunchEnv, MalformedValues) {
    const char* kExpect = ": expected a non-negative integer";
    for (const char* bad : {"", "abc", "1x", "+1", "-1", " 1", "1 ", "0x10", "99999999999"}) {
        EXPECT_EQ(detect_error({{"OMPI_COMM_WORLD_RANK", bad}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                  std::string("OMPI_COMM_WORLD_RANK = '") + bad + "'" + kExpect)
            << "'" << bad << "'";
    }
    EXPECT_EQ(detect_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "two"}}),
              std::string("PMI_SIZE = 'two'") + kExpect);
    EXPECT_EQ(detect_error({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "x"}}),
              std::string("SLURM_LOCALID = 'x'") + kExpect);
    EXPECT_EQ(detect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2.0"}}),
              std::string("LOCAL_WORLD_SIZE = '2.0'") + kExpect);
    EXPECT_EQ(detect_error({{"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "2"},
                            {"SLURM_NODEID", "n1"},
                            {"SLURM_TASKS_PER_NODE", "1(x2)"}}),
              std::string("SLURM_NODEID = 'n1'") + kExpect);
}

TEST(LaunchEnv, InconsistentValues) {
    EXPECT_EQ(detect_error({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
              "OMPI_COMM_WORLD_RANK = 4 but OMPI_COMM_WORLD_SIZE = 4: expected a rank below the "
              "size");
    EXPECT_EQ(detect_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}),
              "PMI_SIZE = 0: expected at least 1 rank");
    EXPECT_EQ(detect_error({{"OMPI_COMM_WORLD_RANK", "0"}}),
              "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not: the launch "
              "environment is incomplete");
    EXPECT_EQ(
        detect_error(
            {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}),
        "LOCAL_RANK = 2 but LOCAL_WORLD_SIZE = 2: expected a local rank below the local "
        "size");
    EXPECT_EQ(detect_error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}}),
              "LOCAL_WORLD_SIZE = 8: expected a node-local size in [1, 4]");
}

TEST(LaunchEnv, MakeWorldAloneIsSelf) {
    auto world = make_world(LaunchInfo{});
    EXPECT_EQ(world->transport(), "self");
    EXPECT_EQ(world->size(), 1);
    LaunchInfo torch1;
    torch1.launcher = "torchrun";
    EXPECT_EQ(make_world(torch1)->transport(), "self");
}

TEST(LaunchEnv, MakeWorldRejectsTorchRun) {
    LaunchInfo info;
    info.launcher = "torchrun";
    info.rank = 1;
    info.world_size = 4;
    info.local_rank = 1;
    info.local_size = 4;
    EXPECT_EQ(error_of([&] { make_world(info); }),
              "torchrun started 4 ranks (RANK/WORLD_SIZE) but ETE's ranks communicate through "
              "MPI: start them with `mpirun -np 4 ete ...`, `ete launch -n 4 -- ...` or srun");
}

}  // namespace
}  // namespace ete
