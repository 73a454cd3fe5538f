// ete/io/bnb_quantize.cpp — `ete quantize --scheme nf4` (io/bnb_nf4.h): a model dir rewritten
// in bitsandbytes' NF4 layout. The layout's reader and writer are io/bnb_nf4.cpp.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/io/bnb_nf4.h"
#include "ete/io/hf_model.h"
#include "ete/model/param_spec.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

double quantize_model_dir(const std::string& in, const std::string& out,
                          const QuantizeOptions& opt) {
    nf4_check_blocksize(opt.blocksize, "ete quantize --blocksize");
    ETE_CHECK(fs::absolute(in) != fs::absolute(out),
              "ete quantize: --out must differ from --model");
    const ModelConfig cfg = load_hf_config(in);
    json cj = read_json_file((fs::path(in) / "config.json").string());
    ETE_CHECK(!cj.contains("quantization_config"),
              "ete quantize: '{}' is already quantized (its config.json has quantization_config)",
              in);
    const std::string torch_dtype = cj.value("torch_dtype", "float32");
    const DType keep = torch_dtype == "bfloat16"  ? DType::BF16
                       : torch_dtype == "float16" ? DType::F16
                                                  : DType::F32;
    const ParamTable table(param_specs(cfg));
    std::vector<std::pair<std::string, Tensor>> tensors;
    int64_t quantized_params = 0;
    size_t quantized_bytes = 0;
    load_hf_tensors(in, table, [&](int i, const float* v) {
        const ParamSpec& s = table.specs()[size_t(i)];
        if (param_is_decoder_linear(s)) {
            const Nf4Tensor t =
                nf4_quantize(v, s.shape[0], s.shape[1], {opt.blocksize, opt.double_quant});
            append_bnb_nf4(tensors, s.name, t, keep == DType::F32 ? "float32" : torch_dtype);
            quantized_params += t.numel();
            quantized_bytes += t.storage_bytes();
            return;
        }
        std::vector<float> hf(size_t(shape_numel(s.shape)));
        param_to_hf(s, v, hf.data());
        Tensor t = Tensor::empty(hf_shape(s), keep);
        convert_from_f32(t.data(), keep, hf.data(), hf.size());
        tensors.emplace_back(s.name, std::move(t));
    });
    cj["quantization_config"] = {
        {"quant_method", "bitsandbytes"},
        {"load_in_4bit", true},
        {"load_in_8bit", false},
        {"bnb_4bit_quant_type", "nf4"},
        {"bnb_4bit_use_double_quant", opt.double_quant},
        {"bnb_4bit_blocksize", opt.blocksize},
        {"bnb_4bit_compute_dtype", keep == DType::F32 ? "float32" : torch_dtype}};
    write_dir_atomic(out, "ete quantize: writing", [&](const std::string& tmp) {
        write_file_atomic(tmp + "/config.json", cj.dump(2) + "\n");
        write_safetensors(tmp + "/model.safetensors", tensors, {{"format", "pt"}});
        const fs::path tokenizer = fs::path(in) / "tokenizer.json";
        if (fs::exists(tokenizer)) write_tokenizer_files(tmp, tokenizer.string());
        const fs::path gen = fs::path(in) / "generation_config.json";
        if (fs::exists(gen))
            write_file_atomic(tmp + "/generation_config.json", read_file(gen.string()));
    });
    return quantized_params ? 8.0 * double(quantized_bytes) / double(quantized_params) : 0.0;
}

}  // namespace ete
