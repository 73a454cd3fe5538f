// fuzz/model_dirs_fuzz.cpp — libFuzzer target for the readers of the model dirs a user hands ETE
// beside a base model: a PEFT LoRA adapter dir (io/peft.h: adapter_config.json with its rank and
// alpha patterns, adapter_model.safetensors), bitsandbytes NF4 weights (io/bnb_nf4.h: codes,
// absmax, maps and quant state) and an integer model's quantization_config (io/int8_dir.h).
//
// The first byte of an input picks the reader (mod 3); the rest is:
//   0  u32 LE n, n bytes of adapter_config.json, then adapter_model.safetensors
//   1  a safetensors file whose quantized weights are read against the tiny Llama's shapes
//   2  the text of a quantization_config object
// All read against one tiny Llama (hidden 32, intermediate 32, one layer, 2 heads, 1 kv head,
// vocab 64; fuzz/make_model_dir_seeds.sh writes seeds for it). ete::Error is the expected
// rejection; any other exception, a crash, a sanitizer report, or an accepted input that breaks a
// reader's promise (a non-finite adapter value or dequantized weight, a rank outside its tensor,
// a non-positive scale) is a bug.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/core/json_file.h"
#include "ete/io/bnb_nf4.h"
#include "ete/io/int8_dir.h"
#include "ete/io/peft.h"

namespace {

namespace fs = std::filesystem;

void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "model_dirs_fuzz: invariant failed: %s\n", what);
    std::abort();
}

const ete::ModelConfig& tiny() {
    static const ete::ModelConfig c = [] {
        ete::ModelConfig m;
        m.vocab_size = 64;
        m.hidden_size = 32;
        m.intermediate_size = 32;
        m.num_layers = 1;
        m.num_heads = 2;
        m.num_kv_heads = 1;
        m.max_position_embeddings = 16;
        return m;
    }();
    return c;
}

// One scratch dir per process, removed at exit (the name outlives every static destructor).
const std::string& scratch_dir() {
    static const std::string* dir = [] {
        const fs::path d =
            fs::temp_directory_path() / ("ete_model_dirs_fuzz." + std::to_string(::getpid()));
        fs::create_directories(d);
        auto* s = new std::string(d.string());
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(*dir, ec);
        });
        return s;
    }();
    return *dir;
}

// Plain writes (no fsync: the files are scratch, rewritten every input).
void write(const std::string& name, const uint8_t* data, size_t size) {
    std::ofstream out(scratch_dir() + "/" + name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    require(bool(out), "cannot write the scratch file");
}

void adapter_dir(const uint8_t* data, size_t size) {
    if (size < 4) return;
    uint32_t n = 0;
    std::memcpy(&n, data, 4);
    data += 4;
    size -= 4;
    n = uint32_t(std::min<size_t>(n, size));
    write("adapter_config.json", data, n);
    write("adapter_model.safetensors", data + n, size - n);
    const ete::ModelConfig& c = tiny();
    const ete::PeftAdapterInfo info = ete::load_peft_config(scratch_dir(), c);
    const ete::ParamTable table(ete::param_specs(c, {}, info.spec));
    ete::load_peft_weights(scratch_dir(), c, table, [&](int i, const float* v) {
        const ete::ParamSpec& s = table.specs()[size_t(i)];
        for (int64_t k = 0; k < ete::shape_numel(s.shape); ++k)
            require(std::isfinite(v[k]), "an accepted adapter holds a non-finite value");
        const std::string module = s.name.substr(0, s.name.rfind(".lora_"));
        const int r = info.rank_of(module);
        require(r >= 1 && r <= info.spec.r_max, "a rank outside the adapter's tensors");
        const float scale = info.scale_of(module);
        require(std::isfinite(scale) && scale > 0, "a non-finite or non-positive scale");
    });
}

void nf4_weights(const uint8_t* data, size_t size) {
    write("model.safetensors", data, size);
    const auto f = ete::SafetensorsFile::open(scratch_dir() + "/model.safetensors");
    const ete::ParamTable table(ete::param_specs(tiny()));
    for (const std::string& name : f.names()) {
        if (!table.has(name) || !ete::is_bnb_quantized(f, name)) continue;
        const ete::ParamSpec& s = table.specs()[size_t(table.index(name))];
        const ete::Nf4Tensor t = ete::read_bnb_nf4(f, name, s.global_shape);
        std::vector<float> w(size_t(t.numel()));
        ete::nf4_dequantize(t, w.data());
        for (float x : w)
            require(std::isfinite(x), "an accepted NF4 weight dequantizes non-finite");
    }
}

void int8_config(const uint8_t* data, size_t size) {
    const nlohmann::json qc = ete::parse_json(
        std::string_view(reinterpret_cast<const char*>(data), size), "quantization_config");
    const ete::Int8Model m = ete::read_int8_config(qc, tiny(), "config.json");
    for (const auto& [key, sz] : m.act_scales)
        require(std::isfinite(sz.first) && sz.first > 0, "an accepted activation scale <= 0");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    try {
        switch (data[0] % 3) {
            case 0:
                adapter_dir(data + 1, size - 1);
                break;
            case 1:
                nf4_weights(data + 1, size - 1);
                break;
            default:
                int8_config(data + 1, size - 1);
        }
    } catch (const ete::Error&) {
        // expected: a rejected input
    }
    return 0;
}
