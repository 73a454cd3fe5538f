// tests/data/sft_test.cpp — SFT records to masked rows: the three record forms, templates, label
// masking, padding, truncation, malformed lines, split, deterministic order and resume.
//
// Most tests use a byte tokenizer (no merges): token id = byte value and eos = 256, so every
// expected row is written down from the rendered text alone.
#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "ete/core/error.h"
#include "ete/data/loader.h"
#include "ete/data/sft.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
constexpr int32_t kEos = 256;
constexpr int32_t kIgn = kSftIgnoreIndex;

const Tokenizer& byte_tokenizer() {
    static const Tokenizer t = Tokenizer::train("abc", 257, {"<|endoftext|>"});
    return t;
}

struct Row {
    std::vector<int32_t> in, tg;
};

// The row a byte tokenizer must give: `prompt` masked, `response` then eos trained, padded to T.
Row byte_row(const std::string& prompt, const std::string& response, int T, bool eos = true) {
    std::vector<int32_t> x;
    std::vector<bool> trained;
    for (char c : prompt) x.push_back(static_cast<unsigned char>(c)), trained.push_back(false);
    for (char c : response) x.push_back(static_cast<unsigned char>(c)), trained.push_back(true);
    if (eos) x.push_back(kEos), trained.push_back(true);
    Row r{std::vector<int32_t>(T, eos ? kEos : 0), std::vector<int32_t>(T, kIgn)};
    for (size_t j = 0; j < static_cast<size_t>(T); ++j) {
        if (j < x.size()) r.in[j] = x[j];
        if (j + 1 < x.size() && trained[j + 1]) r.tg[j] = x[j + 1];
    }
    return r;
}

class SftTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_sft_test_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string write(const std::string& text, const std::string& name = "d.jsonl") {
        const std::string path = (dir_ / name).string();
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }

    Row example(const SftDataset& d, uint64_t e) {
        Row r{std::vector<int32_t>(d.seq_len()), std::vector<int32_t>(d.seq_len())};
        d.fill_example(e, r.in.data(), r.tg.data());
        return r;
    }

    fs::path dir_;
};

TEST_F(SftTest, AlpacaWithInputMasksPromptAndTrainsResponseAndEos) {
    const std::string path = write(R"({"instruction": "Add", "input": "1 2", "output": "3"})"
                                   "\n");
    SftDataset d(path, byte_tokenizer(), 64, {}, 1, 0.0);
    ASSERT_EQ(d.num_examples(), 1u);
    const std::string prompt = "### Instruction:\nAdd\n\n### Input:\n1 2\n\n### Response:\n";
    ASSERT_EQ(prompt.size(), 52u);  // 17 + 5 + 11 + 5 + 14
    Row r = example(d, 0);
    // Hand-checked positions: 51 is the prompt's last '\n' and predicts '3'; 52 is '3' and
    // predicts eos; 53 is eos (nothing after it); 54.. are padding.
    EXPECT_EQ(r.in[0], '#');
    EXPECT_EQ(r.tg[0], kIgn);
    EXPECT_EQ(r.tg[50], kIgn);
    EXPECT_EQ(r.in[51], '\n');
    EXPECT_EQ(r.tg[51], '3');
    EXPECT_EQ(r.in[52], '3');
    EXPECT_EQ(r.tg[52], kEos);
    EXPECT_EQ(r.in[53], kEos);
    EXPECT_EQ(r.tg[53], kIgn);
    EXPECT_EQ(r.in[63], kEos);
    EXPECT_EQ(r.tg[63], kIgn);
    Row want = byte_row(prompt, "3", 64);
    EXPECT_EQ(r.in, want.in);
    EXPECT_EQ(r.tg, want.tg);
}

TEST_F(SftTest, AlpacaWithoutInputOmitsTheInputBlock) {
    const std::string path = write(R"({"instruction": "Hi", "output": "Yo"})"
                                   "\n"
                                   R"({"instruction": "Hi", "input": "", "output": "Yo"})"
                                   "\n");
    SftDataset d(path, byte_tokenizer(), 40, {}, 1, 0.0);
    ASSERT_EQ(d.num_examples(), 2u);
    Row want = byte_row("### Instruction:\nHi\n\n### Response:\n", "Yo", 40);
    for (uint64_t e = 0; e < 2; ++e) {
        Row r = example(d, e);
        EXPECT_EQ(r.in, want.in) << e;
        EXPECT_EQ(r.tg, want.tg) << e;
    }
}

