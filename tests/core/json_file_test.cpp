// tests/core/json_file_test.cpp — JSON a user hands ETE: a nesting limit before anything deep is
// built, and errors that name the file.
#include "ete/core/json_file.h"

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace ete {
namespace {

std::string nested(int depth) {
    return std::string(size_t(depth), '[') + "1" + std::string(size_t(depth), ']');
}

TEST(JsonFile, NestingBeyondTheLimitIsRefused) {
    EXPECT_EQ(parse_json(nested(64), "x.json").dump(), nested(64));
    const std::string e = error_of([] { parse_json(nested(65), "x.json"); });
    EXPECT_EQ(e, "x.json: invalid JSON (arrays and objects nested deeper than 64 levels)");
    // A million levels: refused at level 65, no stack or memory blow-up.
    const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
    EXPECT_NE(error_of([&] { parse_json(deep, "deep.json"); }).find("deeper than 64"),
              std::string::npos);
    const std::string objects = R"({"a":{"b":{"c":[{"d":1}]}}})";
    EXPECT_EQ(parse_json(objects, "o.json", 5).dump(), objects);
    EXPECT_NE(error_of([&] { parse_json(objects, "o.json", 4); }).find("deeper than 4"),
              std::string::npos);
}

TEST(JsonFile, MalformedTextNamesTheFile) {
    const std::string e = error_of([] { parse_json(R"({"a": [1, 2)", "cfg/config.json"); });
    EXPECT_EQ(e.rfind("cfg/config.json: invalid JSON (", 0), 0u) << e;
    EXPECT_NE(error_of([] {
                  read_json_file("/nonexistent/ete/config.json");
              }).find("/nonexistent/ete/config.json"),
              std::string::npos);
}

}  // namespace
}  // namespace ete
