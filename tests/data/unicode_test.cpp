// tests/data/unicode_test.cpp — ete::unicode against the UCD versions HF uses and HF's own output:
// categories per Unicode version, class ranges vs category() everywhere, the regex membership and
// normalizer goldens of tools/gen_unicode_goldens.mjs, and normalization identities.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/data/unicode.h"
#include "test_util.h"

namespace ete {
namespace unicode_test {

using unicode::Category;
namespace u = unicode;

const std::string kGoldenDir = std::string(ETE_SOURCE_DIR) + "/tests/golden/unicode/";

std::string utf8_of(const std::u32string& cps) {
    std::string out;
    for (char32_t c : cps) {
        if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (c < 0x800) {
            out += static_cast<char>(0xC0 | (c >> 6));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out += static_cast<char>(0xE0 | (c >> 12));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (c >> 18));
            out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (c & 0x3F));
        }
    }
    return out;
}

// "0041 030A" -> "A\u030A".
std::string utf8_of_hex(const std::string& hex) {
    std::istringstream in(hex);
    std::u32string cps;
    std::string h;
    while (in >> h) cps += static_cast<char32_t>(std::stoul(h, nullptr, 16));
    return utf8_of(cps);
}

std::vector<std::string> golden_lines(const std::string& path) {
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    std::vector<std::string> lines;
    for (std::string line; std::getline(f, line);) {
        if (!line.empty() && line[0] != '#') lines.push_back(line);
    }
    return lines;
}

struct Case {
    std::string input, output, hex;  // hex: the input as written in the golden, for messages
};

// Lines "input<TAB>output" of hex code points.
std::vector<Case> normalization_cases(const std::string& path) {
    std::vector<Case> cases;
    for (const std::string& line : golden_lines(path)) {
        const size_t tab = line.find('\t');
        EXPECT_NE(tab, std::string::npos) << line;
        const std::string in = line.substr(0, tab);
        cases.push_back({utf8_of_hex(in), utf8_of_hex(line.substr(tab + 1)), in});
    }
    return cases;
}

using NormalizeFn = std::string (*)(std::string_view);

struct Normalizer {
    const char* name;
    NormalizeFn fn;
};

void PrintTo(const Normalizer& n, std::ostream* os) {
    *os << n.name;
}

const Normalizer kNormalizers[] = {{"nfc", u::nfc},
                                   {"nfd", u::nfd},
                                   {"nfkc", u::nfkc},
                                   {"nfkd", u::nfkd},
                                   {"lowercase", u::lowercase}};

bool in_ranges(std::span<const u::Range> ranges, char32_t cp) {
    for (const u::Range& r : ranges) {
        if (r.first <= cp && cp <= r.last) return true;
    }
    return false;
}

bool category_in_class(Category c, std::string_view name) {
    const std::string_view n = u::category_name(c);
    return name.size() == 1 ? n[0] == name[0] : n == name;
}

std::string hex_of(char32_t cp) {
    return fmt::format("U+{:04X}", static_cast<uint32_t>(cp));
}

bool is_surrogate(char32_t cp) {
    return cp >= 0xD800 && cp <= 0xDFFF;
}

std::vector<std::string> class_names() {
    std::vector<std::string> names;
    for (int i = 0; i < u::kCategoryCount; ++i) {
        names.emplace_back(u::category_name(static_cast<Category>(i)));
    }
    for (const char* n : {"L", "M", "N", "P", "S", "Z", "C"}) names.emplace_back(n);
    return names;
}

// EXPECT_EQ for long strings: reports the first difference instead of both strings.
::testing::AssertionResult same_text(const std::string& got, const std::string& want) {
    if (got == want) return ::testing::AssertionSuccess();
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    const size_t from = i < 16 ? 0 : i - 16;
    return ::testing::AssertionFailure()
           << "sizes " << got.size() << " vs " << want.size() << ", first difference at byte " << i
           << ": got \"" << got.substr(from, 48) << "\", want \"" << want.substr(from, 48) << "\"";
}

// ---- categories ----

