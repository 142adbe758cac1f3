// Authentication of peers and messages with the cluster's shared key (scenario `security`,
// docs/security.md). Everything cryptographic comes from OpenSSL; nothing here is hand-made
// crypto, only the choice of what is bound into which code:
//
//   master     the key file's bytes (at least 32), as given
//   handshake  HMAC-SHA256(master, "starling/1 handshake"): proves knowledge of the key in the
//              bootstrap handshake (challenge-response over both sides' random nonces)
//   session    HMAC-SHA256(master, "starling/1 session" | sender rank | sender's random salt):
//              one per sending process and start; the salt is announced in its handshake, so a
//              restarted peer has a new session and nothing recorded from the old one verifies
//   payload    AES-128-GMAC (or AES-128-GCM with `encrypt`) under the session key, nonce = the
//              sender's message counter: computed once per message, whatever the fan-out
//   header     HMAC-SHA256(session, header | counter | payload tag | receiver | length),
//              truncated to 16 bytes: binds sender, round, channel, counter and the receiver
//
// A receiver accepts a message only if both tags verify and its counter was not seen before
// (ReplayWindow): a frame replayed in the same round, in another round, or to another receiver
// is rejected. Thread-safety: a SessionKey holds OpenSSL contexts and is used by one thread.
#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace starling::transport::auth {

inline constexpr size_t kMacBytes = 16;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMinKeyBytes = 32;
inline constexpr size_t kMaxKeyBytes = 4096;
using Mac = std::array<std::byte, kMacBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;
using Digest = std::array<std::byte, 32>;

// The cluster's shared secret (the key file's bytes).
struct ClusterKey {
  std::vector<std::byte> master;
};

// Reads a key file the way ssh reads a private key: a regular file owned by this user (or root)
// that nobody else may read or write (no group or other permission bits), 32 to 4096 bytes.
// Errors name the file: kInvalidArgument for loose permissions, a wrong size or not a file,
// kNotFound / kIoError for what the system says.
core::Result<ClusterKey> loadKeyFile(const std::string& path);

// HMAC-SHA256 of the concatenation of `parts`.
Digest hmac(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts);

// Constant-time comparison of two equal-length byte strings.
bool equal(std::span<const std::byte> a, std::span<const std::byte> b);

// Cryptographically random bytes (OpenSSL's RAND_bytes).
void randomBytes(std::span<std::byte> out);

// The key that proves membership in the bootstrap handshake.
Digest handshakeKey(const ClusterKey& key);

// One sender's keys for one of its starts (rank + salt).
class SessionKey {
 public:
  SessionKey(const ClusterKey& key, uint32_t sender, const Nonce& salt);
  ~SessionKey();
  SessionKey(const SessionKey&) = delete;
  SessionKey& operator=(const SessionKey&) = delete;

  // AES-128-GMAC of `payload` with the counter as nonce.
  Mac payloadTag(uint64_t counter, std::span<const std::byte> payload) const;
  // AES-128-GCM: `out` (same size as `in`) gets the ciphertext, the return value is its tag.
  Mac seal(uint64_t counter, std::span<const std::byte> in, std::span<std::byte> out) const;
  // Decrypts into `out` and checks the tag; false (and `out` unspecified) if it does not verify.
  bool open(uint64_t counter, std::span<const std::byte> in, const Mac& tag,
            std::span<std::byte> out) const;
  // HMAC-SHA256 of the parts, truncated to 16 bytes.
  Mac headerTag(std::initializer_list<std::span<const std::byte>> parts) const;

 private:
  struct Contexts;
  std::array<std::byte, 32> macKey_{};
  std::unique_ptr<Contexts> ctx_;
};

// Counters seen from one sender: accepts each counter once, and none older than the window
// behind the newest (IPsec's anti-replay window). Counters start at 1.
class ReplayWindow {
 public:
  static constexpr uint64_t kWindow = 4096;
  // True if `counter` is new (and records it); false for a repeat or one too old.
  bool accept(uint64_t counter);
  // True if accept(counter) would return true (nothing recorded).
  bool fresh(uint64_t counter) const;
  void reset() { *this = ReplayWindow(); }

 private:
  uint64_t top_ = 0;
  std::bitset<kWindow> seen_;  // bit k: counter top_ - k
};

}  // namespace starling::transport::auth
