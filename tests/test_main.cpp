// tests/test_main.cpp — gtest main that applies the OpenBLAS core-type fix like the ete binary.
#include <gtest/gtest.h>

#include "ete/backend/cpu/openblas_util.h"

int main(int argc, char** argv) {
    ete::cpu::openblas_fix_coretype(argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
