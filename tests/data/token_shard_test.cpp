// tests/data/token_shard_test.cpp — shard format round trips, header bytes, rejection of bad
// files, crash-safe writing, and text-file tokenization into a shard.
#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "ete/core/error.h"
#include "ete/data/corpus.h"
#include "ete/data/token_shard.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
    fs::path p =
        fs::temp_directory_path() / ("ete_shard_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
}

std::string read_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary) << s;
}

std::vector<int32_t> random_ids(size_t n, int32_t below, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = static_cast<int32_t>(g() % static_cast<uint64_t>(below));
    return v;
}

std::vector<int32_t> read_all(const TokenShard& s) {
    std::vector<int32_t> v(s.size());
    s.read(0, s.size(), v.data());
    return v;
}

TEST(TokenShard, U16RoundTripAndExactHeaderBytes) {
    fs::path dir = temp_dir("u16");
    const std::string path = (dir / "a.tok").string();
    std::vector<int32_t> ids = random_ids(1001, 50257, 1);
    ids[0] = 50256;
    write_token_shard(path, ids, 50257);
    const std::string raw = read_bytes(path);
    ASSERT_EQ(raw.size(), 24u + 2u * 1001u);
    EXPECT_EQ(raw.substr(0, 8), "ETETOK01");
    uint32_t bpt, vocab;
    uint64_t count;
    std::memcpy(&bpt, raw.data() + 8, 4);
    std::memcpy(&vocab, raw.data() + 12, 4);
    std::memcpy(&count, raw.data() + 16, 8);
    EXPECT_EQ(bpt, 2u);
    EXPECT_EQ(vocab, 50257u);
    EXPECT_EQ(count, 1001u);
    EXPECT_EQ(static_cast<unsigned char>(raw[24]), 50256 & 0xFF);  // little-endian ids
    EXPECT_EQ(static_cast<unsigned char>(raw[25]), 50256 >> 8);

    TokenShard s(path);
    EXPECT_EQ(s.size(), 1001u);
    EXPECT_EQ(s.bytes_per_token(), 2u);
    EXPECT_EQ(s.vocab_size(), 50257u);
    EXPECT_EQ(read_all(s), ids);
    EXPECT_EQ(s.at(0), 50256);
    EXPECT_EQ(s.at(777), ids[777]);  // odd index: an unaligned position in the mapping
    fs::remove_all(dir);
}

TEST(TokenShard, U32WhenVocabAbove65536OrUnknown) {
    fs::path dir = temp_dir("u32");
    std::vector<int32_t> ids = random_ids(333, 128256, 2);
    ids[5] = 128255;
    write_token_shard((dir / "big.tok").string(), ids, 128256);
    TokenShard big((dir / "big.tok").string());
    EXPECT_EQ(big.bytes_per_token(), 4u);
    EXPECT_EQ(read_all(big), ids);
    // 65536 ids still fit u16; unknown vocab (0) uses u32.
    write_token_shard((dir / "edge.tok").string(), std::vector<int32_t>{65535, 0}, 65536);
    EXPECT_EQ(TokenShard((dir / "edge.tok").string()).bytes_per_token(), 2u);
    EXPECT_EQ(TokenShard((dir / "edge.tok").string()).at(0), 65535);
    write_token_shard((dir / "unk.tok").string(), std::vector<int32_t>{70000, 3}, 0);
    TokenShard unk((dir / "unk.tok").string());
    EXPECT_EQ(unk.bytes_per_token(), 4u);
    EXPECT_EQ(unk.at(0), 70000);
    fs::remove_all(dir);
}

TEST(TokenShard, StreamingWriterEqualsOneShotAndLeavesNothingUncommitted) {
    fs::path dir = temp_dir("stream");
    std::vector<int32_t> ids = random_ids(200000, 4096, 3);  // spans several internal blocks
    {
        TokenShardWriter w((dir / "s.tok").string(), 4096);
        w.append(std::span<const int32_t>(ids).subspan(0, 70000));
        w.append(std::span<const int32_t>(ids).subspan(70000));
        EXPECT_FALSE(fs::exists(dir / "s.tok"));  // not visible before commit
        w.commit();
    }
    write_token_shard((dir / "o.tok").string(), ids, 4096);
    EXPECT_EQ(read_bytes(dir / "s.tok"), read_bytes(dir / "o.tok"));
    {
        TokenShardWriter w((dir / "abandoned.tok").string(), 4096);
        w.append(ids);
    }  // destroyed without commit, like a crash mid-write
    EXPECT_FALSE(fs::exists(dir / "abandoned.tok"));
    size_t files = 0;
    for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) ++files;
    EXPECT_EQ(files, 2u);  // no temporary left behind
    fs::remove_all(dir);
}

