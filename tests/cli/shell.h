// tests/cli/shell.h — run a shell command (usually build/ete) and capture its stdout and exit code.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "test_build.h"

namespace ete {

struct ShellResult {
    int code;         // exit status, -1 when the command did not exit normally
    std::string out;  // what it wrote to stdout (redirect 2>&1 to capture stderr as well)
};

inline ShellResult run_shell(const std::string& cmd) {
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 512> buf{};
    while (p && fgets(buf.data(), int(buf.size()), p)) out += buf.data();
    int status = p ? pclose(p) : -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// build/ete with `args`.
inline std::string ete_cmd(const std::string& args) {
    return ::ete::testing::binary_dir() + "/ete " + args;
}

}  // namespace ete
