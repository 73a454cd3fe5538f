// tests/test_build.h — what a test binary knows of the build it was linked in.
//
// Both answers come from test_main.cpp, which every build compiles itself: the test objects are
// otherwise the same in every build, and run.sh's sanitizer build links the Release build's
// (ETE_TEST_OBJECTS_FROM, tests/CMakeLists.txt) instead of compiling them again, so nothing in a
// test file may depend on the build's directory or flags at compile time.
#pragma once

#include <string>

namespace ete::testing {

// The build directory of this test binary (where its `ete` is).
const std::string& binary_dir();

// True in a sanitizer build (ETE_SANITIZE): the engine runs under AddressSanitizer and
// UndefinedBehaviorSanitizer, several times slower, so long numerical loops check fewer cases.
bool under_sanitizers();

}  // namespace ete::testing
