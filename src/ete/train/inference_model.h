// ete/train/inference_model.h — a model dir, optionally with a PEFT LoRA adapter over it, loaded
// for evaluation, generation and export (one process, no training state).
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/model/transformer.h"

namespace ete {

// A PEFT adapter dir given as `dir` (no `adapter`) loads over the base its adapter_config.json
// names (resolve_adapter_dir), as PEFT's AutoPeftModel does.
// With an adapter the base is held as the adapter was trained over it — NF4 for a QLoRA adapter
// (as its metadata says), whether the dir is full precision (quantized on load) or already
// quantized — and each adapter runs at its own rank (rank_pattern).
// An integer model dir (io/int8_dir.h, `ete export int8`) loads as the integer model.
// An adapter is checked against the base's content hash it records (io/peft.h
// check_adapter_base): another base is refused unless allow_base_mismatch.
std::unique_ptr<Transformer> load_inference_model(Backend& be, const std::string& dir,
                                                  const std::string& adapter = "",
                                                  bool allow_base_mismatch = false);
// (base dir, adapter dir) for a model dir and an optional adapter: dir itself when it is a model
// dir or an adapter is given; for an adapter dir alone, the base it names and dir. Throws
// ete::Error naming both when that base is not a model dir here.
std::pair<std::string, std::string> resolve_adapter_dir(const std::string& dir,
                                                        const std::string& adapter);

// The final model of a QAT run (dir/qat.json beside the weights: the spec, the observers and any
// learned weight scale factors) as it trained: fake quantization at every point with those scales,
// frozen. A QAT run over LoRA or QLoRA: dir is the base and `adapter` the run's final adapter dir,
// which holds qat.json.
std::unique_ptr<Transformer> load_fake_quant_model(Backend& be, const std::string& dir,
                                                   const std::string& adapter = "",
                                                   bool allow_base_mismatch = false);

// final/qat.json: the QAT spec, observers and learned weight scale factors (qat.learnable_scale)
// a run ends with (what `ete export int8` reads).
inline constexpr const char* kQatStateFile = "qat.json";
using ScaleFactors = std::map<std::string, std::vector<float>>;  // weight name -> its factors
struct QatState {
    QatSpec spec;
    nlohmann::json observers;  // QatRuntime::state()
    ScaleFactors scale_factors;
};
std::string qat_state_json(const QatSpec& spec, const nlohmann::json& observers,
                           const ScaleFactors& scale_factors = {});
QatState read_qat_state(const std::string& dir);

}  // namespace ete
