#include "compression/frame.h"

#include <isa-l/crc.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include <algorithm>
#include <cassert>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace starling::compression {
namespace {

constexpr size_t padTo8(size_t n) { return (n + 7) & ~size_t{7}; }

// Little-endian stores and loads, byte by byte: the format never depends on the host's layout.
template <typename U>
void storeLe(std::byte* p, U v) {
  for (size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
template <typename U>
U loadLe(const std::byte* p) {
  U v = 0;
  for (size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

// ISA-L's CRC32C for AVX-512 machines (crc32_iscsi_by16_10) returns with the upper halves of the
// vector registers still in use: it ends without VZEROUPPER. The portable build compiles the
// engine's loops to legacy SSE, and each SSE instruction after it then waits on those upper
// halves; on this project's CI machine a 4,096-double combine after a 4 KB CRC took 12.2 µs
// instead of 2.5 (docs/benchmarks.md). Every CRC therefore goes through iscsi(), which clears
// them afterwards on CPUs with AVX (VZEROUPPER faults on those without).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx"))) void zeroUpperHalves() { _mm256_zeroupper(); }
bool hasAvx() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
  }();
  return has;
}
#endif

unsigned int iscsi(const void* bytes, size_t n, unsigned int crc) {
  crc = crc32_iscsi(const_cast<unsigned char*>(static_cast<const unsigned char*>(bytes)),
                    static_cast<int>(n), crc);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (hasAvx()) zeroUpperHalves();
#endif
  return crc;
}

size_t elementSize(ElementType t) {
  switch (t) {
    case ElementType::kFloat32: return 4;
    case ElementType::kFloat64: return 8;
  }
  return 0;
}

}  // namespace

uint32_t crc32c(std::span<const std::byte> bytes) {
  // ISA-L's crc32_iscsi takes and returns the raw register; the standard CRC32C (RFC 3720) uses
  // an initial value of ~0 and a final inversion.
  // ISA-L takes an int length: feed frames larger than that in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  auto* p = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(bytes.data()));
  unsigned int crc = 0xFFFFFFFFu;
  for (size_t left = bytes.size(); left > 0;) {
    const size_t n = std::min(left, kPiece);
    crc = iscsi(p, n, crc);
    p += n;
    left -= n;
  }
  return ~crc;
}

void writeFrame(CodecId codec, ElementType type, uint64_t elementCount,
                std::span<const std::byte> params, std::span<const std::byte> payload,
                std::vector<std::byte>& out) {
  const size_t paramsPadded = padTo8(params.size());
  // resize, not assign: every byte is written below, so a reused buffer is not cleared first
  // (one pass fewer over frames of megabytes).
  out.resize(kFrameHeaderBytes + paramsPadded + payload.size() + kFrameTrailerBytes);
  std::byte* p = out.data();
  std::memset(p, 0, kFrameHeaderBytes);  // the reserved fields
  storeLe<uint32_t>(p + 0, kFrameMagic);
  p[4] = std::byte{kFrameVersion};
  p[5] = static_cast<std::byte>(codec);
  p[6] = static_cast<std::byte>(type);
  storeLe<uint64_t>(p + 8, elementCount);
  storeLe<uint32_t>(p + 16, static_cast<uint32_t>(params.size()));
  storeLe<uint64_t>(p + 24, payload.size());
  std::byte* at = p + kFrameHeaderBytes;
  if (!params.empty()) std::memcpy(at, params.data(), params.size());
  std::memset(at + params.size(), 0, paramsPadded - params.size());
  at += paramsPadded;
  // The CRC runs over each piece right after it is copied, while it is still in cache: one
  // pass over memory instead of two for frames larger than the cache. CRC32C is a running
  // value, so the pieces give the CRC of the whole body.
  constexpr size_t kPiece = size_t{1} << 16;
  unsigned int crc = iscsi(p, static_cast<size_t>(at - p), 0xFFFFFFFFu);
  for (size_t done = 0; done < payload.size();) {
    const size_t n = std::min(kPiece, payload.size() - done);
    std::memcpy(at + done, payload.data() + done, n);
    crc = iscsi(at + done, n, crc);
    done += n;
  }
  storeLe<uint32_t>(at + payload.size(), ~crc);
}

core::Result<FrameView> parseFrame(std::span<const std::byte> frame, Checksum checksum) {
  if (frame.size() < kFrameHeaderBytes + kFrameTrailerBytes) {
    return core::corruption("frame truncated: " + std::to_string(frame.size()) +
                            " bytes, the header alone needs " +
                            std::to_string(kFrameHeaderBytes + kFrameTrailerBytes));
  }
  const std::byte* p = frame.data();
  if (loadLe<uint32_t>(p) != kFrameMagic) return core::corruption("bad frame magic");
  const auto version = std::to_integer<uint8_t>(p[4]);
  if (version != kFrameVersion) {
    return core::corruption("unsupported frame version " + std::to_string(version));
  }
  const auto type = static_cast<ElementType>(std::to_integer<uint8_t>(p[6]));
  if (elementSize(type) == 0) {
    return core::corruption("unknown element type " + std::to_string(std::to_integer<int>(p[6])));
  }
  if (p[7] != std::byte{0} || loadLe<uint32_t>(p + 20) != 0) {
    return core::corruption("reserved header bytes are not zero");
  }
  const uint64_t count = loadLe<uint64_t>(p + 8);
  const uint32_t paramsLen = loadLe<uint32_t>(p + 16);
  const uint64_t payloadLen = loadLe<uint64_t>(p + 24);
  if (count > kMaxFrameElements) return core::corruption("element count too large");
  if (paramsLen > kMaxFrameParamsBytes) return core::corruption("params length too large");
  const uint64_t room = frame.size() - kFrameHeaderBytes - kFrameTrailerBytes;
  const uint64_t paramsPadded = padTo8(paramsLen);
  if (paramsPadded > room || payloadLen != room - paramsPadded) {
    return core::corruption("frame lengths do not match its size: params " +
                            std::to_string(paramsLen) + " + payload " +
                            std::to_string(payloadLen) + " in " + std::to_string(room) + " bytes");
  }
  for (uint64_t i = kFrameHeaderBytes + paramsLen; i < kFrameHeaderBytes + paramsPadded; ++i) {
    if (p[i] != std::byte{0}) return core::corruption("params padding is not zero");
  }
  const size_t body = frame.size() - kFrameTrailerBytes;
  if (checksum == Checksum::kVerify && crc32c(frame.first(body)) != loadLe<uint32_t>(p + body)) {
    return core::corruption("frame CRC32C mismatch");
  }
  FrameView view;
  view.codec = static_cast<CodecId>(std::to_integer<uint8_t>(p[5]));
  view.elementType = type;
  view.elementCount = count;
  view.params = frame.subspan(kFrameHeaderBytes, paramsLen);
  view.payload = frame.subspan(kFrameHeaderBytes + paramsPadded, payloadLen);
  return view;
}

template <typename T>
void encodeDense(std::span<const T> x, std::vector<std::byte>& out) {
  static_assert(std::endian::native == std::endian::little,
                "the dense payload is written with memcpy; add a byte-swapping path for "
                "big-endian hosts");
  writeFrame(CodecId::kIdentity, elementTypeOf<T>(), x.size(), {}, std::as_bytes(x), out);
}

template <typename T>
std::span<T> beginDense(size_t count, std::vector<std::byte>& out) {
  // resize, not assign: a reused buffer of the same size is not cleared again (the caller
  // overwrites the payload), which matters for frames of megabytes sent every round.
  out.resize(denseFrameBytes<T>(count));
  // operator new aligns to at least 16 bytes and the header is 32, so the payload is aligned.
  return beginDense<T>(count, std::span<std::byte>(out));
}

template <typename T>
std::span<T> beginDense(size_t count, std::span<std::byte> out) {
  static_assert(std::endian::native == std::endian::little,
                "dense payloads are read and written in place; add a byte-swapping path for "
                "big-endian hosts");
  const size_t payload = count * sizeof(T);
  assert(out.size() == denseFrameBytes<T>(count));
  assert(reinterpret_cast<uintptr_t>(out.data()) % alignof(T) == 0);
  std::byte* p = out.data();
  std::memset(p, 0, kFrameHeaderBytes);
  storeLe<uint32_t>(p + 0, kFrameMagic);
  p[4] = std::byte{kFrameVersion};
  p[5] = static_cast<std::byte>(CodecId::kIdentity);
  p[6] = static_cast<std::byte>(elementTypeOf<T>());
  storeLe<uint64_t>(p + 8, count);
  storeLe<uint64_t>(p + 24, payload);
  return {reinterpret_cast<T*>(p + kFrameHeaderBytes), count};
}

void sealFrame(std::vector<std::byte>& out) { sealFrame(std::span<std::byte>(out)); }

void sealFrame(std::span<std::byte> out) {
  const size_t body = out.size() - kFrameTrailerBytes;
  sealFrame(out, crc32c({out.data(), body}));
}

void sealFrame(std::span<std::byte> out, uint32_t crc) {
  storeLe<uint32_t>(out.data() + out.size() - kFrameTrailerBytes, crc);
}

void Crc32c::update(std::span<const std::byte> bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  while (n > 0) {  // ISA-L takes an int length
    const size_t piece = std::min<size_t>(n, size_t{1} << 30);
    state_ = iscsi(p, piece, state_);
    p += piece;
    n -= piece;
  }
}

template <typename T>
core::Result<std::span<const T>> decodeDense(std::span<const std::byte> frame, size_t expectedCount,
                                             std::vector<T>& scratch, Checksum checksum) {
  auto parsed = parseFrame(frame, checksum);
  if (!parsed) return parsed.status();
  const FrameView& v = *parsed;
  if (v.codec != CodecId::kIdentity) {
    return core::corruption("expected an identity frame, got codec " +
                            std::to_string(static_cast<int>(v.codec)));
  }
  if (v.elementType != elementTypeOf<T>()) return core::corruption("element type mismatch");
  if (v.elementCount != expectedCount || v.payload.size() != expectedCount * sizeof(T)) {
    return core::corruption("expected " + std::to_string(expectedCount) + " elements, frame has " +
                            std::to_string(v.elementCount));
  }
  std::span<const T> values;
  if (reinterpret_cast<uintptr_t>(v.payload.data()) % alignof(T) == 0) {
    values = {reinterpret_cast<const T*>(v.payload.data()), expectedCount};
  } else {
    scratch.resize(expectedCount);
    if (!v.payload.empty()) std::memcpy(scratch.data(), v.payload.data(), v.payload.size());
    values = scratch;
  }
  return values;
}

template std::span<float> beginDense<float>(size_t, std::vector<std::byte>&);
template std::span<double> beginDense<double>(size_t, std::vector<std::byte>&);
template std::span<float> beginDense<float>(size_t, std::span<std::byte>);
template std::span<double> beginDense<double>(size_t, std::span<std::byte>);
template void encodeDense<float>(std::span<const float>, std::vector<std::byte>&);
template void encodeDense<double>(std::span<const double>, std::vector<std::byte>&);
template core::Result<std::span<const float>> decodeDense<float>(std::span<const std::byte>, size_t,
                                                                 std::vector<float>&, Checksum);
template core::Result<std::span<const double>> decodeDense<double>(std::span<const std::byte>,
                                                                   size_t, std::vector<double>&,
                                                                   Checksum);

}  // namespace starling::compression
