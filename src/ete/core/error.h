// ete/core/error.h — the two kinds of checks (STYLE.md habit 9).
//
// User errors (bad config, bad file, bad CLI) throw ete::Error with a one-line message that names
// the op/key/file and what was expected; only the CLI turns them into exit codes. Internal
// invariants use ETE_ASSERT, which aborts with file:line — a failed assert is a bug in ETE.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ete {

class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// An error of a job's configuration that every rank meets alike, before any rank talks to another
// (train/job_check.h): the first rank of each node reports it and the job ends without aborting
// MPI.
class ConfigError : public Error {
  public:
    using Error::Error;
};

[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void assert_fail(const char* expr, const char* file, int line);

}  // namespace ete

// ETE_CHECK(cond, "fmt {}", args...): throw ete::Error when a user-facing condition fails.
#define ETE_CHECK(cond, ...)                                         \
    do {                                                             \
        if (!(cond)) ::ete::throw_error(::fmt::format(__VA_ARGS__)); \
    } while (0)

// ETE_ASSERT(cond): internal invariant; aborts with the expression and file:line.
#define ETE_ASSERT(cond)                                            \
    do {                                                            \
        if (!(cond)) ::ete::assert_fail(#cond, __FILE__, __LINE__); \
    } while (0)
