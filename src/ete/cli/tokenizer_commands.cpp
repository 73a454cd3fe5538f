// ete/cli/tokenizer_commands.cpp — `ete tokenizer train|encode|decode` and `ete tokenize`.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "ete/cli/commands.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/corpus.h"
#include "ete/data/tokenizer.h"
#include "ete/data/utf8.h"

namespace ete {
namespace {

std::string read_stdin() {
    return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
}

int32_t parse_id(const std::string& s, const Tokenizer& t) {
    size_t used = 0;
    long long v = -1;
    try {
        v = std::stoll(s, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    ETE_CHECK(used == s.size() && v >= 0 && v < t.vocab_size(),
              "token id '{}': expected an integer in [0, {})", s, t.vocab_size());
    return static_cast<int32_t>(v);
}

}  // namespace

int cmd_tokenizer_train(const TokenizerTrainArgs& a) {
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer tok = Tokenizer::train_files(a.inputs, a.vocab_size, {"<|endoftext|>"});
    tok.save(a.out);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log_info("tokenizer: {} tokens ({} merges) trained in {:.1f}s -> {}", tok.vocab_size(),
             tok.num_merges(), s, a.out);
    return 0;
}

int cmd_tokenize(const TokenizeArgs& a) {
    Tokenizer tok = Tokenizer::load(a.tokenizer);
    tokenize_text_file_to_shard(a.input, tok, a.out,
                                {a.append_eos, a.add_special_tokens, a.strict_utf8});
    return 0;  // it logs its own summary
}

int cmd_tokenizer_encode(const TokenizerCodecArgs& a) {
    ETE_CHECK(a.text.empty() != a.file.empty(),
              "tokenizer encode: give the text with --text or as a file (\"-\" for stdin), not "
              "both");
    const Tokenizer tok = Tokenizer::load(a.tokenizer);
    const std::string text =
        !a.file.empty() ? (a.file == "-" ? read_stdin() : read_file(a.file, UINT64_MAX)) : a.text;
    check_utf8_input(text, a.file.empty() ? "--text" : a.file, a.strict_utf8);
    const std::vector<int32_t> ids = tok.encode(text, a.add_special_tokens);
    if (a.json) {
        nlohmann::json tokens = nlohmann::json::array();
        for (int32_t id : ids) tokens.push_back(tok.id_to_token(id));
        nlohmann::json out = {{"ids", ids}, {"tokens", tokens}};
        std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    }
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += fmt::format("{}{}", k ? " " : "", ids[k]);
    std::puts(line.c_str());
    return 0;
}

int cmd_tokenizer_decode(const TokenizerCodecArgs& a) {
    const Tokenizer tok = Tokenizer::load(a.tokenizer);
    std::vector<std::string> words = a.ids;
    if (words.empty()) {
        const std::string in = read_stdin();
        size_t p = 0;
        while (true) {
            p = in.find_first_not_of(" \t\r\n,", p);
            if (p == std::string::npos) break;
            const size_t e = std::min(in.find_first_of(" \t\r\n,", p), in.size());
            words.push_back(in.substr(p, e - p));
            p = e;
        }
    }
    std::vector<int32_t> ids;
    for (const std::string& w : words) ids.push_back(parse_id(w, tok));
    const std::string text = tok.decode(ids, a.skip_special_tokens);
    if (a.json) {
        std::puts(nlohmann::json({{"text", text}}).dump().c_str());
    } else {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
    }
    return 0;
}

}  // namespace ete