TEST(UnicodeCategory, OneCodePointOfEachCategory) {
    const std::pair<char32_t, Category> known[] = {
        {0x41, Category::Lu},    {0x61, Category::Ll},   {0x1C5, Category::Lt},
        {0x2B0, Category::Lm},   {0x4E00, Category::Lo}, {0x301, Category::Mn},
        {0x903, Category::Mc},   {0x20DD, Category::Me}, {0x30, Category::Nd},
        {0x2160, Category::Nl},  {0xBD, Category::No},   {0x5F, Category::Pc},
        {0x2D, Category::Pd},    {0x28, Category::Ps},   {0x29, Category::Pe},
        {0xAB, Category::Pi},    {0xBB, Category::Pf},   {0x21, Category::Po},
        {0x2B, Category::Sm},    {0x24, Category::Sc},   {0x5E, Category::Sk},
        {0xA9, Category::So},    {0x20, Category::Zs},   {0x2028, Category::Zl},
        {0x2029, Category::Zp},  {0x0, Category::Cc},    {0xAD, Category::Cf},
        {0xD800, Category::Cs},  {0xE000, Category::Co}, {0x378, Category::Cn},
        {0x10FFFF, Category::Cn}};
    for (auto [cp, cat] : known) {
        EXPECT_EQ(u::category_name(u::category(cp)), u::category_name(cat)) << hex_of(cp);
    }
}

TEST(UnicodeCategory, VersionedCodePoints) {
    EXPECT_EQ(u::unicode_version(), "16.0.0");
    EXPECT_EQ(u::normalization_version(), "9.0.0");
    EXPECT_EQ(u::lowercase_version(), "17.0.0");
    EXPECT_EQ(u::category(0x1E290), Category::Lo);  // Toto, 14.0
    EXPECT_EQ(u::category(0x11F04), Category::Lo);  // Kawi, 15.0
    EXPECT_EQ(u::category(0x2EBF0), Category::Lo);  // CJK Extension I, 15.1
    EXPECT_EQ(u::category(0x2EE5D), Category::Lo);  // its last ideograph
    EXPECT_EQ(u::category(0x10D50), Category::Lu);  // Garay capital A, 16.0
    EXPECT_EQ(u::category(0x10D70), Category::Ll);  // Garay small A, 16.0
    EXPECT_EQ(u::category(0x105C0), Category::Lo);  // Todhri, 16.0
    EXPECT_EQ(u::category(0x10940), Category::Cn);  // Sidetic, 17.0: unassigned in 16.0
    EXPECT_EQ(u::category(0x1171E), Category::Mc);  // Ahom medial ra: Mn in 14.0, Mc since 15.0
    EXPECT_EQ(u::category(0x110000), Category::Cn);
    EXPECT_EQ(u::category(0xFFFFFFFF), Category::Cn);
}

TEST(UnicodeCategory, WhiteSpace) {
    for (char32_t c : {0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028,
                       0x2029, 0x202F, 0x205F, 0x3000}) {
        EXPECT_TRUE(u::is_white_space(c)) << hex_of(c);
    }
    // U+180E stopped being White_Space in 6.3; ZWSP and the BOM never were.
    for (char32_t c : {0x8, 0xE, 0x1C, 0x1F, 0x21, 0x180E, 0x200B, 0xFEFF, 0x10FFFF, 0x110000}) {
        EXPECT_FALSE(u::is_white_space(c)) << hex_of(c);
    }
}

// ---- class ranges ----

TEST(UnicodeClasses, RangesAgreeWithCategoryForEveryCodePoint) {
    for (const std::string& name : class_names()) {
        const auto ranges = u::class_ranges(name);
        ASSERT_FALSE(ranges.empty()) << name;
        for (size_t i = 0; i < ranges.size(); ++i) {
            ASSERT_LE(ranges[i].first, ranges[i].last) << name;
            // Sorted and merged: a gap of at least one code point between ranges.
            if (i > 0) {
                ASSERT_LT(ranges[i - 1].last + 1, ranges[i].first) << name;
            }
        }
        size_t r = 0;
        size_t mismatches = 0;
        for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            while (r < ranges.size() && ranges[r].last < cp) ++r;
            const bool in_range = r < ranges.size() && ranges[r].first <= cp;
            mismatches += in_range != category_in_class(u::category(cp), name);
        }
        EXPECT_EQ(mismatches, 0u) << name;
    }
}

