// tests/cli/readme_test.cpp — the README's command list against the binary: every subcommand
// `ete --help` (and each group's --help) lists has a line in the README's block, every line names
// a subcommand that exists, and every flag a line shows is one that subcommand's --help accepts.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

#include "ete/core/file_util.h"
#include "shell.h"

namespace ete {
namespace {

// The names under "Subcommands:" in a --help text.
std::set<std::string> subcommands(const std::string& help) {
    std::set<std::string> out;
    std::istringstream in(help);
    bool listing = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("Subcommands:", 0) == 0) {
            listing = true;
            continue;
        }
        if (!listing) continue;
        if (line.empty() || line[0] != ' ') break;
        std::istringstream words(line);
        std::string name;
        words >> name;
        out.insert(name);
    }
    return out;
}

// `ete ARGS --help` (ARGS: "" for the top level, "eval", "tokenizer train", ...).
std::string help_of(const std::string& args) {
    const ShellResult r = run_shell(ete_cmd(args + " --help 2>&1"));
    EXPECT_EQ(r.code, 0) << args;
    return r.out;
}

// The lines of the README's "The `ete` binary" code block that start with "ete ".
std::vector<std::string> readme_commands() {
    const std::string readme = read_file(std::string(ETE_SOURCE_DIR) + "/README.md");
    const size_t at = readme.find("## The `ete` binary");
    EXPECT_NE(at, std::string::npos);
    const size_t open = readme.find("```", at), close = readme.find("```", open + 3);
    std::istringstream in(readme.substr(open + 3, close - open - 3));
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);)
        if (line.rfind("ete ", 0) == 0) lines.push_back(line.substr(0, line.find('#')));
    return lines;
}

TEST(Readme, CommandListMatchesTheBinary) {
    const std::vector<std::string> lines = readme_commands();
    ASSERT_GE(lines.size(), 10u);
    std::set<std::string> documented;  // "eval", "tokenizer train", ...
    for (const std::string& line : lines) {
        std::istringstream words(line.substr(4));
        std::string cmd;
        words >> cmd;
        const std::set<std::string> nested = subcommands(help_of(cmd));
        std::string sub;
        if (!nested.empty()) {
            words >> sub;
            ASSERT_TRUE(nested.count(sub))
                << "README: 'ete " << cmd << " " << sub << "' is not a subcommand of ete " << cmd;
            cmd += " " + sub;
        }
        documented.insert(cmd);
        // Every flag the line shows (before a launch's "--" separator) is accepted.
        const std::string help = help_of(cmd);
        const std::string shown = line.substr(0, line.find(" -- "));
        const std::regex flag("(^|[\\s\\[\\(|])(--[a-z0-9][a-z0-9-]*)");
        for (auto it = std::sregex_iterator(shown.begin(), shown.end(), flag);
             it != std::sregex_iterator(); ++it) {
            const std::string f = (*it)[2];
            EXPECT_NE(help.find(f), std::string::npos)
                << "README shows " << f << " for 'ete " << cmd << "', which its --help lacks";
        }
    }
    for (const std::string& cmd : subcommands(help_of(""))) {
        const std::set<std::string> nested = subcommands(help_of(cmd));
        if (nested.empty()) {
            EXPECT_TRUE(documented.count(cmd)) << "'ete " << cmd << "' has no README line";
            continue;
        }
        for (const std::string& sub : nested)
            EXPECT_TRUE(documented.count(cmd + " " + sub))
                << "'ete " << cmd << " " << sub << "' has no README line";
    }
}

}  // namespace
}  // namespace ete