TEST_F(SftTest, CustomTemplateIsFilledOnceWithoutRescanningData) {
    SftOptions opt;
    opt.prompt_template = "Q: {instruction} | {input}\nA: ";
    opt.prompt_template_no_input = "Q: {instruction}\nA: ";
    // The instruction contains "{input}": it must come out literally.
    const std::string path = write(R"({"instruction": "x{input}", "input": "y", "output": "z"})"
                                   "\n");
    SftDataset d(path, byte_tokenizer(), 24, opt, 1, 0.0);
    Row want = byte_row("Q: x{input} | y\nA: ", "z", 24);
    Row r = example(d, 0);
    EXPECT_EQ(r.in, want.in);
    EXPECT_EQ(r.tg, want.tg);
}

TEST_F(SftTest, PromptCompletionUsesThePromptAsIs) {
    const std::string path = write(R"({"prompt": "2+2=", "completion": "4"})"
                                   "\n");
    SftDataset d(path, byte_tokenizer(), 8, {}, 1, 0.0);
    Row r = example(d, 0);
    EXPECT_EQ(r.in, (std::vector<int32_t>{'2', '+', '2', '=', '4', kEos, kEos, kEos}));
    EXPECT_EQ(r.tg, (std::vector<int32_t>{kIgn, kIgn, kIgn, '4', kEos, kIgn, kIgn, kIgn}));
}

TEST_F(SftTest, ChatTrainsOnlyAssistantContents) {
    const std::string path = write(
        R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},)"
        R"( {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"},)"
        R"( {"role": "assistant", "content": "B"}]})"
        "\n");
    SftDataset d(path, byte_tokenizer(), 80, {}, 1, 0.0);
    const std::string text =
        "<|system|>\nS\n<|user|>\nU\n<|assistant|>\nA\n<|user|>\nV\n"
        "<|assistant|>\nB\n";
    Row r = example(d, 0);
    std::vector<int32_t> want_tg(80, kIgn);
    const size_t a = text.find("A\n"), b = text.find("B\n");
    want_tg[a - 1] = 'A';
    want_tg[b - 1] = 'B';
    want_tg[text.size() - 1] = kEos;  // the final '\n' predicts eos
    EXPECT_EQ(r.tg, want_tg);
    for (size_t j = 0; j < text.size(); ++j)
        EXPECT_EQ(r.in[j], static_cast<unsigned char>(text[j])) << j;
    EXPECT_EQ(r.in[text.size()], kEos);
}

TEST_F(SftTest, MergedTokenizerEncodesSegmentsSeparately) {
    const std::string corpus = "the cat sat on the mat. the dog ate the hat. ";
    std::string text;
    for (int i = 0; i < 20; ++i) text += corpus;
    Tokenizer tok = Tokenizer::train(text, 300, {"<|endoftext|>"});
    const std::string path = write(R"({"prompt": "the cat", "completion": " sat on the mat"})");
    SftDataset d(path, tok, 32, {}, 1, 0.0);
    std::vector<int32_t> p = tok.encode("the cat"), c = tok.encode(" sat on the mat");
    ASSERT_LT(c.size(), 15u);  // merges happened: fewer tokens than bytes
    std::vector<int32_t> x = p;
    x.insert(x.end(), c.begin(), c.end());
    x.push_back(tok.eos_id());
    Row r = example(d, 0);
    for (size_t j = 0; j < 32; ++j) {
        EXPECT_EQ(r.in[j], j < x.size() ? x[j] : tok.eos_id()) << j;
        const bool trained = j + 1 < x.size() && j + 1 >= p.size();
        EXPECT_EQ(r.tg[j], trained ? x[j + 1] : kIgn) << j;
    }
}

