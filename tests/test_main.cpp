// tests/test_main.cpp — gtest main that applies the OpenBLAS core-type fix like the ete binary.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ete/backend/cpu/openblas_util.h"

int main(int argc, char** argv) {
    ete::cpu::openblas_fix_coretype(argv);
    // The MPI jobs the tests start (every `ete launch` and mpirun below) run on this one node:
    // Open MPI's ob1 messaging layer (shared memory, TCP), the one it ends up with here, without
    // probing its cm layer and the PSM/PSM2 transports under it first, which made MPI_Init 0.30 s
    // instead of 0.08 s (a 2-rank tiny training job 0.72 -> 0.46 s; several hundred such jobs a
    // pass). A value the caller set is kept.
    setenv("OMPI_MCA_pml", "ob1", 0);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
