// Checkpoints of a peer's state: the file format, writing a file durably, and finding the newest
// one that verifies (scenario key `checkpoint`, `node-launcher run --resume`; README.md
// "Checkpoint and resume").
//
// A checkpoint is OUT/checkpoints/rank-R/round-NNNNNNNNN.ckpt, written after round N completed
// (N rounds done): everything a peer needs to continue at round N exactly as if it had never
// stopped. The file, all integers little-endian:
//   header (64 bytes): magic "STRLCKPT", u32 format version (1), u32 header size (64),
//                      u64 scenario hash (scenarioHash), u64 rank, u64 round,
//                      u64 peer-log bytes (the length of peers/rank-R.jsonl when it was taken),
//                      u64 payload length, 8 zero bytes;
//   payload:           fields in the order the state visits them (core/state.h), each
//                      u16 name length, name, u8 type (1 u64, 2 float64, 3 float32, 4 text),
//                      u64 count, then count values (text: count bytes);
//   trailer:           u32 CRC32C of header and payload.
// Any truncation or flipped bit fails the length or CRC check (the unit test tries them all).
// Writing goes to a temporary file, fsync, rename, fsync of the folder; older files beyond the
// newest `keep` are deleted only once the new one is durable.
// Thread-safety: free functions and values; the visitors are single-threaded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/state.h"
#include "core/status.h"

namespace starling::runtime {

inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr size_t kCheckpointHeaderBytes = 64;
inline constexpr size_t kCheckpointTrailerBytes = 4;

struct CheckpointHeader {
  uint64_t scenarioHash = 0;
  int rank = 0;
  uint64_t round = 0;         // rounds completed
  uint64_t peerLogBytes = 0;  // length of the peer log when the checkpoint was taken
  uint64_t payloadBytes = 0;  // set by encodeCheckpoint
};

// Saves: the visited fields become the payload.
class CheckpointWriter final : public core::StateVisitor {
 public:
  bool loading() const override { return false; }
  void values(std::string_view name, std::span<float> v) override;
  void values(std::string_view name, std::span<double> v) override;
  void sized(std::string_view name, std::vector<float>& v) override;
  void sized(std::string_view name, std::vector<double>& v) override;
  void sized(std::string_view name, std::vector<uint64_t>& v) override;
  void scalar(std::string_view name, uint64_t& v) override;
  void scalar(std::string_view name, double& v) override;
  void text(std::string_view name, std::string& s) override;
  using core::StateVisitor::scalar;

  const std::string& payload() const { return payload_; }

 private:
  void field(std::string_view name, uint8_t type, uint64_t count, const void* data, size_t bytes);
  std::string payload_;
};

// Loads: each visited field must be the payload's next one, with the same name and type, and the
// size the object expects for fixed vectors. finish() fails when fields are left over.
class CheckpointReader final : public core::StateVisitor {
 public:
  // `where` names the file in messages.
  CheckpointReader(std::string_view payload, std::string where)
      : payload_(payload), where_(std::move(where)) {}
  bool loading() const override { return true; }
  void values(std::string_view name, std::span<float> v) override;
  void values(std::string_view name, std::span<double> v) override;
  void sized(std::string_view name, std::vector<float>& v) override;
  void sized(std::string_view name, std::vector<double>& v) override;
  void sized(std::string_view name, std::vector<uint64_t>& v) override;
  void scalar(std::string_view name, uint64_t& v) override;
  void scalar(std::string_view name, double& v) override;
  void text(std::string_view name, std::string& s) override;
  using core::StateVisitor::scalar;

  // The status, or an error naming the first field nobody asked for.
  core::Status finish();

 private:
  // The next field, checked against name and type; nullptr after an error.
  const char* next(std::string_view name, uint8_t type, size_t elementBytes, uint64_t* count);
  std::string_view payload_;
  size_t at_ = 0;
  std::string where_;
};

// One field of a payload, as parsed without an object to load it into (the launcher reads the
// membership this way).
struct CheckpointField {
  std::string name;
  uint8_t type = 0;
  uint64_t count = 0;
  std::string_view data;
};
core::Result<std::vector<CheckpointField>> checkpointFields(std::string_view payload);
// The values of a u64 field, or nullopt when there is no such field.
std::optional<std::vector<uint64_t>> checkpointU64s(const std::vector<CheckpointField>& fields,
                                                    std::string_view name);

// Header + payload + CRC (sets header.payloadBytes).
std::string encodeCheckpoint(CheckpointHeader header, std::string_view payload);

struct Checkpoint {
  CheckpointHeader header;
  std::string payload;
};
// Checks magic, version, sizes and CRC; kCorruption saying what is wrong ("truncated: 1,234 of
// 5,678 bytes", "checksum mismatch", ...). `where` names the file.
core::Result<Checkpoint> decodeCheckpoint(std::string_view bytes, const std::string& where);
core::Result<Checkpoint> readCheckpoint(const std::filesystem::path& path);

// OUT/checkpoints/rank-R and the file of one round in it.
std::filesystem::path checkpointDir(const std::filesystem::path& outDir, int rank);
std::filesystem::path checkpointPath(const std::filesystem::path& outDir, int rank,
                                     uint64_t round);

// Writes the checkpoint of `header.round` into checkpointDir(outDir, header.rank) durably (temp
// file, fsync, rename, fsync of the folder), then deletes all but the newest `keep` checkpoints
// there and any temporary file a killed writer left. kIoError names the file.
core::Status writeCheckpoint(const std::filesystem::path& outDir, const CheckpointHeader& header,
                             std::string_view payload, uint64_t keep);

// The rounds of the checkpoint files in `dir` (by name; not verified), newest first.
std::vector<uint64_t> checkpointRounds(const std::filesystem::path& dir);

// Deletes the checkpoints in `dir` of rounds after `round` (a resume from `round` runs them
// again; their peer-log lengths no longer hold).
core::Status removeCheckpointsAfter(const std::filesystem::path& dir, uint64_t round);

}  // namespace starling::runtime