TEST(UnicodeClasses, AddedAndRemovedSince14) {
    EXPECT_TRUE(in_ranges(u::class_added_since_14("L"), 0x10D50));  // Garay, 16.0
    EXPECT_TRUE(in_ranges(u::class_added_since_14("Lu"), 0x10D50));
    EXPECT_TRUE(in_ranges(u::class_added_since_14("Lo"), 0x11F04));  // Kawi, 15.0
    EXPECT_TRUE(in_ranges(u::class_added_since_14("Lo"), 0x2EBF0));  // CJK Ext. I, 15.1
    EXPECT_FALSE(in_ranges(u::class_added_since_14("L"), 0x1E290));  // Toto was in 14.0
    EXPECT_FALSE(in_ranges(u::class_added_since_14("L"), 0x10940));  // Sidetic is 17.0
    EXPECT_TRUE(in_ranges(u::class_added_since_14("Nd"), 0x11F50));  // Kawi digit zero, 15.0
    EXPECT_TRUE(in_ranges(u::class_added_since_14("Mc"), 0x1171E));  // Mn -> Mc in 15.0
    EXPECT_TRUE(in_ranges(u::class_removed_since_14("Mn"), 0x1171E));
    EXPECT_FALSE(in_ranges(u::class_added_since_14("M"), 0x1171E));  // a mark either way
    // No letter, mark, number, punctuation or symbol was lost: patching PCRE2's Unicode 14
    // classes only needs additions.
    for (const char* name : {"L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "N", "Nd", "P", "S"}) {
        EXPECT_TRUE(u::class_removed_since_14(name).empty()) << name;
    }
    for (const std::string& name : class_names()) {
        for (const u::Range& r : u::class_added_since_14(name)) {
            EXPECT_TRUE(category_in_class(u::category(r.first), name)) << name;
            EXPECT_TRUE(category_in_class(u::category(r.last), name)) << name;
        }
        for (const u::Range& r : u::class_removed_since_14(name)) {
            EXPECT_FALSE(category_in_class(u::category(r.first), name)) << name;
        }
    }
}

TEST(UnicodeClasses, UnknownNameThrows) {
    EXPECT_NE(error_of([] { u::class_ranges("Xx"); }).find("unknown class 'Xx'"),
              std::string::npos);
    EXPECT_NE(error_of([] { u::class_added_since_14("Letter"); }).find("class_added_since_14"),
              std::string::npos);
    EXPECT_NE(error_of([] { u::class_removed_since_14(""); }).find("unknown class ''"),
              std::string::npos);
}

// HF's regex \p{X} (and \s), probed through a Split pre-tokenizer.
bool our_membership(const std::string& name, char32_t cp) {
    if (name == "White_Space" || name == "s") return u::is_white_space(cp);
    return category_in_class(u::category(cp), name);
}

TEST(UnicodeMembership, MatchesHfRegexGolden) {
    const auto lines = golden_lines(kGoldenDir + "membership.txt");
    ASSERT_GT(lines.size(), 3000u);
    size_t members = 0;
    for (const std::string& line : lines) {
        std::istringstream in(line);
        std::string name, hex;
        int hf = -1;
        in >> name >> hex >> hf;
        const auto cp = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
        EXPECT_EQ(our_membership(name, cp), hf == 1) << name << " U+" << hex;
        members += hf == 1;
    }
    EXPECT_GT(members, 1000u);  // both verdicts are well represented
}

// ---- normalization ----

class UnicodeNormalize : public ::testing::TestWithParam<Normalizer> {};

TEST_P(UnicodeNormalize, MatchesHfGolden) {
    const Normalizer& n = GetParam();
    const auto cases = normalization_cases(kGoldenDir + n.name + ".txt");
    ASSERT_GT(cases.size(), 1000u);
    size_t changed = 0;
    for (const Case& c : cases) {
        EXPECT_EQ(n.fn(c.input), c.output) << n.name << " of " << c.hex;
        changed += c.output != c.input;
    }
    EXPECT_GT(changed, 100u);
}

// Inputs joined by spaces normalize to the outputs joined by spaces (a space is a boundary in
// every form): one long string through the segmenting and copying of clean stretches.
TEST_P(UnicodeNormalize, LongTextIsSegmentedCorrectly) {
    const Normalizer& n = GetParam();
    std::string in, want;
    for (const Case& c : normalization_cases(kGoldenDir + n.name + ".txt")) {
        in += c.input + " plain ascii ";
        want += c.output + " plain ascii ";
    }
    EXPECT_TRUE(same_text(n.fn(in), want)) << n.name;
}

TEST_P(UnicodeNormalize, AsciiIsUnchangedExceptLowercase) {
    const Normalizer& n = GetParam();
    std::string ascii;
    for (int c = 0; c < 128; ++c) ascii += static_cast<char>(c);
    std::string want = ascii;
    if (std::string_view(n.name) == "lowercase") {
        for (char& c : want) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    }
    EXPECT_EQ(n.fn(ascii), want);
    EXPECT_EQ(n.fn(""), "");
}

TEST_P(UnicodeNormalize, InvalidUtf8Throws) {
    const Normalizer& n = GetParam();
    for (const char* bad : {"a\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\x80"}) {
        const std::string msg = error_of([&] { n.fn(bad); });
        EXPECT_NE(msg.find("invalid UTF-8"), std::string::npos) << n.name << ": " << msg;
    }
}

INSTANTIATE_TEST_SUITE_P(UnicodeHf, UnicodeNormalize, ::testing::ValuesIn(kNormalizers),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(UnicodeNormalizeForms, Identities) {
    for (const Case& c : normalization_cases(kGoldenDir + "nfc.txt")) {
        const std::string& x = c.input;
        EXPECT_EQ(u::nfc(u::nfd(x)), u::nfc(x)) << c.hex;
        EXPECT_EQ(u::nfd(u::nfc(x)), u::nfd(x)) << c.hex;
        EXPECT_EQ(u::nfkc(u::nfkd(x)), u::nfkc(x)) << c.hex;
        EXPECT_EQ(u::nfkd(u::nfc(x)), u::nfkd(x)) << c.hex;
        EXPECT_EQ(u::nfc(u::nfc(x)), u::nfc(x)) << c.hex;
        EXPECT_EQ(u::nfkc(u::nfkc(x)), u::nfkc(x)) << c.hex;
    }
}

TEST(UnicodeNormalizeForms, HandChecked) {
    EXPECT_EQ(u::nfc("A\u030A"), "\u00C5");
    EXPECT_EQ(u::nfc("\u212B"), "\u00C5");  // singleton: never recomposes to U+212B
    EXPECT_EQ(u::nfd("\u00C5"), "A\u030A");
    EXPECT_EQ(u::nfkc("\uFB01"), "fi");
    EXPECT_EQ(u::nfc("\uFB01"), "\uFB01");
    EXPECT_EQ(u::nfc("\u1100\u1161\u11A8"), "\uAC01");
    EXPECT_EQ(u::nfc("\uAC00\u11A7"), "\uAC00\u11A7");  // U+11A7 is not a trailing consonant
    EXPECT_EQ(u::nfd("e\u0301\u0327"), "e\u0327\u0301");
    // Unicode 9.0 data: Dives Akuru U+11938 (13.0) has no decomposition for HF.
    EXPECT_EQ(u::nfd("\U00011938"), "\U00011938");
    EXPECT_EQ(u::lowercase("ΟΔΟΣ İ"), "οδοσ i\u0307");
    EXPECT_EQ(u::lowercase("\u1C89\uA7D2"), "\u1C8A\uA7D3");  // 16.0 and 17.0 capitals
}

// ---- optional: every code point, against tools/gen_unicode_goldens.mjs --full DIR ----

const char* full_dir() {
    return std::getenv("ETE_UNICODE_FULL_GOLDENS");
}

TEST(UnicodeFull, NormalizersMatchHfOnEveryCodePoint) {
    if (!full_dir()) GTEST_SKIP() << "set ETE_UNICODE_FULL_GOLDENS to the --full directory";
    for (const Normalizer& n : kNormalizers) {
        std::vector<bool> listed(0x110000);
        size_t bad = 0;
        for (const Case& c : normalization_cases(std::string(full_dir()) + "/" + n.name + ".txt")) {
            if (n.fn(c.input) != c.output && bad++ < 20) ADD_FAILURE() << n.name << " " << c.hex;
            if (c.hex.find(' ') == std::string::npos) listed[std::stoul(c.hex, nullptr, 16)] = 1;
        }
        for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            if (listed[cp] || is_surrogate(cp)) continue;
            const std::string s = utf8_of(std::u32string(1, cp));
            if (n.fn(s) != s && bad++ < 20) ADD_FAILURE() << n.name << " changes " << hex_of(cp);
        }
        EXPECT_EQ(bad, 0u) << n.name;
    }
}

TEST(UnicodeFull, ClassesMatchHfOnEveryCodePoint) {
    if (!full_dir()) GTEST_SKIP() << "set ETE_UNICODE_FULL_GOLDENS to the --full directory";
    std::map<std::string, std::vector<bool>> hf;
    for (const std::string& line :
         golden_lines(std::string(full_dir()) + "/membership_ranges.txt")) {
        std::istringstream in(line);
        std::string name, a, b;
        in >> name >> a >> b;
        auto& m = hf.try_emplace(name, 0x110000).first->second;
        for (auto c = std::stoul(a, nullptr, 16); c <= std::stoul(b, nullptr, 16); ++c) m[c] = 1;
    }
    ASSERT_EQ(hf.size(), 13u);
    for (const auto& [name, m] : hf) {
        size_t bad = 0;
        for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            if (!is_surrogate(cp)) bad += our_membership(name, cp) != m[cp];
        }
        EXPECT_EQ(bad, 0u) << name;
    }
}

}  // namespace unicode_test
}  // namespace ete