TEST_F(SftTest, WithoutEosPadsWithZeroAndAppendsNothing) {
    static const Tokenizer no_eos = Tokenizer::train("abc", 256);
    ASSERT_EQ(no_eos.eos_id(), -1);
    const std::string path = write(R"({"prompt": "ab", "completion": "c"})"
                                   "\n");
    SftDataset d(path, no_eos, 6, {}, 1, 0.0);
    Row r = example(d, 0);
    EXPECT_EQ(r.in, (std::vector<int32_t>{'a', 'b', 'c', 0, 0, 0}));
    EXPECT_EQ(r.tg, (std::vector<int32_t>{kIgn, 'c', kIgn, kIgn, kIgn, kIgn}));
}

TEST_F(SftTest, LongExamplesAreTruncatedAndPromptOnlyWindowsDropped) {
    const std::string path = write(R"({"prompt": "ab", "completion": "cdefgh"})"
                                   "\n"
                                   R"({"prompt": "abcdefgh", "completion": "i"})"
                                   "\n"
                                   R"({"prompt": "a", "completion": "b"})"
                                   "\n");
    SftDataset d(path, byte_tokenizer(), 4, {}, 1, 0.0);
    // Example 2 keeps "ab" + eos; example 1's window "abcde" has no response token: dropped.
    EXPECT_EQ(d.stats().num_truncated, 2u);
    EXPECT_EQ(d.stats().num_no_target, 1u);
    ASSERT_EQ(d.num_examples(), 2u);
    Row r = example(d, 0);  // window "abcde": 5 = T + 1 tokens
    EXPECT_EQ(r.in, (std::vector<int32_t>{'a', 'b', 'c', 'd'}));
    EXPECT_EQ(r.tg, (std::vector<int32_t>{kIgn, 'c', 'd', 'e'}));
    r = example(d, 1);
    EXPECT_EQ(r.in, (std::vector<int32_t>{'a', 'b', kEos, kEos}));
    EXPECT_EQ(r.tg, (std::vector<int32_t>{'b', kEos, kIgn, kIgn}));
}

std::string good_line(int i) {
    return fmt::format(R"({{"prompt": "p", "completion": "r{}"}})", i) + "\n";
}

TEST_F(SftTest, MalformedLinesAreSkippedWithLineNumbersAndReasons) {
    std::string text = good_line(0);  // 1
    text += "{not json\n";            // 2
    text += "\n";                     // 3 blank
    text += R"({"instruction": "x"})"
            "\n";  // 4
    text += R"({"prompt": "p", "completion": 5})"
            "\n";  // 5
    text += R"({"instruction": "x", "output": ""})"
            "\n";  // 6
    text += R"({"messages": [{"role": "bot", "content": "x"}]})"
            "\n";  // 7
    text += R"({"messages": [{"role": "user", "content": "x"}]})"
            "\n";  // 8
    text += R"([1, 2])"
            "\n";  // 9
    text += R"({"text": "x"})"
            "\n";          // 10
    text += good_line(1);  // 11
    SftOptions opt;
    opt.max_bad_fraction = 1.0;
    SftDataset d(write(text), byte_tokenizer(), 16, opt, 1, 0.0);
    EXPECT_EQ(d.num_examples(), 2u);
    const SftStats& s = d.stats();
    EXPECT_EQ(s.num_lines, 10u);  // the blank line is not counted
    EXPECT_EQ(s.num_bad, 8u);
    std::vector<uint64_t> lines;
    for (const auto& b : s.first_bad) lines.push_back(b.line);
    EXPECT_EQ(lines, (std::vector<uint64_t>{2, 4, 5, 6, 7, 8, 9, 10}));
    ASSERT_EQ(s.first_bad.size(), 8u);
    EXPECT_NE(s.first_bad[0].reason.find("invalid JSON"), std::string::npos);
    EXPECT_EQ(s.first_bad[1].reason, "missing field 'output'");
    EXPECT_EQ(s.first_bad[2].reason, "field 'completion' is number, expected a string");
    EXPECT_EQ(s.first_bad[3].reason, "empty 'output'");
    EXPECT_EQ(s.first_bad[4].reason, "message 0: unknown role 'bot'");
    EXPECT_EQ(s.first_bad[5].reason, "no assistant message with content");
    EXPECT_EQ(s.first_bad[6].reason, "not a JSON object");
}

