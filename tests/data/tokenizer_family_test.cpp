// tests/data/tokenizer_family_test.cpp — every family's real tokenizer.json against Hugging Face's
// own `tokenizers` 0.23.2: the ids of the shared text set (torture cases included) with and
// without special tokens, the decoded text, a slice of each vocabulary (each token's decoded
// text encoded again), and the ids of real chat templates' renders (chat_ids.json). Goldens:
// tools/gen_hf_tokenizer_goldens.mjs, files in tests/golden/tokenizers/families/ (the
// tokenizer.json files are stored xz-compressed).
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/tokenizer.h"
#include "test_build.h"

namespace ete {
namespace tokenizer_family_test {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

const std::string kDir = ETE_SOURCE_DIR "/tests/golden/tokenizers/families/";

// Decompresses <family>.tokenizer.json.xz into a temporary file (xz is in every Debian) and loads
// it.
Tokenizer load_family(const std::string& family) {
    const fs::path tmp =
        fs::temp_directory_path() / fmt::format("ete_family_{}_{}.json", family, ::getpid());
    const std::string cmd =
        fmt::format("xz -dc '{}{}.tokenizer.json.xz' > '{}'", kDir, family, tmp.string());
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Tokenizer t = Tokenizer::load(tmp.string());
    fs::remove(tmp);
    return t;
}

std::string show(const Ids& ids) {
    std::string s;
    for (size_t k = 0; k < ids.size() && k < 40; ++k) s += fmt::format("{} ", ids[k]);
    return ids.size() > 40 ? s + "..." : s;
}

// Large texts encode in parallel: cut at line starts where the pipeline allows it, otherwise
// pre-tokenized whole and the pieces encoded by all threads. The cases that hold no added token
// (so that the text is one stretch), repeated past the size where that starts: one and two
// threads must give the same ids (HF's ids for such texts: bench/tokenizer_bench.sh).
void expect_parallel_equals_serial(const Tokenizer& t, const json& golden,
                                   const std::string& family) {
    std::string unit;
    for (const json& c : golden["cases"]) {
        const std::string text = c["text"];
        bool plain = true;
        for (const AddedToken& a : t.added_tokens())
            plain = plain && text.find(a.content) == std::string::npos;
        if (plain) unit += text + "\n";
    }
    ASSERT_GT(unit.size(), 1000u) << family;
    std::string big;
    while (big.size() < 540 * 1024) big += unit;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const Ids serial = t.encode(big);
    omp_set_num_threads(2);
    const Ids parallel = t.encode(big);
    omp_set_num_threads(saved);
    EXPECT_EQ(parallel.size(), serial.size()) << family;
    EXPECT_TRUE(parallel == serial) << family << ": the parallel encode differs";
}

// The ids of the real chat templates' renders (tests/data/jinja/real_templates.json, rendered by
// Jinja2) that Hugging Face's apply_chat_template(tokenize=True) gives with this family's
// tokenizer: encode(rendered, add_special_tokens=false), what `ete tokenizer chat --ids` prints.
// Goldens: tools/gen_hf_chat_ids.mjs (tokenizers 0.23.2). Returns how many cases were checked.
size_t expect_chat_ids(const Tokenizer& t, const std::string& family) {
    static const json rendered =
        json::parse(read_file(ETE_SOURCE_DIR "/tests/data/jinja/real_templates.json"));
    static const json golden =
        json::parse(read_file(ETE_SOURCE_DIR "/tests/data/jinja/chat_ids.json"));
    size_t checked = 0;
    for (const json& g : golden["cases"]) {
        if (g["tokenizer"] != family) continue;
        const json& c = rendered["cases"][g["case"].get<size_t>()];
        EXPECT_EQ(c["template"], g["template"]) << "chat_ids.json is older than the renders";
        const Ids want = g["ids"];
        const Ids ids = t.encode(c["expected"].get<std::string>());
        EXPECT_TRUE(ids == want) << family << ": template " << c["template"] << ", conversation "
                                 << c["conversation"] << ", case " << g["case"]
                                 << "\n  ete: " << show(ids) << "\n  hf:  " << show(want);
        ++checked;
    }
    return checked;
}

class Family : public ::testing::TestWithParam<std::string> {};

TEST_P(Family, MatchesHuggingFaceIdForId) {
    const std::string family = GetParam();
    const json golden = json::parse(read_file(kDir + family + ".golden.json"));
    const Tokenizer t = load_family(family);
    size_t checked = 0, bad = 0;
    auto report = [&](bool ok, const std::string& what) {
        ++checked;
        if (ok) return;
        if (++bad <= 8) ADD_FAILURE() << family << ": " << what;
    };
    for (const json& c : golden["cases"]) {
        const std::string text = c["text"], name = c["name"];
        const Ids want = c["ids"], want_special = c["ids_special"];
        const Ids ids = t.encode(text), special = t.encode(text, true);
        report(ids == want,
               fmt::format("case '{}' ids\n  ete: {}\n  hf:  {}", name, show(ids), show(want)));
        report(special == want_special,
               fmt::format("case '{}' ids with special tokens\n  ete: {}\n  hf:  {}", name,
                           show(special), show(want_special)));
        const std::string decoded = t.decode(want);
        report(decoded == c["decoded"].get<std::string>(),
               fmt::format("case '{}' decode: '{}'", name, decoded));
        const std::string skipped = t.decode(want_special, true);
        report(skipped == c["decoded_special_skipped"].get<std::string>(),
               fmt::format("case '{}' decode skipping specials: '{}'", name, skipped));
    }
    for (const json& v : golden["vocab_slice"]) {
        if (v.contains("error") || v.value("hole", false)) continue;
        const Ids want = v["ids"];
        const Ids ids = t.encode(v["text"].get<std::string>());
        report(ids == want,
               fmt::format("vocab id {} ('{}')\n  ete: {}\n  hf:  {}", v["id"].get<int>(),
                           v["text"].get<std::string>(), show(ids), show(want)));
    }
    EXPECT_EQ(bad, 0u) << family << ": " << bad << " of " << checked << " checks differ";
    EXPECT_GT(checked, 1000u);
    // Every family with a chat template among the renders (gpt2, llama2 and gpt4o have none).
    const size_t chats = expect_chat_ids(t, family);
    const bool has_template = family != "gpt2" && family != "llama2" && family != "gpt4o";
    EXPECT_EQ(chats > 0, has_template) << family << ": " << chats << " rendered chats checked";
    // Under the sanitizers (where each check takes seconds), one family per parallel path: piece
    // ranges of a SentencePiece and of a byte-level file, line chunks after NFC and with o200k's
    // pattern. The plain suite checks all.
    const bool parallel_check = !testing::under_sanitizers() || family == "llama2" ||
                                family == "deepseek_v3" || family == "qwen3" || family == "gpt4o";
    if (parallel_check) expect_parallel_equals_serial(t, golden, family);
}

INSTANTIATE_TEST_SUITE_P(Hf, Family,
                         ::testing::Values("gpt2", "llama2", "mistral_nemo", "llama3", "llama3_1",
                                           "llama3_2", "qwen2_5", "qwen3", "gemma2", "gemma3",
                                           "gpt4o", "gpt4", "deepseek_v3"),
                         [](const auto& info) { return info.param; });

}  // namespace tokenizer_family_test
}  // namespace ete
