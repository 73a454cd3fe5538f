// bench/tokenizer_bench.cpp — Tokenizer::encode throughput on a whole text file, and a check of its
// ids against a reference (HF's, written by bench/hf_tokenizer_bench.mjs); docs/benchmarks.md,
// Tokenizer encode throughput.
//
//   ete_bench_tokenizer --tokenizer T.json --text F.txt [--repeats N] [--threads 1,2]
//                       [--ids REF.i32] [--lines] [--json]
//
// Per thread count: one untimed encode (its ids are checked), then N timed ones, each a single
// encode() of the whole text as `ete tokenize` runs it (output vector included); the median is
// reported as MB/s (10^6 bytes of text) and tokens/s. REF.i32 is raw little-endian int32 ids.
// --lines times another job: each line (with its newline) encoded by its own encode_append(), as
// a corpus of short documents is; hf_tokenizer_bench.mjs --lines is its peer.
// A mismatch is reported by regions: the two id lists are walked side by side by the text bytes
// each token covers, and a region runs from a differing id to the next point where both lists
// are at the same byte and agree again; its first one is printed with the text around it.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/tokenizer.h"

namespace {

struct Args {
    std::string tokenizer, text, ids;
    int repeats = 5;
    std::vector<int> threads = {1, 2};
    bool json = false;
    bool lines = false;  // each line in its own encode() call
};

struct Mismatch {
    size_t regions = 0;     // differing stretches
    size_t ete_tokens = 0;  // ETE's ids inside them
    size_t ref_tokens = 0;  // the reference's ids inside them
    size_t first_byte = 0;  // text offset (normalized form) where the first region starts
    size_t first_ete = 0, first_ref = 0;  // index of the first differing id in each list
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The text bytes a token stands for, as far as alignment needs: raw bytes for a byte-level
// model, the vocab form for the others (a byte-fallback "<0xNN>" counts as its one byte).
size_t token_len(const ete::Tokenizer& tok, int32_t id) {
    if (id < 0 || id >= tok.vocab_size()) return 1;
    const std::string& b = tok.id_to_bytes(id);
    if (!tok.is_byte_level() && b.size() == 6 && b.starts_with("<0x") && b.back() == '>') return 1;
    return b.size();
}

Mismatch compare_ids(const ete::Tokenizer& tok, const std::vector<int32_t>& a,
                     const std::vector<int32_t>& b) {
    Mismatch m;
    size_t i = 0, j = 0, pa = 0, pb = 0;  // next id, and the byte offset it starts at
    while (i < a.size() || j < b.size()) {
        if (i < a.size() && j < b.size() && pa == pb && a[i] == b[j]) {
            pa += token_len(tok, a[i++]);
            pb = pa;
            ++j;
            continue;
        }
        if (m.regions++ == 0) m.first_byte = pa, m.first_ete = i, m.first_ref = j;
        // Advance the list that is behind (the ETE one on a tie) until both are at one byte
        // offset and agree on the next id, or both end.
        auto resynced = [&] {
            if (pa != pb) return false;
            if (i == a.size() || j == b.size()) return i == a.size() && j == b.size();
            return a[i] == b[j];
        };
        do {
            if (i < a.size() && (j == b.size() || pa <= pb)) {
                pa += token_len(tok, a[i++]);
                ++m.ete_tokens;
            } else {
                pb += token_len(tok, b[j++]);
                ++m.ref_tokens;
            }
        } while (!resynced());
    }
    return m;
}

void print_ids(const char* what, const ete::Tokenizer& tok, const std::vector<int32_t>& ids,
               size_t from) {
    std::fprintf(stderr, "  %s from id %zu:", what, from);
    for (size_t k = from; k < std::min(ids.size(), from + 12); ++k) {
        const bool known = ids[k] >= 0 && ids[k] < tok.vocab_size();
        std::fprintf(stderr, " %d'%s'", ids[k], known ? tok.id_to_token(ids[k]).c_str() : "?");
    }
    std::fprintf(stderr, "\n");
}

std::vector<int32_t> read_ids(const std::string& path) {
    const std::string raw = ete::read_file(path, UINT64_MAX);
    ETE_CHECK(raw.size() % 4 == 0, "--ids '{}': {} bytes is not a whole number of int32 ids", path,
              raw.size());
    std::vector<int32_t> ids(raw.size() / 4);
    std::memcpy(ids.data(), raw.data(), raw.size());
    return ids;
}

// Returns the mismatch regions against `ref` (0 when equal) and prints the first one.
size_t check(const ete::Tokenizer& tok, const std::vector<int32_t>& got,
             const std::vector<int32_t>& ref, bool quiet) {
    if (got == ref) return 0;
    const Mismatch m = compare_ids(tok, got, ref);
    std::fprintf(
        stderr,
        "MISMATCH: %zu ids against %zu reference ids; %zu differing regions, %zu ETE ids and "
        "%zu reference ids in them\n",
        got.size(), ref.size(), m.regions, m.ete_tokens, m.ref_tokens);
    if (quiet) return m.regions;
    std::string prefix = tok.decode(std::span(got.data(), m.first_ete));
    std::fprintf(
        stderr, "  first at byte %zu of the normalized text; the text before it ends with '%s'\n",
        m.first_byte, prefix.substr(prefix.size() - std::min<size_t>(prefix.size(), 80)).c_str());
    print_ids("ETE", tok, got, m.first_ete);
    print_ids("ref", tok, ref, m.first_ref);
    return m.regions;
}

// The whole text in one encode(), or (--lines) each line, newline included, in its own.
std::vector<int32_t> encode(const ete::Tokenizer& tok, std::string_view text, bool lines) {
    if (!lines) return tok.encode(text);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 16);
    for (size_t begin = 0; begin < text.size();) {
        const size_t nl = text.find('\n', begin);
        const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
        tok.encode_append(text.substr(begin, end - begin), ids);
        begin = end;
    }
    return ids;
}

void report(const Args& a, int threads, size_t bytes, size_t tokens, double s, size_t ref_tokens,
            size_t regions) {
    const double mb = double(bytes) / 1e6;
    if (a.json) {
        std::printf(
            "{\"threads\": %d, \"bytes\": %zu, \"tokens\": %zu, \"median_s\": %.6f, "
            "\"mb_per_s\": %.3f, \"tokens_per_s\": %.0f, \"ref_tokens\": %zu, "
            "\"mismatch_regions\": %s}\n",
            threads, bytes, tokens, s, mb / s, double(tokens) / s, ref_tokens,
            a.ids.empty() ? "null" : std::to_string(regions).c_str());
        return;
    }
    const char* check = a.ids.empty() ? "" : regions ? ", ids DIFFER" : ", ids equal";
    std::printf("%d thread%s: %.2f MB in %.4f s (median of %d): %.2f MB/s, %.3f M tokens/s%s\n",
                threads, threads == 1 ? "" : "s", mb, s, a.repeats, mb / s,
                double(tokens) / s / 1e6, check);
}

int run(const Args& a) {
    const ete::Tokenizer tok = ete::Tokenizer::load(a.tokenizer);
    const std::string text = ete::read_file(a.text, UINT64_MAX);
    const std::vector<int32_t> ref = a.ids.empty() ? std::vector<int32_t>{} : read_ids(a.ids);
    std::vector<int32_t> first;
    int status = 0;
    for (int t : a.threads) {
        omp_set_num_threads(t);
        std::vector<int32_t> ids = encode(tok, text, a.lines);  // untimed: checked
        const size_t regions = a.ids.empty() ? 0 : check(tok, ids, ref, !first.empty());
        if (!first.empty() && ids != first) {
            std::fprintf(stderr, "MISMATCH: %d threads give other ids than %d\n", t, a.threads[0]);
            status = 1;
        }
        if (first.empty()) first = ids;
        if (regions) status = 1;
        std::vector<double> secs;
        for (int r = 0; r < a.repeats; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            ids = encode(tok, text, a.lines);
            secs.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        report(a, t, text.size(), ids.size(), median(secs), ref.size(), regions);
    }
    return status;
}

std::vector<int> parse_list(const char* p) {
    std::vector<int> v;
    while (*p) {
        char* end;
        v.push_back(int(std::strtol(p, &end, 10)));
        p = *end ? end + 1 : end;
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        const bool has_value = i + 1 < argc;
        if (k == "--tokenizer" && has_value) {
            a.tokenizer = argv[++i];
        } else if (k == "--text" && has_value) {
            a.text = argv[++i];
        } else if (k == "--ids" && has_value) {
            a.ids = argv[++i];
        } else if (k == "--repeats" && has_value) {
            a.repeats = std::max(1, std::atoi(argv[++i]));
        } else if (k == "--threads" && has_value) {
            a.threads = parse_list(argv[++i]);
        } else if (k == "--json") {
            a.json = true;
        } else if (k == "--lines") {
            a.lines = true;
        } else {
            a.tokenizer.clear();
            break;
        }
    }
    if (a.tokenizer.empty() || a.text.empty() || a.threads.empty()) {
        std::fprintf(stderr,
                     "usage: %s --tokenizer T.json --text F.txt [--repeats N] [--threads 1,2] "
                     "[--ids REF.i32] [--lines] [--json]\n",
                     argv[0]);
        return 2;
    }
    try {
        return run(a);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ete_bench_tokenizer: %s\n", e.what());
        return 1;
    }
}