TEST(TokenShard, WriterRejectsIdsOutsideTheVocab) {
    fs::path dir = temp_dir("bad_ids");
    const std::string path = (dir / "x.tok").string();
    std::string e = error_of([&] { write_token_shard(path, std::vector<int32_t>{1, 100}, 100); });
    EXPECT_NE(e.find("token 1 has id 100"), std::string::npos) << e;
    e = error_of([&] { write_token_shard(path, std::vector<int32_t>{-1}, 0); });
    EXPECT_NE(e.find("id -1"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(path));
    fs::remove_all(dir);
}

TEST(TokenShard, ReaderRejectsBadFilesNamingFileAndRule) {
    fs::path dir = temp_dir("reject");
    const std::string good = (dir / "good.tok").string();
    write_token_shard(good, std::vector<int32_t>{1, 2, 3, 4}, 10);
    const std::string raw = read_bytes(good);
    auto check = [&](const std::string& name, const std::string& bytes, const std::string& want) {
        const fs::path p = dir / name;
        write_bytes(p, bytes);
        std::string e = error_of([&] { TokenShard s(p.string()); });
        EXPECT_NE(e.find(p.string()), std::string::npos) << e;
        EXPECT_NE(e.find(want), std::string::npos) << e;
    };
    check("magic.tok", "ETETOK02" + raw.substr(8), "bad magic");
    check("trunc.tok", raw.substr(0, raw.size() - 1), "file size 31 != 24 + count 4 * 2");
    check("trail.tok", raw + "x", "trailing bytes");
    std::string bpt3 = raw;
    bpt3[8] = 3;
    check("bpt.tok", bpt3, "3 bytes per token, expected 2 or 4");
    check("short.tok", raw.substr(0, 10), "at least 24 bytes");
    std::string huge = raw;  // count so large that count * 2 overflows 64 bits
    std::memset(huge.data() + 16, 0xFF, 8);
    check("huge.tok", huge, "file size");
    std::string e = error_of([&] { TokenShard s((dir / "missing.tok").string()); });
    EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
    // An id at or above the recorded vocab size is caught on read.
    std::string id_bad = raw;
    id_bad[24 + 2 * 2] = 10;
    write_bytes(dir / "id.tok", id_bad);
    TokenShard s((dir / "id.tok").string());
    EXPECT_EQ(s.at(1), 2);
    e = error_of([&] { s.at(2); });
    EXPECT_NE(e.find("token 2 has id 10, expected below 10"), std::string::npos) << e;
    e = error_of([&] { s.at(4); });
    EXPECT_NE(e.find("tokens [4, 5) requested"), std::string::npos) << e;
    fs::remove_all(dir);
}

TEST(TokenShard, TokenizeTextFileMatchesEncodePlusEos) {
    fs::path dir = temp_dir("corpus");
    std::string text;
    for (int i = 0; i < 200; ++i)
        text += "In the beginning was the word, line " + std::to_string(i) + ".\n";
    write_bytes(dir / "c.txt", text);
    Tokenizer tok = Tokenizer::train(text, 300, {"<|endoftext|>"});
    TokenizeStats st = tokenize_text_file_to_shard((dir / "c.txt").string(), tok,
                                                   (dir / "c.tok").string(), {.append_eos = true});
    std::vector<int32_t> expect = tok.encode(text);
    expect.push_back(tok.eos_id());
    TokenShard s((dir / "c.tok").string());
    EXPECT_EQ(read_all(s), expect);
    EXPECT_EQ(st.tokens, expect.size());
    EXPECT_EQ(st.bytes, text.size());
    EXPECT_EQ(s.vocab_size(), 300u);
    Tokenizer no_eos = Tokenizer::train(text, 300);
    std::string e = error_of([&] {
        tokenize_text_file_to_shard((dir / "c.txt").string(), no_eos, (dir / "d.tok").string(),
                                    {.append_eos = true});
    });
    EXPECT_NE(e.find("end-of-text"), std::string::npos) << e;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace ete
