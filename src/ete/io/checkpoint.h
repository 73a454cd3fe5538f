// ete/io/checkpoint.h — resumable training state (DESIGN.md §7).
//
// RUN/checkpoints/step_XXXXXXXX/ holds:
//   model.safetensors      every parameter under its HF name, in ETE layout (linears (out, in)),
//                          with `__metadata__` recording each tensor's slice of the global shape
//   optimizer.safetensors  the optimizer's state, `<state>.<name>` F32 per trainable parameter
//                          (same layout; optim/optimizer.h: AdamW and 8-bit AdamW both write
//                          `exp_avg.<name>` and `exp_avg_sq.<name>`, the moments' values)
//   state.json             format version, step, optimizer step count, data position, seed, the
//                          model config and the run settings that a resume must not change, and
//                          `extra` state (the fp16 loss scaler)
//   config.toml            the resolved run config
//   state.json also records each file's size and XXH3-64 content hash and its own checksum,
//   verified before a resume uses any of it (checkpoint_problem).
// It is written under `step_XXXXXXXX.tmp.<pid>`, every file fsynced, then renamed: a directory
// named step_XXXXXXXX is complete. Only such directories are ever loaded.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ete/model/param_store.h"

namespace ete {

constexpr int kCheckpointFormatVersion = 1;

struct CheckpointState {
    int64_t step = 0;             // optimizer steps completed
    int64_t optimizer_steps = 0;  // the optimizer's t (AdamW's bias-correction counter)
    uint64_t data_position = 0;   // global sample index of the next micro-batch
    nlohmann::json run;           // settings a resume checks (model config, seed, data, batch)
    // Further training state restored as is (the fp16 loss scaler); an object, empty if none.
    nlohmann::json extra = nlohmann::json::object();
};

// One named optimizer state in host memory: flat, at the parameters' offsets.
struct HostState {
    std::string name;
    float* values;
};

// Writes RUN/checkpoints/step_XXXXXXXX/ atomically; returns its path.
std::string save_checkpoint(const std::string& run_dir, const CheckpointState& st,
                            const HostParams& store, const std::vector<HostState>& states,
                            const std::string& config_toml);

// The same directory with every tensor fetched as it is written: param(i, out) and each state's
// fetch(i, out) put trainable parameter i's numel(i) F32 values into out, so the caller never
// holds the model or a state whole (one tensor at a time).
struct CheckpointSource {
    std::function<void(int, float*)> param;
    std::vector<std::pair<std::string, std::function<void(int, float*)>>> states;
};
std::string save_checkpoint(const std::string& run_dir, const CheckpointState& st,
                            const ParamTable& table, const CheckpointSource& src,
                            const std::string& config_toml);

// Reads a committed checkpoint into store and the named states; returns its state. Names,
// shapes and the format version are checked against the store; a state the file lacks is an
// error naming it. verify = false skips checkpoint_problem when the caller just verified the
// same directory.
CheckpointState load_checkpoint(const std::string& dir, HostParams& store,
                                const std::vector<HostState>& states, bool verify = true);
// The same, handing each tensor over as it is read: param(i, values) and each state's
// take(i, values) get trainable parameter i's numel(i) F32 values, valid for the call (one
// tensor in host memory at a time; its file pages are released after the call).
struct CheckpointSink {
    std::function<void(int, const float*)> param;
    std::vector<std::pair<std::string, std::function<void(int, const float*)>>> states;
};
CheckpointState load_checkpoint(const std::string& dir, const ParamTable& table,
                                const CheckpointSink& sink, bool verify = true);

// Throws naming the parameter when any of its n values is NaN or infinite: weights that became
// non-finite are never written (a checkpoint save fails, its temporary directory is removed, the
// previous checkpoints stay).
void check_finite(const std::string& name, const float* v, size_t n);

// What is wrong with committed checkpoint `dir`, "" when it verifies: state.json's checksum and
// every file's size and XXH3-64 content hash, as recorded when it was saved (a flipped byte, a
// truncated or swapped file). A checkpoint of an older ETE without hashes verifies (warned).
// load_checkpoint refuses one that does not.
std::string checkpoint_problem(const std::string& dir);
// The newest committed checkpoint that verifies; each newer one that does not is named in a
// warning with its problem (`--resume auto` falls back past it).
std::optional<std::string> newest_verified_checkpoint(const std::string& run_dir);

// The newest committed checkpoint of a run, if any (temporary directories are ignored).
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// What saves killed by another process left in run_dir/checkpoints: half-written directories are
// deleted; an old copy set aside while being replaced (file systems without RENAME_EXCHANGE,
// core/file_util.h replace_dir) whose step has no committed directory is put back (a warning).
void recover_checkpoint_dirs(const std::string& run_dir);

// recover_checkpoint_dirs, then deletes committed checkpoints beyond the newest `keep` (keep <= 0
// keeps all).
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace ete
