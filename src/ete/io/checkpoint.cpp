// ete/io/checkpoint.cpp
#include "ete/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/core/log.h"
#include "ete/io/safetensors.h"

#include <xxhash.h>

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string step_name(int64_t step) {
    return fmt::format("step_{:08d}", step);
}

// Committed checkpoint directories: exactly "step_" + 8 digits.
bool is_committed_name(const std::string& n) {
    return n.size() == 13 && n.rfind("step_", 0) == 0 &&
           std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<fs::path> committed(const std::string& run_dir) {
    std::vector<fs::path> out;
    fs::path root = fs::path(run_dir) / "checkpoints";
    if (!fs::is_directory(root)) return out;
    for (const auto& e : fs::directory_iterator(root)) {
        if (e.is_directory() && is_committed_name(e.path().filename().string())) {
            out.push_back(e.path());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

void fsync_path(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ETE_CHECK(fd >= 0, "checkpoint: cannot open directory '{}'", path);
    int rc = ::fsync(fd);
    ::close(fd);
    ETE_CHECK(rc == 0, "checkpoint: fsync of directory '{}' failed", path);
}

// XXH3-64 of the state without its "checksum" (objects dump sorted, doubles round-trip: a parsed
// state dumps to the same text).
std::string state_checksum(json state) {
    state.erase("checksum");
    const std::string text = state.dump();
    return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

}  // namespace

void check_finite(const std::string& name, const float* v, size_t n) {
    const size_t bad = size_t(first_non_finite(v, int64_t(n)));
    ETE_CHECK(bad == n,
              "parameter '{}' holds a non-finite value ({} at element {}): not saved, so the last "
              "saved checkpoint stays the newest",
              name, v[bad], bad);
}

namespace {

// One f32 tensor per trainable parameter, `prefix + name`, its values fetched by `get` into a
// buffer of that tensor alone as the writer reaches it.
std::vector<StreamedTensor> streamed(const ParamTable& table,
                                     const std::function<void(int, float*)>& get,
                                     const std::string& prefix) {
    std::vector<StreamedTensor> out;
    for (int i = 0; i < table.size(); ++i) {
        const ParamSpec& s = table.specs()[size_t(i)];
        if (!table.trainable(i)) continue;
        const bool weights = prefix.empty();
        out.push_back({prefix + s.name, DType::F32, s.shape,
                       [&table, &get, i, weights, name = s.name](FileSink& sink) {
                           std::vector<float> v(size_t(table.numel(i)));
                           get(i, v.data());
                           if (weights) check_finite(name, v.data(), v.size());
                           sink.write(v.data(), v.size() * sizeof(float));
                       }});
    }
    return out;
}

// Hands every parameter-shaped tensor `prefix + name` of a file to `take`, one at a time.
void read_into(const SafetensorsFile& f, const ParamTable& table,
               const std::function<void(int, const float*)>& take, const std::string& prefix) {
    for (int i = 0; i < table.size(); ++i) {
        if (!table.trainable(i)) continue;
        const ParamSpec& s = table.specs()[size_t(i)];
        std::string n = prefix + s.name;
        ETE_CHECK(f.has(n), "{}: tensor '{}' is missing", f.path(), n);
        ETE_CHECK(f.info(n).shape == s.shape && f.info(n).dtype == DType::F32,
                  "{}: tensor '{}' is {} {}, expected F32 {}", f.path(), n,
                  dtype_name(f.info(n).dtype), shape_str(f.info(n).shape), shape_str(s.shape));
        Tensor t = f.to_f32(n);
        f.release(n);
        take(i, t.f32());
    }
}

// Each tensor's slice of its global shape; whole tensors until the parallel layouts land.
std::string slices_metadata(const ParamTable& table) {
    json j = json::object();
    for (int i = 0; i < table.size(); ++i) {
        if (!table.trainable(i)) continue;
        const ParamSpec& s = table.specs()[size_t(i)];
        j[s.name] = {{"global_shape", s.shape},
                     {"offset", std::vector<int64_t>(s.shape.size(), 0)}};
    }
    return j.dump();
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const CheckpointState& st,
                            const HostParams& store, const std::vector<HostState>& states,
                            const std::string& config_toml) {
    auto from = [&store](const float* base) {
        return [&store, base](int i, float* out) {
            std::copy(base + store.offset(i), base + store.offset(i) + store.numel(i), out);
        };
    };
    CheckpointSource src{from(store.data()), {}};
    for (const HostState& s : states) src.states.emplace_back(s.name, from(s.values));
    return save_checkpoint(run_dir, st, store, src, config_toml);
}

std::string save_checkpoint(const std::string& run_dir, const CheckpointState& st,
                            const ParamTable& table, const CheckpointSource& src,
                            const std::string& config_toml) {
    fs::path root = fs::path(run_dir) / "checkpoints";
    fs::create_directories(root);
    fs::path final_dir = root / step_name(st.step);
    fs::path tmp = root / (step_name(st.step) + ".tmp." + std::to_string(::getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    json state = {{"format_version", kCheckpointFormatVersion},
                  {"step", st.step},
                  {"optimizer_steps", st.optimizer_steps},
                  {"data_position", st.data_position},
                  {"run", st.run},
                  {"extra", st.extra}};
    std::string meta = slices_metadata(table);
    try {
        json files = json::object();
        auto record = [&](const char* name, uint64_t digest) {
            files[name] = {{"bytes", fs::file_size(tmp / name)},
                           {"xxh3_64", fmt::format("{:016x}", digest)}};
        };
        record("model.safetensors",
               write_safetensors_streamed(
                   (tmp / "model.safetensors").string(), streamed(table, src.param, ""),
                   {{"format", "ete"}, {"layout", "ete"}, {"slices", meta}}));
        std::vector<StreamedTensor> opt;
        for (const auto& [name, fetch] : src.states) {
            auto t = streamed(table, fetch, name + ".");
            opt.insert(opt.end(), t.begin(), t.end());
        }
        record("optimizer.safetensors",
               write_safetensors_streamed((tmp / "optimizer.safetensors").string(), opt,
                                          {{"format", "ete"}}));
        record("config.toml", write_file_atomic((tmp / "config.toml").string(), config_toml));
        state["files"] = files;
        state["checksum"] = state_checksum(state);
        write_file_atomic((tmp / "state.json").string(), state.dump(2) + "\n");  // written last
        fsync_path(tmp.string());
    } catch (const std::exception& e) {
        // A partial save must not stay behind: on a full disk it would make every retry fail.
        std::error_code ec;
        fs::remove_all(tmp, ec);
        throw_error(fmt::format("checkpoint '{}': {} (the partial save was removed)",
                                final_dir.string(), e.what()));
    }
    // A re-save of the same step replaces the old directory in one exchange; where the file
    // system cannot exchange, the old one leaves under `old` first and a crash between the
    // renames leaves it complete there (prune_checkpoints puts it back).
    fs::path old = root / (step_name(st.step) + ".tmp.old." + std::to_string(::getpid()));
    std::error_code ec;
    try {
        replace_dir(tmp.string(), final_dir.string(), old.string());
        fsync_path(root.string());
    } catch (const std::exception& e) {
        fs::remove_all(tmp, ec);
        throw_error(fmt::format("checkpoint '{}': {} (the new save was removed)",
                                final_dir.string(), e.what()));
    }
    fs::remove_all(old, ec);
    return final_dir.string();
}

CheckpointState load_checkpoint(const std::string& dir, HostParams& store,
                                const std::vector<HostState>& states, bool verify) {
    auto into = [&store](float* base) {
        return [&store, base](int i, const float* values) {
            std::copy(values, values + store.numel(i), base + store.offset(i));
        };
    };
    CheckpointSink sink{into(store.data()), {}};
    for (const HostState& s : states) sink.states.emplace_back(s.name, into(s.values));
    return load_checkpoint(dir, store, sink, verify);
}

CheckpointState load_checkpoint(const std::string& dir, const ParamTable& table,
                                const CheckpointSink& sink, bool verify) {
    fs::path d(dir);
    ETE_CHECK(is_committed_name(d.filename().string()) && fs::is_directory(d),
              "checkpoint '{}': expected a committed checkpoint directory step_XXXXXXXX", dir);
    std::string state_path = (d / "state.json").string();
    json state = read_json_file(state_path);
    int version = state.value("format_version", -1);
    ETE_CHECK(version == kCheckpointFormatVersion,
              "{}: format_version {} is not supported "
              "(this ETE reads version {})",
              state_path, version, kCheckpointFormatVersion);
    const std::string bad = verify ? checkpoint_problem(dir) : "";
    ETE_CHECK(bad.empty(), "checkpoint '{}': {}", dir, bad);
    read_into(SafetensorsFile::open((d / "model.safetensors").string()), table, sink.param, "");
    SafetensorsFile opt = SafetensorsFile::open((d / "optimizer.safetensors").string());
    for (const auto& [name, take] : sink.states) read_into(opt, table, take, name + ".");
    CheckpointState st;
    try {
        st.step = state.at("step").get<int64_t>();
        st.optimizer_steps = state.at("optimizer_steps").get<int64_t>();
        st.data_position = state.at("data_position").get<uint64_t>();
        st.run = state.at("run");
        if (state.contains("extra")) st.extra = state.at("extra");
    } catch (const json::exception& e) {
        throw_error(fmt::format("{}: expected step, optimizer_steps, data_position and run ({})",
                                state_path, e.what()));
    }
    return st;
}

std::string checkpoint_problem(const std::string& dir) {
    const fs::path d(dir);
    json state;
    try {
        state = read_json_file((d / "state.json").string());
    } catch (const std::exception& e) {
        return fmt::format("state.json is unreadable ({})", e.what());
    }
    // An older ETE wrote neither; one without the other was edited.
    if (!state.contains("files") && !state.contains("checksum")) {
        log_warn("checkpoint '{}' has no content hashes (saved by an older ETE): not verified",
                 dir);
        return "";
    }
    if (!state.contains("files"))
        return "state.json was changed after it was saved (its file hashes were removed)";
    if (!state.contains("checksum") || !state["checksum"].is_string() ||
        state["checksum"].get<std::string>() != state_checksum(state))
        return "state.json was changed after it was saved (its checksum does not match)";
    try {
        for (const auto& [name, want] : state["files"].items()) {
            const fs::path f = d / name;
            if (!fs::is_regular_file(f)) return fmt::format("{} is missing", name);
            const uint64_t bytes = want.at("bytes").get<uint64_t>(), size = fs::file_size(f);
            if (size != bytes)
                return fmt::format("{} is {} bytes, {} when it was saved (truncated or replaced)",
                                   name, size, bytes);
            const std::string got = fmt::format("{:016x}", file_digest(f.string()));
            if (got != want.at("xxh3_64").get<std::string>())
                return fmt::format("{} does not match its content hash (corrupt or replaced)",
                                   name);
        }
    } catch (const json::exception& e) {
        return fmt::format("state.json: files: {}", e.what());
    }
    return "";
}

std::optional<std::string> newest_verified_checkpoint(const std::string& run_dir) {
    auto all = committed(run_dir);
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        const std::string problem = checkpoint_problem(it->string());
        if (problem.empty()) return it->string();
        log_warn("resume auto: skipping checkpoint '{}': {}", it->string(), problem);
    }
    return std::nullopt;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
    auto all = committed(run_dir);
    if (all.empty()) return std::nullopt;
    return all.back().string();
}

void recover_checkpoint_dirs(const std::string& run_dir) {
    fs::path root = fs::path(run_dir) / "checkpoints";
    if (!fs::is_directory(root)) return;
    const std::string mine = "." + std::to_string(::getpid());
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename());
    for (const std::string& n : names) {
        const size_t at = n.find(".tmp.");
        if (at == std::string::npos) continue;
        if (n.size() >= mine.size() && n.compare(n.size() - mine.size(), mine.size(), mine) == 0)
            continue;  // this process's save in progress
        // A complete old copy set aside by a save killed before its new copy took the name
        // (file systems without RENAME_EXCHANGE): the only copy of that step, so it goes back.
        const fs::path committed_name = root / n.substr(0, at);
        if (n.compare(at, 9, ".tmp.old.") == 0 && !fs::exists(committed_name)) {
            fs::rename(root / n, committed_name);
            log_warn("checkpoint {}: restored from {} (a save was killed while replacing it)",
                     committed_name.string(), n);
            continue;
        }
        fs::remove_all(root / n);  // a save killed half-way: never loaded
    }
}

void prune_checkpoints(const std::string& run_dir, int keep) {
    recover_checkpoint_dirs(run_dir);
    if (keep <= 0) return;
    auto all = committed(run_dir);
    for (size_t i = 0; i + size_t(keep) < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace ete
