// ete/data/sft.h — supervised fine-tuning examples from JSONL, with the prompt masked out of the
// loss.
//
// Each line is one record in one of three forms (with SftOptions::chat_template set, chat
// records render through the model's own template instead: data/sft_chat.h):
//   Alpaca  {"instruction": s, "input": s (optional, may be empty), "output": s}
//   Plain   {"prompt": s, "completion": s}
//   Chat    {"messages": [{"role": "system" | "user" | "assistant", "content": s}, ...]}
// A record renders to text segments, each trained on or not: Alpaca fills
// SftOptions::prompt_template (or prompt_template_no_input when the input is empty) and trains on
// the output; Plain uses the prompt as is and trains on the completion; Chat renders each message
// as "<|{role}|>\n{content}\n" and trains only on assistant contents. The tokenizer's template
// prefix (its BOS, as HF's tokenizer(text) adds it) comes first, not trained on; the model's eos
// (tokenizer_config.json, else generation_config.json, else by name; if it has one) follows and
// is trained on. Segments are encoded separately, so token boundaries fall
// on segment boundaries and the mask is exact.
//
// Rows: with T = seq_len and an example of n tokens x[0..n) (truncated to n <= T + 1), row
// position j < T has input x[j] (the pad id for j >= n) and target x[j + 1] when j + 1 < n and
// x[j + 1] is trained on, else kSftIgnoreIndex. Pad id = eos, or 0 without one.
//
// Packing (SftOptions::pack): examples are laid end to end, each taking n - 1 positions (inputs
// x[0..n-1), targets x[1..n) masked as above), in file order; an example that does not fit in
// the rest of a row starts the next one, and the tail of a row is padding (pad id, ignored
// targets, a document of its own). doc_start gives each position its example's first position,
// so attention stays inside the example and positions restart at 0 (batch_source.h). A sample
// is then a packed row: training rows hold only training examples, validation rows only
// validation examples, and the epoch order shuffles rows.
//
// Split and order: the last V examples (file order) are validation, V = ceil(val_fraction * N)
// but at least 1 when val_fraction > 0 and N >= 2. With Nt training samples (examples, or rows
// when packed), training sample g is shuffle_epoch_order(Nt, seed, g / Nt)[g mod Nt]
// (loader.h), a pure function of (seed, g).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ete/data/batch_source.h"
#include "ete/data/loader.h"
#include "ete/data/sft_chat.h"
#include "ete/data/tokenizer.h"

namespace ete {

// Equals ete::kIgnoreIndex (ete/backend/backend.h), which the data layer does not depend on.
inline constexpr int32_t kSftIgnoreIndex = -100;

struct SftOptions {
    // Alpaca templates; "{instruction}" and "{input}" are replaced once each (the inserted text
    // is never rescanned, so braces in the data are safe).
    std::string prompt_template =
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n";
    std::string prompt_template_no_input = "### Instruction:\n{instruction}\n\n### Response:\n";
    double max_bad_fraction = 0.01;  // of non-blank lines; above it construction throws
    bool pack = false;               // several examples per row (see above)
    bool shuffle = true;             // false: every epoch in file order (loader.h)
    // data.sft_chat_template: chat records rendered with the model's template (sft_chat.h);
    // null = ETE's own "<|role|>" format.
    std::shared_ptr<const SftChatTemplate> chat_template;
    // false: no warnings about the file's lines (the ranks of a job other than world rank 0 read
    // the same file and would repeat them); errors are raised alike.
    bool warn = true;
};

struct SftBadLine {
    uint64_t line;  // 1-based
    std::string reason;
};

struct SftStats {
    uint64_t num_lines = 0;             // non-blank lines read
    uint64_t num_bad = 0;               // malformed lines, skipped
    uint64_t num_truncated = 0;         // examples longer than T + 1 tokens, cut to T + 1
    uint64_t num_no_target = 0;         // dropped: no trained token left inside the T + 1 window
    uint64_t num_rows = 0;              // packed rows, training + validation (0 unpacked)
    double fill = 0.0;                  // packed: share of row positions holding an example
    std::vector<SftBadLine> first_bad;  // the first kSftKeptBadLines malformed lines
};
inline constexpr size_t kSftKeptBadLines = 64;

class SftDataset : public BatchSource {
  public:
    // Reads and tokenizes the whole file (the tokenizer is not kept). Throws when T <= 0,
    // val_fraction is outside [0, 1), the file cannot be read, the malformed share exceeds
    // options.max_bad_fraction, or no training example is left.
    SftDataset(const std::string& path, const Tokenizer& tokenizer, int seq_len,
               const SftOptions& options, uint64_t seed, double val_fraction);

    int seq_len() const { return seq_len_; }
    uint64_t num_examples() const { return offsets_.size() - 1; }  // train + val
    uint64_t num_train_examples() const { return num_train_; }
    uint64_t num_train_samples() const override { return num_train_samples_; }
    uint64_t num_val_samples() const override { return num_samples() - num_train_samples_; }
    bool packed() const override { return packed_; }
    const SftStats& stats() const { return stats_; }

    // Not thread-safe: caches one epoch's order. doc_start (count, T) must be non-null when
    // packed() and is ignored otherwise.
    void fill_batch(uint64_t first_global_index, int count, int32_t* inputs, int32_t* targets,
                    int32_t* doc_start = nullptr) override;
    void fill_val_batch(uint64_t first, int count, int32_t* inputs, int32_t* targets,
                        int32_t* doc_start = nullptr) const override;

    // Example e in file order (training 0..Nt-1, then validation) into one row of T each.
    void fill_example(uint64_t e, int32_t* inputs, int32_t* targets) const;
    // Sample s (training samples first, then validation ones): example s, or packed row s.
    void fill_sample(uint64_t s, int32_t* inputs, int32_t* targets, int32_t* doc_start) const;
    // The examples in packed row r, in row order (packed only).
    std::vector<uint64_t> row_examples(uint64_t r) const;
    uint64_t train_sample(uint64_t global_index);  // which training sample g is
    std::vector<uint64_t> epoch_order(uint64_t epoch) const;

  private:
    void read_jsonl(const Tokenizer& tokenizer, const SftOptions& options);
    void check_bad_lines(const SftOptions& options) const;  // throws above the allowed share
    void add_example(const std::vector<int32_t>& ids, const std::vector<uint8_t>& trained);
    void pack_rows();  // examples -> rows_, train rows before validation rows
    void fill_row(uint64_t r, int32_t* inputs, int32_t* targets, int32_t* doc_start) const;
    uint64_t num_samples() const { return packed_ ? row_offsets_.size() - 1 : num_examples(); }

    std::string path_;
    int seq_len_;
    uint64_t seed_;
    int32_t pad_id_ = 0;
    bool packed_ = false;
    uint64_t num_train_ = 0;          // training examples
    uint64_t num_train_samples_ = 0;  // training examples, or training rows when packed
    SftStats stats_;
    // Example e is tokens_[offsets_[e] .. offsets_[e + 1]); trained_ flags the tokens in the loss.
    std::vector<int32_t> tokens_;
    std::vector<uint8_t> trained_;
    std::vector<uint64_t> offsets_{0};
    // Packed row r holds examples row_list_[row_offsets_[r] .. row_offsets_[r + 1]).
    std::vector<uint64_t> row_list_;
    std::vector<uint64_t> row_offsets_{0};
    EpochSchedule schedule_;
};

}  // namespace ete
