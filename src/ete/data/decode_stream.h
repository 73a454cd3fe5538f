// ete/data/decode_stream.h — decoding generated tokens one at a time, as HF's DecodeStream does:
// each step prints only the text its token completes. A token alone may be half a character
// (byte-fallback <0xNN> or byte-level pieces) or lose its leading space (SentencePiece "▁"
// tokens at the start of a decode), so the stream decodes a short window of ids and holds text
// back while it ends in an incomplete character (U+FFFD).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ete/data/tokenizer.h"

namespace ete {

class DecodeStream {
  public:
    // `context`: the ids before the stream (the prompt); its last few seed the window, so the
    // first generated token decodes as it does after them (" world" after "Hello").
    DecodeStream(const Tokenizer& t, const std::vector<int32_t>& context, bool skip_special);
    // The text `id` completes; empty while it is held back.
    std::string step(int32_t id);
    // What is still held back, as it decodes now (U+FFFD for an incomplete character).
    std::string finish();

  private:
    const Tokenizer& t_;
    bool skip_special_;
    std::vector<int32_t> ids_;  // the window
    std::string prefix_;        // decode of ids_[0, prefix_index_)
    size_t prefix_index_ = 0;
};

}  // namespace ete
