#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "compression/frame.h"
#include "core/read_file.h"
#include "scenario/scenario_limits.h"

namespace starling::runtime {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'L', 'C', 'K', 'P', 'T'};
constexpr uint8_t kU64 = 1, kF64 = 2, kF32 = 3, kText = 4;

const char* typeName(uint8_t type) {
  switch (type) {
    case kU64: return "u64";
    case kF64: return "float64";
    case kF32: return "float32";
    case kText: return "text";
  }
  return "unknown";
}

void putU16(std::string& out, uint16_t v) {
  for (int b = 0; b < 2; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}
void putU32(std::string& out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}
void putU64(std::string& out, uint64_t v) {
  for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}
uint64_t getLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t{static_cast<unsigned char>(p[b])} << (8 * b);
  return v;
}

uint32_t crcOf(std::string_view bytes) {
  return compression::crc32c(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

// Element values as little-endian bytes (the machine's order on every platform Starling builds
// for; checked so that a big-endian build fails to compile rather than write foreign files).
static_assert(std::endian::native == std::endian::little, "checkpoints assume little-endian");

std::string errnoText() { return std::strerror(errno); }

// Writes all of `bytes` to fd; false with errno on failure.
bool writeAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

core::Status syncDir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return core::ioError("cannot open " + dir.string() + ": " + errnoText());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errnoText() : "";
  ::close(fd);
  if (rc != 0) return core::ioError("fsync " + dir.string() + ": " + why);
  return core::Status::ok();
}

// The round of "round-<digits>.ckpt", or nullopt.
std::optional<uint64_t> roundOfName(const std::string& name) {
  constexpr std::string_view prefix = "round-", suffix = ".ckpt";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 19 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(digits);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writer

void CheckpointWriter::field(std::string_view name, uint8_t type, uint64_t count,
                             const void* data, size_t bytes) {
  if (failed()) return;
  const std::string full = qualified(name);
  if (full.size() > 0xffff) return fail("checkpoint field name too long: " + full);
  putU16(payload_, static_cast<uint16_t>(full.size()));
  payload_ += full;
  payload_.push_back(static_cast<char>(type));
  putU64(payload_, count);
  if (bytes > 0) payload_.append(static_cast<const char*>(data), bytes);
}

void CheckpointWriter::values(std::string_view name, std::span<float> v) {
  field(name, kF32, v.size(), v.data(), v.size_bytes());
}
void CheckpointWriter::values(std::string_view name, std::span<double> v) {
  field(name, kF64, v.size(), v.data(), v.size_bytes());
}
void CheckpointWriter::sized(std::string_view name, std::vector<float>& v) {
  values(name, std::span<float>(v));
}
void CheckpointWriter::sized(std::string_view name, std::vector<double>& v) {
  values(name, std::span<double>(v));
}
void CheckpointWriter::sized(std::string_view name, std::vector<uint64_t>& v) {
  field(name, kU64, v.size(), v.data(), v.size() * sizeof(uint64_t));
}
void CheckpointWriter::scalar(std::string_view name, uint64_t& v) {
  field(name, kU64, 1, &v, sizeof v);
}
void CheckpointWriter::scalar(std::string_view name, double& v) {
  field(name, kF64, 1, &v, sizeof v);
}
void CheckpointWriter::text(std::string_view name, std::string& s) {
  field(name, kText, s.size(), s.data(), s.size());
}

// ---------------------------------------------------------------------------------------------
// Reader

const char* CheckpointReader::next(std::string_view name, uint8_t type, size_t elementBytes,
                                   uint64_t* count) {
  if (failed()) return nullptr;
  const std::string want = qualified(name);
  const auto bad = [&](const std::string& why) {
    fail(where_ + ": " + why);
    return nullptr;
  };
  const size_t left = payload_.size() - at_;
  if (left < 2) return bad("ends where field " + want + " was expected");
  const size_t nameLen = getLe(payload_.data() + at_, 2);
  if (left < 2 + nameLen + 9) return bad("field " + want + " is cut short");
  const std::string_view found = payload_.substr(at_ + 2, nameLen);
  const uint8_t foundType = static_cast<uint8_t>(payload_[at_ + 2 + nameLen]);
  const uint64_t n = getLe(payload_.data() + at_ + 3 + nameLen, 8);
  if (found != want) {
    return bad("expected field " + want + ", found " + std::string(found) +
               " (the checkpoint was written for another algorithm, oracle, codec or fault "
               "setup)");
  }
  if (foundType != type) {
    return bad("field " + want + " holds " + typeName(foundType) + " values, expected " +
               typeName(type));
  }
  const size_t start = at_ + 11 + nameLen;
  const size_t avail = payload_.size() - start;
  if (n > avail / elementBytes) {
    return bad("field " + want + " claims " + std::to_string(n) + " values, more than the file "
               "holds");
  }
  at_ = start + static_cast<size_t>(n) * elementBytes;
  *count = n;
  return payload_.data() + start;
}

namespace {
template <typename T>
void copyOut(const char* p, uint64_t n, T* out) {
  if (n > 0) std::memcpy(out, p, static_cast<size_t>(n) * sizeof(T));
}
}  // namespace

void CheckpointReader::values(std::string_view name, std::span<float> v) {
  uint64_t n = 0;
  const char* p = next(name, kF32, sizeof(float), &n);
  if (!p) return;
  if (n != v.size()) {
    return fail(where_ + ": field " + qualified(name) + " has " + std::to_string(n) +
                " values, this run's has " + std::to_string(v.size()) +
                " (another model dimension?)");
  }
  copyOut(p, n, v.data());
}
void CheckpointReader::values(std::string_view name, std::span<double> v) {
  uint64_t n = 0;
  const char* p = next(name, kF64, sizeof(double), &n);
  if (!p) return;
  if (n != v.size()) {
    return fail(where_ + ": field " + qualified(name) + " has " + std::to_string(n) +
                " values, this run's has " + std::to_string(v.size()) +
                " (another model dimension?)");
  }
  copyOut(p, n, v.data());
}
void CheckpointReader::sized(std::string_view name, std::vector<float>& v) {
  uint64_t n = 0;
  const char* p = next(name, kF32, sizeof(float), &n);
  if (!p) return;
  v.resize(static_cast<size_t>(n));
  copyOut(p, n, v.data());
}
void CheckpointReader::sized(std::string_view name, std::vector<double>& v) {
  uint64_t n = 0;
  const char* p = next(name, kF64, sizeof(double), &n);
  if (!p) return;
  v.resize(static_cast<size_t>(n));
  copyOut(p, n, v.data());
}
void CheckpointReader::sized(std::string_view name, std::vector<uint64_t>& v) {
  uint64_t n = 0;
  const char* p = next(name, kU64, sizeof(uint64_t), &n);
  if (!p) return;
  v.resize(static_cast<size_t>(n));
  for (uint64_t k = 0; k < n; ++k) v[k] = getLe(p + 8 * k, 8);
}
void CheckpointReader::scalar(std::string_view name, uint64_t& v) {
  uint64_t n = 0;
  const char* p = next(name, kU64, sizeof(uint64_t), &n);
  if (!p) return;
  if (n != 1) return fail(where_ + ": field " + qualified(name) + " is not one value");
  v = getLe(p, 8);
}
void CheckpointReader::scalar(std::string_view name, double& v) {
  uint64_t n = 0;
  const char* p = next(name, kF64, sizeof(double), &n);
  if (!p) return;
  if (n != 1) return fail(where_ + ": field " + qualified(name) + " is not one value");
  copyOut(p, 1, &v);
}
void CheckpointReader::text(std::string_view name, std::string& s) {
  uint64_t n = 0;
  const char* p = next(name, kText, 1, &n);
  if (!p) return;
  s.assign(p, static_cast<size_t>(n));
}

core::Status CheckpointReader::finish() {
  if (failed()) return status();
  if (at_ != payload_.size()) {
    auto rest = checkpointFields(payload_.substr(at_));
    const std::string name = rest && !rest->empty() ? rest->front().name : "?";
    fail(where_ + ": holds more state than this run has (first unread field: " + name + ")");
  }
  return status();
}

core::Result<std::vector<CheckpointField>> checkpointFields(std::string_view payload) {
  std::vector<CheckpointField> out;
  size_t at = 0;
  while (at < payload.size()) {
    const size_t left = payload.size() - at;
    if (left < 2) return core::corruption("checkpoint payload ends inside a field");
    const size_t nameLen = getLe(payload.data() + at, 2);
    if (left < 11 + nameLen) return core::corruption("checkpoint payload ends inside a field");
    CheckpointField f;
    f.name = std::string(payload.substr(at + 2, nameLen));
    f.type = static_cast<uint8_t>(payload[at + 2 + nameLen]);
    f.count = getLe(payload.data() + at + 3 + nameLen, 8);
    const size_t size = f.type == kF32 ? 4 : f.type == kText ? 1 : 8;
    if (f.type < kU64 || f.type > kText) {
      return core::corruption("checkpoint field " + f.name + " has unknown type");
    }
    const size_t start = at + 11 + nameLen;
    if (f.count > (payload.size() - start) / size) {
      return core::corruption("checkpoint field " + f.name + " runs past the payload");
    }
    f.data = payload.substr(start, static_cast<size_t>(f.count) * size);
    at = start + f.data.size();
    out.push_back(std::move(f));
  }
  return out;
}

std::optional<std::vector<uint64_t>> checkpointU64s(const std::vector<CheckpointField>& fields,
                                                    std::string_view name) {
  for (const auto& f : fields) {
    if (f.name != name || f.type != kU64) continue;
    std::vector<uint64_t> v(static_cast<size_t>(f.count));
    for (size_t k = 0; k < v.size(); ++k) v[k] = getLe(f.data.data() + 8 * k, 8);
    return v;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// File

std::string encodeCheckpoint(CheckpointHeader h, std::string_view payload) {
  h.payloadBytes = payload.size();
  std::string out;
  out.reserve(kCheckpointHeaderBytes + payload.size() + kCheckpointTrailerBytes);
  out.append(kMagic, sizeof kMagic);
  putU32(out, kCheckpointVersion);
  putU32(out, static_cast<uint32_t>(kCheckpointHeaderBytes));
  putU64(out, h.scenarioHash);
  putU64(out, static_cast<uint64_t>(h.rank));
  putU64(out, h.round);
  putU64(out, h.peerLogBytes);
  putU64(out, h.payloadBytes);
  putU64(out, 0);
  out.append(payload);
  putU32(out, crcOf(out));
  return out;
}

core::Result<Checkpoint> decodeCheckpoint(std::string_view bytes, const std::string& where) {
  const auto bad = [&](const std::string& why) { return core::corruption(where + ": " + why); };
  if (bytes.size() < kCheckpointHeaderBytes + kCheckpointTrailerBytes) {
    return bad("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than a header");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return bad("not a Starling checkpoint (bad magic)");
  }
  const uint64_t version = getLe(bytes.data() + 8, 4);
  if (version != kCheckpointVersion) {
    return bad("checkpoint format version " + std::to_string(version) + "; this build reads " +
               std::to_string(kCheckpointVersion));
  }
  if (getLe(bytes.data() + 12, 4) != kCheckpointHeaderBytes || getLe(bytes.data() + 56, 8) != 0) {
    return bad("malformed header");
  }
  Checkpoint c;
  c.header.scenarioHash = getLe(bytes.data() + 16, 8);
  const uint64_t rank = getLe(bytes.data() + 24, 8);
  c.header.round = getLe(bytes.data() + 32, 8);
  c.header.peerLogBytes = getLe(bytes.data() + 40, 8);
  c.header.payloadBytes = getLe(bytes.data() + 48, 8);
  const uint64_t expected = c.header.payloadBytes + kCheckpointHeaderBytes + kCheckpointTrailerBytes;
  if (c.header.payloadBytes > bytes.size() || expected != bytes.size()) {
    return bad(bytes.size() < expected || c.header.payloadBytes > bytes.size()
                   ? "truncated: " + std::to_string(bytes.size()) + " bytes, the header says " +
                         std::to_string(c.header.payloadBytes + kCheckpointHeaderBytes +
                                        kCheckpointTrailerBytes)
                   : "has " + std::to_string(bytes.size() - expected) +
                         " bytes after its end (or a damaged length)");
  }
  const size_t body = bytes.size() - kCheckpointTrailerBytes;
  const uint32_t stored = static_cast<uint32_t>(getLe(bytes.data() + body, 4));
  if (crcOf(bytes.substr(0, body)) != stored) {
    return bad("checksum mismatch (the file is damaged)");
  }
  if (rank > (uint64_t{1} << 30)) return bad("rank " + std::to_string(rank) + " in the header");
  c.header.rank = static_cast<int>(rank);
  c.payload = std::string(bytes.substr(kCheckpointHeaderBytes, c.header.payloadBytes));
  return c;
}

core::Result<Checkpoint> readCheckpoint(const std::filesystem::path& path) {
  // Untrusted: a regular file only (a FIFO would block, /dev/zero never end), and no larger
  // than the memory this process may use.
  auto limit = core::memoryLimitBytes();
  if (!limit) return limit.status();
  auto bytes = core::readRegularFile(path.string(), *limit, "checkpoint");
  if (!bytes) return bytes.status();
  return decodeCheckpoint(*bytes, path.string());
}

std::filesystem::path checkpointDir(const std::filesystem::path& outDir, int rank) {
  return outDir / "checkpoints" / ("rank-" + std::to_string(rank));
}

std::filesystem::path checkpointPath(const std::filesystem::path& outDir, int rank,
                                     uint64_t round) {
  char name[40];
  std::snprintf(name, sizeof name, "round-%09llu.ckpt", static_cast<unsigned long long>(round));
  return checkpointDir(outDir, rank) / name;
}

std::vector<uint64_t> checkpointRounds(const std::filesystem::path& dir) {
  std::vector<uint64_t> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto round = roundOfName(it->path().filename().string())) out.push_back(*round);
  }
  std::sort(out.rbegin(), out.rend());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

core::Status removeCheckpointsAfter(const std::filesystem::path& dir, uint64_t round) {
  bool removed = false;
  for (uint64_t r : checkpointRounds(dir)) {
    if (r <= round) continue;
    std::error_code ec;
    // The file name as written; another spelling of the same round (leading zeros) is left.
    const auto path = dir / checkpointPath("", 0, r).filename();
    std::filesystem::remove(path, ec);
    if (ec) return core::ioError("cannot remove " + path.string() + ": " + ec.message());
    removed = true;
  }
  return removed ? syncDir(dir) : core::Status::ok();
}

core::Status writeCheckpoint(const std::filesystem::path& outDir, const CheckpointHeader& header,
                             std::string_view payload, uint64_t keep) {
  const auto dir = checkpointDir(outDir, header.rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return core::ioError("cannot create " + dir.string() + ": " + ec.message());
  const auto path = checkpointPath(outDir, header.rank, header.round);
  auto tmp = path;
  tmp += ".tmp";
  const std::string bytes = encodeCheckpoint(header, payload);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return core::ioError("cannot write " + tmp.string() + ": " + errnoText());
  bool ok = writeAll(fd, bytes) && ::fsync(fd) == 0;
  std::string why = ok ? "" : errnoText();
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = errnoText();
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    why = errnoText();
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return core::ioError("cannot write checkpoint " + path.string() + ": " + why);
  }
  STARLING_RETURN_IF_ERROR(syncDir(dir));
  // The new file is durable: older ones beyond `keep`, and temporary files of a writer that was
  // killed, can go.
  const auto rounds = checkpointRounds(dir);
  for (size_t k = std::max<uint64_t>(keep, 1); k < rounds.size(); ++k) {
    std::filesystem::remove(dir / checkpointPath("", 0, rounds[k]).filename(), ec);
  }
  std::vector<std::filesystem::path> leftovers;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 && it->path() != tmp) {
      leftovers.push_back(it->path());
    }
  }
  for (const auto& p : leftovers) std::filesystem::remove(p, ec);
  return core::Status::ok();
}

}  // namespace starling::runtime
