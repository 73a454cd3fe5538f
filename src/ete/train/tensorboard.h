// ete/train/tensorboard.h — TensorBoard event files (monitor.tensorboard = true): the scalars of
// metrics.jsonl under RUN/tensorboard/events.out.tfevents.<time>.<host>.<pid>.
//
// A TFRecord stream: each record is its length (uint64 LE), the masked CRC32C of those 8 bytes,
// the bytes of a serialized tensorflow.Event, and their masked CRC32C. The first Event carries
// file_version "brain.Event:2"; each later one wall_time, step and a Summary of simple_value
// scalars. The protobuf wire format is written by hand (six fields), so no protobuf dependency.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ete {

// CRC-32C (Castagnoli), and TFRecord's mask of it: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
  public:
    // Creates RUN/tensorboard/ and a new event file in it (a resumed run adds a file; TensorBoard
    // reads every file of a directory). Throws naming the path when it cannot.
    explicit TensorBoardWriter(const std::string& run_dir);
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // One Event with every (tag, value) of a step; a failed write is warned about once and
    // cut off again (no torn record), like metrics.jsonl's lines.
    void add_scalars(int64_t step, double wall_time,
                     const std::vector<std::pair<std::string, double>>& scalars);
    const std::string& path() const { return path_; }

  private:
    void write_record(const std::string& event);

    int fd_ = -1;
    std::string path_;
    bool failing_ = false;
};

// The serialized tensorflow.Event (exposed for tests).
std::string tb_scalar_event(int64_t step, double wall_time,
                            const std::vector<std::pair<std::string, double>>& scalars);

}  // namespace ete