// Every rank of a job reads the same file: with warn = false (the ranks other than world rank 0)
// the skipped lines are counted alike but not reported again; the error above the allowed share
// is raised alike.
TEST_F(SftTest, WarnFalseCountsSkippedLinesWithoutReportingThem) {
    const std::string path = write(good_line(0) + "{not json\n" + good_line(1));
    for (bool warn : {true, false}) {
        SftOptions opt;
        opt.max_bad_fraction = 1.0;
        opt.warn = warn;
        ::testing::internal::CaptureStderr();
        const SftDataset d(path, byte_tokenizer(), 16, opt, 1, 0.0);
        const std::string err = ::testing::internal::GetCapturedStderr();
        EXPECT_EQ(d.stats().num_bad, 1u);
        EXPECT_EQ(err.find("d.jsonl:2: skipped: invalid JSON") != std::string::npos, warn) << err;
        EXPECT_EQ(err.find("skipped 1 malformed lines of 3") != std::string::npos, warn) << err;
        opt.max_bad_fraction = 0.1;
        EXPECT_NE(error_of([&] {
                      SftDataset(path, byte_tokenizer(), 16, opt, 1, 0.0);
                  }).find("has 1 malformed lines of 3"),
                  std::string::npos);
    }
}

TEST_F(SftTest, TooManyMalformedLinesThrowNamingFileCountAndFirstLine) {
    std::string text;
    for (int i = 0; i < 99; ++i) text += good_line(i);
    text += R"({"prompt": "p"})"
            "\n";  // line 100: 1 bad of 100 = 1%, allowed
    const std::string ok = write(text, "ok.jsonl");
    EXPECT_EQ(SftDataset(ok, byte_tokenizer(), 16, {}, 1, 0.0).stats().num_bad, 1u);
    text.insert(good_line(0).size() * 3, "oops\n");  // line 4: now 2 of 101
    const std::string bad = write(text, "bad.jsonl");
    const std::string msg = error_of([&] { SftDataset(bad, byte_tokenizer(), 16, {}, 1, 0.0); });
    EXPECT_NE(msg.find("bad.jsonl' has 2 malformed lines of 101"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_bad_fraction 0.01"), std::string::npos) << msg;
    EXPECT_NE(msg.find("first at line 4: invalid JSON"), std::string::npos) << msg;
}

// One number beyond double (1e999, or a million digits) aborted the whole load with no file or
// line and outside max_bad_fraction: now it is one malformed line, its reason short.
TEST_F(SftTest, AnOutOfRangeNumberIsOneMalformedLine) {
    std::string text;
    for (int i = 0; i < 3; ++i) text += good_line(i);
    text += R"({"prompt": "p", "completion": "c", "weight": 1e999})"
            "\n";
    text +=
        R"({"prompt": "p", "completion": "c", "weight": 1)" + std::string(1000000, '0') + "e999}\n";
    SftOptions opt;
    opt.max_bad_fraction = 1.0;
    SftDataset d(write(text), byte_tokenizer(), 16, opt, 1, 0.0);
    EXPECT_EQ(d.num_examples(), 3u);
    ASSERT_EQ(d.stats().first_bad.size(), 2u);
    for (const auto& b : d.stats().first_bad) {
        EXPECT_NE(b.reason.find("invalid JSON ("), std::string::npos) << b.reason.substr(0, 200);
        EXPECT_LT(b.reason.size(), 140u);
    }
    EXPECT_EQ(d.stats().first_bad[0].line, 4u);
}

TEST_F(SftTest, ClearErrors) {
    const std::string path = write(good_line(0) + good_line(1));
    SftOptions no_instruction;
    no_instruction.prompt_template = "{input}";
    EXPECT_NE(error_of([&] {
                  SftDataset(path, byte_tokenizer(), 8, no_instruction, 1, 0.0);
              }).find("data.sft_prompt_template and"),
              std::string::npos);
    EXPECT_NE(
        error_of([&] { SftDataset(path, byte_tokenizer(), 0, {}, 1, 0.0); }).find("seq_len is 0"),
        std::string::npos);
    EXPECT_NE(error_of([&] {
                  SftDataset((dir_ / "none").string(), byte_tokenizer(), 8, {}, 1, 0);
              }).find("cannot open"),
              std::string::npos);
    const std::string one = write(good_line(0), "one.jsonl");
    SftDataset d(one, byte_tokenizer(), 8, {}, 1, 0.5);  // N = 1: no validation
    EXPECT_EQ(d.num_val_samples(), 0u);
    std::vector<int32_t> in(8), tg(8);
    EXPECT_NE(error_of([&] {
                  d.fill_val_batch(0, 1, in.data(), tg.data());
              }).find("no validation examples"),
              std::string::npos);
}

// 20 examples whose completion "r<i>" names them; the first target of each row is 'r' and the
// next one or two are the digits of i.
int example_id(const int32_t* tg, int T) {
    int id = 0;
    for (int j = 0; j < T && tg[j] != kEos; ++j)
        if (tg[j] >= '0' && tg[j] <= '9') id = id * 10 + (tg[j] - '0');
    return id;
}

class SftOrderTest : public SftTest {
  protected:
    std::string twenty() {
        std::string text;
        for (int i = 0; i < 20; ++i) text += good_line(i);
        return write(text, "twenty.jsonl");
    }
    static constexpr int kT = 8;
};

TEST_F(SftOrderTest, EpochsArePermutationsOfTrainAndValIsTheTail) {
    SftDataset d(twenty(), byte_tokenizer(), kT, {}, 5, 0.2);
    ASSERT_EQ(d.num_train_samples(), 16u);
    ASSERT_EQ(d.num_val_samples(), 4u);  // ceil(0.2 * 20)
    std::vector<int32_t> in(32 * kT), tg(32 * kT);
    d.fill_batch(0, 32, in.data(), tg.data());  // two epochs
    for (int e = 0; e < 2; ++e) {
        std::set<int> ids;
        for (int i = 0; i < 16; ++i) ids.insert(example_id(&tg[(e * 16 + i) * kT], kT));
        EXPECT_EQ(ids.size(), 16u);
        EXPECT_EQ(*ids.rbegin(), 15);  // only examples 0..15 train
        const std::vector<uint64_t> order = shuffle_epoch_order(16, 5, e);
        for (int i = 0; i < 16; ++i)
            EXPECT_EQ(example_id(&tg[(e * 16 + i) * kT], kT), static_cast<int>(order[i]));
    }
    EXPECT_NE(d.epoch_order(0), d.epoch_order(1));
    d.fill_val_batch(2, 5, in.data(), tg.data());
    for (int i = 0; i < 5; ++i) EXPECT_EQ(example_id(&tg[i * kT], kT), 16 + (2 + i) % 4);
}

TEST_F(SftOrderTest, OrderDependsOnlyOnSeedAndEpoch) {
    const std::string path = twenty();
    SftDataset a(path, byte_tokenizer(), kT, {}, 5, 0.2), b(path, byte_tokenizer(), kT, {}, 5, 0.2);
    SftDataset c(path, byte_tokenizer(), kT, {}, 6, 0.2);
    for (uint64_t e : {0u, 3u}) {
        EXPECT_EQ(a.epoch_order(e), b.epoch_order(e));
        EXPECT_EQ(a.epoch_order(e), shuffle_epoch_order(16, 5, e));
    }
    EXPECT_NE(a.epoch_order(0), c.epoch_order(0));
}

// data.shuffle = false: every epoch reads the training examples in file order.
TEST_F(SftOrderTest, WithoutShufflingEveryEpochIsInFileOrder) {
    SftOptions opt;
    opt.shuffle = false;
    SftDataset d(twenty(), byte_tokenizer(), kT, opt, 5, 0.2);
    std::vector<int32_t> in(40 * kT), tg(40 * kT);
    d.fill_batch(3, 40, in.data(), tg.data());  // starts mid-epoch, runs into the third
    for (int i = 0; i < 40; ++i) EXPECT_EQ(example_id(&tg[i * kT], kT), (3 + i) % 16) << i;
}

TEST_F(SftOrderTest, ResumingAtAnyIndexGivesTheSameBatches) {
    const std::string path = twenty();
    SftDataset full(path, byte_tokenizer(), kT, {}, 9, 0.2);
    const int n = 50;
    std::vector<int32_t> in(n * kT), tg(n * kT);
    full.fill_batch(0, n, in.data(), tg.data());
    for (int k : {1, 15, 16, 33}) {
        SftDataset resumed(path, byte_tokenizer(), kT, {}, 9, 0.2);
        std::vector<int32_t> rin((n - k) * kT), rtg((n - k) * kT);
        resumed.fill_batch(k, n - k, rin.data(), rtg.data());
        EXPECT_TRUE(std::equal(rin.begin(), rin.end(), in.begin() + k * kT)) << k;
        EXPECT_TRUE(std::equal(rtg.begin(), rtg.end(), tg.begin() + k * kT)) << k;
    }
}

TEST_F(SftTest, BatchSamplerIsABatchSource) {
    std::vector<int32_t> ids(100);
    for (int i = 0; i < 100; ++i) ids[i] = i;
    const std::string path = (dir_ / "s.tok").string();
    write_token_shard(path, ids, 0);
    TokenShard shard(path);
    BatchSampler sampler(shard, 8, 0.1, 3);
    BatchSource& src = sampler;
    EXPECT_EQ(src.num_train_samples(), 10u);  // W = floor(98 / 8) = 12, V = ceil(1.2) = 2
    EXPECT_EQ(src.num_val_samples(), 2u);
    std::vector<int32_t> in(8), tg(8);
    EXPECT_FALSE(src.packed());
    src.fill_batch(0, 1, in.data(), tg.data(), nullptr);
    EXPECT_EQ(in[0], static_cast<int32_t>(shuffle_epoch_order(10, 3, 0)[0] * 8));
    EXPECT_EQ(sampler.epoch_order(0), shuffle_epoch_order(10, 3, 0));
    // Unshuffled: sample g is window g mod 10, starting at token (g mod 10) * 8, in every epoch.
    BatchSampler ordered(shard, 8, 0.1, 3, /*shuffle=*/false);
    for (uint64_t g : {0u, 7u, 13u, 29u}) {
        ordered.fill_batch(g, 1, in.data(), tg.data(), nullptr);
        EXPECT_EQ(in[0], static_cast<int32_t>((g % 10) * 8)) << g;
        EXPECT_EQ(tg[7], static_cast<int32_t>((g % 10) * 8 + 8)) << g;
    }
}

// Packing: "p" + "r<i>" + eos is n = 4 tokens (i < 10) taking n - 1 = 3 positions, so a row of
// T = 8 holds two examples and two padding positions.
class SftPackTest : public SftTest {
  protected:
    static SftOptions packed() {
        SftOptions o;
        o.pack = true;
        return o;
    }
    struct PackedRow {
        std::vector<int32_t> in, tg, ds;
    };
    PackedRow row(const SftDataset& d, uint64_t s) {
        PackedRow r{std::vector<int32_t>(d.seq_len()), std::vector<int32_t>(d.seq_len()),
                    std::vector<int32_t>(d.seq_len())};
        d.fill_sample(s, r.in.data(), r.tg.data(), r.ds.data());
        return r;
    }
};

TEST_F(SftPackTest, RowsHoldWholeExamplesWithDocumentStartsAndMaskedPadding) {
    SftDataset d(write(good_line(0) + good_line(1) + good_line(2)), byte_tokenizer(), 8, packed(),
                 1, 0.0);
    ASSERT_TRUE(d.packed());
    ASSERT_EQ(d.num_train_samples(), 2u);  // [0, 1] and [2]
    EXPECT_EQ(d.row_examples(0), (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(d.row_examples(1), (std::vector<uint64_t>{2}));
    PackedRow r = row(d, 0);
    // Example 0 is p r 0 eos: inputs p r 0, targets r 0 eos (p, the prompt, is never a target).
    EXPECT_EQ(r.in, (std::vector<int32_t>{'p', 'r', '0', 'p', 'r', '1', kEos, kEos}));
    EXPECT_EQ(r.tg, (std::vector<int32_t>{'r', '0', kEos, 'r', '1', kEos, kIgn, kIgn}));
    EXPECT_EQ(r.ds, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 6, 6}));
    r = row(d, 1);
    EXPECT_EQ(r.in, (std::vector<int32_t>{'p', 'r', '2', kEos, kEos, kEos, kEos, kEos}));
    EXPECT_EQ(r.tg, (std::vector<int32_t>{'r', '2', kEos, kIgn, kIgn, kIgn, kIgn, kIgn}));
    EXPECT_EQ(r.ds, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 3}));
    EXPECT_EQ(d.stats().num_rows, 2u);
    EXPECT_DOUBLE_EQ(d.stats().fill, 9.0 / 16.0);
}

