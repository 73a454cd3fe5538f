// ete/train/inference_model.h — a model dir, optionally with a PEFT LoRA adapter over it, loaded
// for evaluation, generation and export (one process, no training state).
#pragma once

#include <memory>
#include <string>

#include "ete/backend/backend.h"
#include "ete/model/transformer.h"

namespace ete {

// With an adapter the base is held as the adapter was trained over it — NF4 for a QLoRA adapter
// (as its metadata says), whether the dir is full precision (quantized on load) or already
// quantized — and each adapter runs at its own rank (rank_pattern).
std::unique_ptr<Transformer> load_inference_model(Backend& be, const std::string& dir,
                                                  const std::string& adapter = "");

}  // namespace ete
