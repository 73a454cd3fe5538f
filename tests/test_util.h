// tests/test_util.h — small helpers shared by the test binaries.
#pragma once

#include <functional>
#include <string>

#include "ete/core/error.h"

namespace ete {

// The message of the ete::Error that f throws, or "<no error>" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace ete