TEST_F(SftPackTest, PackedTargetsAreExactlyTheUnpackedOnesInOrder) {
    // A prompt-masked Alpaca record (38 tokens: 37 positions) and a short one (3) fill a row of
    // T = 40 exactly; a chat with two assistant turns and a long record are truncated to full
    // rows of their own.
    std::string text = R"({"instruction": "Hi", "output": "yo"})"
                       "\n" +
                       good_line(7);
    text += R"({"messages": [{"role": "user", "content": "a"}, )"
            R"({"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}, )"
            R"({"role": "assistant", "content": "d"}]})"
            "\n";
    text += R"({"prompt": "p", "completion": ")" + std::string(50, 'z') + "\"}\n" + good_line(8);
    const std::string path = write(text);
    const int T = 40;
    SftDataset flat(path, byte_tokenizer(), T, {}, 1, 0.0),
        pk(path, byte_tokenizer(), T, packed(), 1, 0.0);
    ASSERT_EQ(flat.num_examples(), pk.num_examples());
    std::vector<int32_t> want, got;
    for (uint64_t e = 0; e < flat.num_examples(); ++e) {
        Row r = example(flat, e);
        for (int32_t t : r.tg)
            if (t != kIgn) want.push_back(t);
    }
    for (uint64_t s = 0; s < pk.num_train_samples(); ++s) {
        PackedRow r = row(pk, s);
        for (int j = 0; j < T; ++j) {
            ASSERT_LE(r.ds[j], j);
            ASSERT_TRUE(j == 0 || r.ds[j] == r.ds[j - 1] || r.ds[j] == j) << j;
            if (r.tg[j] != kIgn) got.push_back(r.tg[j]);
        }
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(flat.num_train_samples(), 5u);
    ASSERT_EQ(pk.num_train_samples(), 4u);
    EXPECT_EQ(pk.row_examples(0), (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(pk.row_examples(3), (std::vector<uint64_t>{4}));
}

TEST_F(SftPackTest, ValidationRowsNeverMixWithTrainingRowsAndBatchesNeedDocStart) {
    std::string text;
    for (int i = 0; i < 10; ++i) text += good_line(i);
    SftDataset d(write(text), byte_tokenizer(), 8, packed(), 3, 0.2);  // examples 8, 9 validate
    ASSERT_EQ(d.num_train_samples(), 4u);
    ASSERT_EQ(d.num_val_samples(), 1u);
    EXPECT_EQ(d.row_examples(4), (std::vector<uint64_t>{8, 9}));
    std::vector<int32_t> in(16), tg(16), ds(16);
    d.fill_batch(0, 2, in.data(), tg.data(), ds.data());
    const std::vector<uint64_t> order = shuffle_epoch_order(4, 3, 0);
    for (int i = 0; i < 2; ++i) {
        const uint64_t first = d.row_examples(order[size_t(i)])[0];
        EXPECT_EQ(tg[size_t(i) * 8 + 1], int32_t('0' + first)) << i;
    }
    d.fill_val_batch(0, 1, in.data(), tg.data(), ds.data());
    EXPECT_EQ(tg[1], '8');
    EXPECT_EQ(tg[4], '9');
    EXPECT_NE(
        error_of([&] { d.fill_batch(0, 1, in.data(), tg.data(), nullptr); }).find("doc_start"),
        std::string::npos);
}

}  // namespace
}  // namespace ete
