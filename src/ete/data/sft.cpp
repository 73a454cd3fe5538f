// ete/data/sft.cpp — JSONL records to masked token rows: parsing, templates, split, batches.
#include "ete/data/sft.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "ete/core/error.h"
#include "ete/core/log.h"
#include "ete/data/loader.h"

namespace ete {
namespace {

using Json = nlohmann::json;

constexpr size_t kWarnedBadLines = 5;  // malformed lines named one by one in the log

using Segment = SftSegment;
using Rendered = SftRendered;

Rendered malformed(std::string reason) {
    return {{}, std::move(reason), false};
}

// Replaces each "{name}" of `fields` in `tmpl` in one left-to-right pass.
std::string fill_template(const std::string& tmpl,
                          const std::vector<std::pair<std::string, std::string>>& fields) {
    std::string out;
    size_t i = 0;
    while (i < tmpl.size()) {
        bool replaced = false;
        for (const auto& [name, value] : fields) {
            const std::string key = "{" + name + "}";
            if (tmpl.compare(i, key.size(), key) == 0) {
                out += value;
                i += key.size();
                replaced = true;
                break;
            }
        }
        if (!replaced) out += tmpl[i++];
    }
    return out;
}

// The string field `key`, or nullopt with `error` set when it is absent or not a string.
std::optional<std::string> string_field(const Json& rec, const char* key, std::string& error) {
    auto it = rec.find(key);
    if (it == rec.end()) {
        error = fmt::format("missing field '{}'", key);
        return std::nullopt;
    }
    if (!it->is_string()) {
        error = fmt::format("field '{}' is {}, expected a string", key, it->type_name());
        return std::nullopt;
    }
    return it->get<std::string>();
}

Rendered render_alpaca(const Json& rec, const SftOptions& opt) {
    std::string error;
    auto instruction = string_field(rec, "instruction", error);
    if (!instruction) return malformed(error);
    auto output = string_field(rec, "output", error);
    if (!output) return malformed(error);
    if (output->empty()) return malformed("empty 'output'");
    std::string input;
    if (rec.contains("input")) {
        auto in = string_field(rec, "input", error);
        if (!in) return malformed(error);
        input = *in;
    }
    std::string prompt =
        input.empty()
            ? fill_template(opt.prompt_template_no_input, {{"instruction", *instruction}})
            : fill_template(opt.prompt_template, {{"instruction", *instruction}, {"input", input}});
    return {{{std::move(prompt), false}, {std::move(*output), true}}, {}};
}

Rendered render_plain(const Json& rec) {
    std::string error;
    auto prompt = string_field(rec, "prompt", error);
    if (!prompt) return malformed(error);
    auto completion = string_field(rec, "completion", error);
    if (!completion) return malformed(error);
    if (completion->empty()) return malformed("empty 'completion'");
    return {{{std::move(*prompt), false}, {std::move(*completion), true}}, {}};
}

Rendered render_chat(const Json& rec) {
    const Json& messages = rec["messages"];
    if (!messages.is_array() || messages.empty())
        return malformed("'messages' is not a non-empty array");
    Rendered r;
    bool has_response = false;
    for (size_t m = 0; m < messages.size(); ++m) {
        const Json& msg = messages[m];
        if (!msg.is_object()) return malformed(fmt::format("message {} is not an object", m));
        std::string error;
        auto role = string_field(msg, "role", error);
        auto content = role ? string_field(msg, "content", error) : std::nullopt;
        if (!content) return malformed(fmt::format("message {}: {}", m, error));
        if (*role != "system" && *role != "user" && *role != "assistant")
            return malformed(fmt::format("message {}: unknown role '{}'", m, *role));
        const bool assistant = *role == "assistant";
        has_response = has_response || (assistant && !content->empty());
        r.segments.push_back({"<|" + *role + "|>\n", false});
        r.segments.push_back({std::move(*content), assistant});
        r.segments.push_back({"\n", false});
    }
    if (!has_response) return malformed("no assistant message with content");
    return r;
}

// A record longer than this is malformed, not parsed: its DOM would take 20x its size (a
// 100 MB line peaked at 2.3 GB) and no sequence of train.seq_len tokens needs it.
constexpr size_t kMaxRecordBytes = size_t(64) << 20;

Rendered render_line(const std::string& line, const SftOptions& opt) {
    if (line.size() > kMaxRecordBytes)
        return malformed(fmt::format("a record of {} bytes (more than 64 MiB)", line.size()));
    Json rec;
    try {
        rec = Json::parse(line);
    } catch (const Json::parse_error& e) {
        return malformed(fmt::format("invalid JSON at byte {}", e.byte));
    } catch (const Json::exception& e) {  // out_of_range: a number beyond double (1e999)
        const std::string what = e.what();
        return malformed(fmt::format("invalid JSON ({})",
                                     what.size() > 100 ? what.substr(0, 96) + "..." : what));
    }
    if (!rec.is_object()) return malformed("not a JSON object");
    if (rec.contains("messages"))
        return opt.chat_template ? opt.chat_template->render(line) : render_chat(rec);
    if (rec.contains("prompt") || rec.contains("completion")) return render_plain(rec);
    if (rec.contains("instruction") || rec.contains("output")) return render_alpaca(rec, opt);
    return malformed("no 'messages', 'prompt'/'completion' or 'instruction'/'output' field");
}

bool is_blank(const std::string& s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

}  // namespace

SftDataset::SftDataset(const std::string& path, const Tokenizer& tokenizer, int seq_len,
                       const SftOptions& options, uint64_t seed, double val_fraction)
    : path_(path), seq_len_(seq_len), seed_(seed) {
    ETE_CHECK(seq_len > 0, "data.sft: seq_len is {}, expected > 0", seq_len);
    ETE_CHECK(val_fraction >= 0.0 && val_fraction < 1.0,
              "data.sft: validation fraction is {}, expected in [0, 1)", val_fraction);
    ETE_CHECK(options.prompt_template.find("{instruction}") != std::string::npos &&
                  options.prompt_template_no_input.find("{instruction}") != std::string::npos,
              "data.sft_prompt_template and data.sft_prompt_template_no_input must contain "
              "'{{instruction}}'");
    pad_id_ = tokenizer.eos_id() >= 0 ? tokenizer.eos_id() : 0;
    read_jsonl(tokenizer, options);
    check_bad_lines(options);
    if (options.warn && (stats_.num_truncated > 0 || stats_.num_no_target > 0))
        log_warn(
            "data.sft: '{}': {} examples truncated to seq_len + 1 = {} tokens, {} dropped "
            "with no response token inside it",
            path, stats_.num_truncated, seq_len + 1, stats_.num_no_target);

    const uint64_t n = num_examples();
    const uint64_t v =
        (val_fraction > 0.0 && n >= 2)
            ? std::max<uint64_t>(
                  1, static_cast<uint64_t>(std::ceil(val_fraction * static_cast<double>(n))))
            : 0;
    ETE_CHECK(n > v,
              "data.sft: '{}' has {} usable examples, {} of them for validation: expected at "
              "least one training example",
              path, n, v);
    num_train_ = n - v;
    num_train_samples_ = num_train_;
    if (options.pack) pack_rows();
    schedule_ = EpochSchedule(num_train_samples_, seed_, options.shuffle);
}

void SftDataset::pack_rows() {
    packed_ = true;
    const uint64_t t = static_cast<uint64_t>(seq_len_);
    uint64_t used = 0, filled = 0;  // positions used in the open row; example positions in all
    auto close_row = [&] {
        if (row_list_.size() > row_offsets_.back()) row_offsets_.push_back(row_list_.size());
        used = 0;
    };
    for (uint64_t e = 0; e < num_examples(); ++e) {
        if (e == num_train_) {
            close_row();  // validation examples never share a row with training ones
            num_train_samples_ = row_offsets_.size() - 1;
        }
        const uint64_t len = offsets_[e + 1] - offsets_[e] - 1;  // positions of example e
        if (used + len > t) close_row();
        row_list_.push_back(e);
        used += len;
        filled += len;
    }
    close_row();
    if (num_train_ == num_examples()) num_train_samples_ = row_offsets_.size() - 1;
    stats_.num_rows = row_offsets_.size() - 1;
    stats_.fill = static_cast<double>(filled) / static_cast<double>(stats_.num_rows * t);
    log_info("data.sft: packed {} examples into {} rows of {} positions ({:.1f}% filled)",
             num_examples(), stats_.num_rows, t, 100.0 * stats_.fill);
}

void SftDataset::read_jsonl(const Tokenizer& tokenizer, const SftOptions& options) {
    std::error_code ec;
    ETE_CHECK(!std::filesystem::exists(path_, ec) || std::filesystem::is_regular_file(path_, ec),
              "data.sft '{}': not a regular file (a device or FIFO)", path_);
    std::ifstream in(path_, std::ios::binary);
    ETE_CHECK(in.good(), "data.sft: cannot open '{}'", path_);
    const int32_t eos = tokenizer.eos_id();
    std::string line;
    std::vector<int32_t> ids;
    std::vector<uint8_t> trained;
    for (uint64_t line_no = 1; std::getline(in, line); ++line_no) {
        if (is_blank(line)) continue;
        ++stats_.num_lines;
        Rendered r = render_line(line, options);
        if (!r.error.empty()) {
            ++stats_.num_bad;
            if (stats_.first_bad.size() < kSftKeptBadLines)
                stats_.first_bad.push_back({line_no, r.error});
            if (options.warn && stats_.num_bad <= kWarnedBadLines)
                log_warn("data.sft: {}:{}: skipped: {}", path_, line_no, r.error);
            continue;
        }
        // The post-processor's prefix first (Llama's <s>, Llama-3's <|begin_of_text|>), as HF's
        // tokenizer(text) adds it; it is context, not a target.
        // A chat template writes its own special tokens (apply_chat_template(tokenize=True)).
        if (r.templated) {
            ids.clear();
        } else {
            ids.assign(tokenizer.special_prefix().begin(), tokenizer.special_prefix().end());
        }
        trained.assign(ids.size(), 0);
        for (const Segment& seg : r.segments) {
            tokenizer.encode_append(seg.text, ids);
            trained.resize(ids.size(), seg.trained ? 1 : 0);
        }
        if (eos >= 0 && !r.templated) {
            ids.push_back(eos);
            trained.push_back(1);
        }
        add_example(ids, trained);
    }
    ETE_CHECK(!in.bad(), "data.sft: error reading '{}'", path_);
}

void SftDataset::check_bad_lines(const SftOptions& options) const {
    const double max_bad_fraction = options.max_bad_fraction;
    if (stats_.num_bad == 0) return;
    const double share =
        static_cast<double>(stats_.num_bad) / static_cast<double>(stats_.num_lines);
    const SftBadLine& first = stats_.first_bad.front();
    ETE_CHECK(share <= max_bad_fraction,
              "data.sft: '{}' has {} malformed lines of {} ({:.1f}%, above max_bad_fraction "
              "{}); first at line {}: {}",
              path_, stats_.num_bad, stats_.num_lines, 100.0 * share, max_bad_fraction, first.line,
              first.reason);
    if (options.warn)
        log_warn("data.sft: '{}': skipped {} malformed lines of {}", path_, stats_.num_bad,
                 stats_.num_lines);
}

void SftDataset::add_example(const std::vector<int32_t>& ids, const std::vector<uint8_t>& trained) {
    ETE_ASSERT(ids.size() == trained.size());
    const size_t window = static_cast<size_t>(seq_len_) + 1;
    const size_t n = std::min(ids.size(), window);
    if (ids.size() > window) ++stats_.num_truncated;
    // Token 0 is never a target, so it alone does not count as a response token.
    if (n < 2 || std::find(trained.begin() + 1, trained.begin() + n, 1) == trained.begin() + n) {
        ++stats_.num_no_target;
        return;
    }
    tokens_.insert(tokens_.end(), ids.begin(), ids.begin() + n);
    trained_.insert(trained_.end(), trained.begin(), trained.begin() + n);
    offsets_.push_back(tokens_.size());
}

void SftDataset::fill_example(uint64_t e, int32_t* inputs, int32_t* targets) const {
    ETE_ASSERT(e < num_examples());
    const size_t t = static_cast<size_t>(seq_len_);
    const size_t begin = offsets_[e], n = offsets_[e + 1] - begin;
    const int32_t* x = tokens_.data() + begin;
    const uint8_t* trained = trained_.data() + begin;
    for (size_t j = 0; j < t; ++j) {
        inputs[j] = j < n ? x[j] : pad_id_;
        targets[j] = (j + 1 < n && trained[j + 1]) ? x[j + 1] : kSftIgnoreIndex;
    }
}

void SftDataset::fill_row(uint64_t r, int32_t* inputs, int32_t* targets, int32_t* doc_start) const {
    ETE_ASSERT(packed_ && r + 1 < row_offsets_.size());
    const int32_t t = seq_len_;
    int32_t j = 0;
    for (uint64_t k = row_offsets_[r]; k < row_offsets_[r + 1]; ++k) {
        const uint64_t begin = offsets_[row_list_[k]];
        const int32_t len = static_cast<int32_t>(offsets_[row_list_[k] + 1] - begin - 1);
        ETE_ASSERT(j + len <= t);
        for (int32_t i = 0; i < len; ++i, ++j) {
            inputs[j] = tokens_[begin + i];
            targets[j] = trained_[begin + i + 1] ? tokens_[begin + i + 1] : kSftIgnoreIndex;
            doc_start[j] = j - i;
        }
    }
    for (const int32_t pad_start = j; j < t; ++j) {  // the padding is a document of its own
        inputs[j] = pad_id_;
        targets[j] = kSftIgnoreIndex;
        doc_start[j] = pad_start;
    }
}

void SftDataset::fill_sample(uint64_t s, int32_t* inputs, int32_t* targets,
                             int32_t* doc_start) const {
    if (!packed_) return fill_example(s, inputs, targets);
    ETE_CHECK(doc_start != nullptr, "data.sft: packed rows need a doc_start buffer");
    fill_row(s, inputs, targets, doc_start);
}

std::vector<uint64_t> SftDataset::row_examples(uint64_t r) const {
    ETE_CHECK(packed_ && r + 1 < row_offsets_.size(), "data.sft: no packed row {}", r);
    return {row_list_.begin() + static_cast<int64_t>(row_offsets_[r]),
            row_list_.begin() + static_cast<int64_t>(row_offsets_[r + 1])};
}

std::vector<uint64_t> SftDataset::epoch_order(uint64_t epoch) const {
    return schedule_.order(epoch);
}

uint64_t SftDataset::train_sample(uint64_t global_index) {
    return schedule_.at(global_index);
}

void SftDataset::fill_batch(uint64_t first_global_index, int count, int32_t* inputs,
                            int32_t* targets, int32_t* doc_start) {
    ETE_CHECK(count >= 0, "data.sft: batch count {} is negative", count);
    const size_t t = static_cast<size_t>(seq_len_);
    for (int i = 0; i < count; ++i) {
        const uint64_t s = train_sample(first_global_index + static_cast<uint64_t>(i));
        fill_sample(s, inputs + i * t, targets + i * t, doc_start ? doc_start + i * t : nullptr);
    }
}

void SftDataset::fill_val_batch(uint64_t first, int count, int32_t* inputs, int32_t* targets,
                                int32_t* doc_start) const {
    const uint64_t v = num_val_samples();
    ETE_CHECK(v > 0, "data.sft: no validation examples (validation fraction is 0)");
    ETE_CHECK(count >= 0, "data.sft: batch count {} is negative", count);
    const size_t t = static_cast<size_t>(seq_len_);
    for (int i = 0; i < count; ++i) {
        const uint64_t s = num_train_samples_ + (first + static_cast<uint64_t>(i)) % v;
        fill_sample(s, inputs + i * t, targets + i * t, doc_start ? doc_start + i * t : nullptr);
    }
}

}  // namespace ete
