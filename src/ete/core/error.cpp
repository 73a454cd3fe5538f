// ete/core/error.cpp
#include "ete/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace ete {

void throw_error(const std::string& msg) {
    throw Error(msg);
}

void assert_fail(const char* expr, const char* file, int line) {
    std::fprintf(stderr, "ete: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    std::abort();
}

}  // namespace ete
