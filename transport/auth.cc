#include "transport/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace starling::transport::auth {
namespace {

std::span<const std::byte> text(const char* s) {
  return std::as_bytes(std::span<const char>(s, std::strlen(s)));
}

void putLe(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// GCM's 96-bit nonce: the counter, then a constant (the counter alone makes it unique per
// session key).
std::array<unsigned char, 12> nonceOf(uint64_t counter) {
  std::array<unsigned char, 12> iv{};
  for (size_t i = 0; i < 8; ++i) iv[i] = static_cast<unsigned char>((counter >> (8 * i)) & 0xff);
  iv[8] = 'S';
  iv[9] = 'T';
  iv[10] = 'R';
  iv[11] = 'L';
  return iv;
}

// OpenSSL takes int lengths: feed large buffers in pieces.
constexpr size_t kChunk = size_t{1} << 30;

[[noreturn]] void fatal(const char* what) {
  // Only allocation failures inside OpenSSL get here; there is no meaningful way on.
  std::fprintf(stderr, "starling: OpenSSL failed: %s\n", what);
  std::abort();
}

}  // namespace

core::Result<ClusterKey> loadKeyFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    const std::string why = "key file " + path + ": " + std::strerror(e);
    return e == ENOENT ? core::notFound(why) : core::ioError(why);
  }
  struct stat st {};
  ClusterKey key;
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = std::string("cannot stat: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = "not a regular file";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    error = std::string("permissions ") + mode +
            " are too open: the key must not be readable or writable by others (chmod 600)";
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    error = "owned by uid " + std::to_string(st.st_uid) + ", not by this user";
  } else if (st.st_size < static_cast<off_t>(kMinKeyBytes) ||
             st.st_size > static_cast<off_t>(kMaxKeyBytes)) {
    error = "holds " + std::to_string(st.st_size) + " bytes; a key has " +
            std::to_string(kMinKeyBytes) + " to " + std::to_string(kMaxKeyBytes) +
            " (e.g. head -c 32 /dev/urandom > FILE)";
  } else {
    key.master.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < key.master.size()) {
      const ssize_t n = ::read(fd, key.master.data() + got, key.master.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = n == 0 ? "shorter than it said" : std::string("read: ") + std::strerror(errno);
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!error.empty()) {
    OPENSSL_cleanse(key.master.data(), key.master.size());
    return core::invalidArgument("key file " + path + ": " + error);
  }
  return key;
}

Digest hmac(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) {
  size_t total = 0;
  for (auto p : parts) total += p.size();
  std::vector<unsigned char> data;
  data.reserve(total);
  for (auto p : parts) {
    const auto* b = reinterpret_cast<const unsigned char*>(p.data());
    data.insert(data.end(), b, b + p.size());
  }
  Digest out{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(),
           reinterpret_cast<unsigned char*>(out.data()), &len) == nullptr ||
      len != out.size()) {
    fatal("HMAC-SHA256");
  }
  return out;
}

bool equal(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void randomBytes(std::span<std::byte> out) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1) {
    fatal("RAND_bytes");
  }
}

Digest handshakeKey(const ClusterKey& key) {
  return hmac(key.master, {text("starling/1 handshake")});
}

struct SessionKey::Contexts {
  EVP_CIPHER_CTX* mac = nullptr;  // GMAC (encrypt direction, AAD only)
  EVP_CIPHER_CTX* enc = nullptr;
  EVP_CIPHER_CTX* dec = nullptr;
  ~Contexts() {
    EVP_CIPHER_CTX_free(mac);
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
  }
};

SessionKey::SessionKey(const ClusterKey& key, uint32_t sender, const Nonce& salt)
    : ctx_(std::make_unique<Contexts>()) {
  std::array<std::byte, 4> rank{};
  putLe(rank.data(), sender, 4);
  const Digest session = hmac(key.master, {text("starling/1 session"), rank, salt});
  macKey_ = hmac(session, {text("header")});
  Digest aes = hmac(session, {text("payload")});
  const auto* k = reinterpret_cast<const unsigned char*>(aes.data());  // first 16 bytes: AES-128
  ctx_->mac = EVP_CIPHER_CTX_new();
  ctx_->enc = EVP_CIPHER_CTX_new();
  ctx_->dec = EVP_CIPHER_CTX_new();
  if (!ctx_->mac || !ctx_->enc || !ctx_->dec ||
      EVP_EncryptInit_ex(ctx_->mac, EVP_aes_128_gcm(), nullptr, k, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx_->enc, EVP_aes_128_gcm(), nullptr, k, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx_->dec, EVP_aes_128_gcm(), nullptr, k, nullptr) != 1) {
    fatal("AES-128-GCM setup");
  }
  OPENSSL_cleanse(aes.data(), aes.size());
}

SessionKey::~SessionKey() { OPENSSL_cleanse(macKey_.data(), macKey_.size()); }

Mac SessionKey::payloadTag(uint64_t counter, std::span<const std::byte> payload) const {
  const auto iv = nonceOf(counter);
  EVP_CIPHER_CTX* c = ctx_->mac;
  int len = 0;
  if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) != 1) fatal("GMAC init");
  for (size_t off = 0; off < payload.size(); off += kChunk) {
    const size_t n = std::min(kChunk, payload.size() - off);
    if (EVP_EncryptUpdate(c, nullptr, &len, reinterpret_cast<const unsigned char*>(payload.data() + off),
                          static_cast<int>(n)) != 1) {
      fatal("GMAC update");
    }
  }
  unsigned char none[16];
  Mac tag{};
  if (EVP_EncryptFinal_ex(c, none, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kMacBytes, tag.data()) != 1) {
    fatal("GMAC final");
  }
  return tag;
}

Mac SessionKey::seal(uint64_t counter, std::span<const std::byte> in, std::span<std::byte> out) const {
  if (out.size() != in.size()) throw std::invalid_argument("seal: output size");
  const auto iv = nonceOf(counter);
  EVP_CIPHER_CTX* c = ctx_->enc;
  int len = 0;
  if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) != 1) fatal("GCM init");
  for (size_t off = 0; off < in.size(); off += kChunk) {
    const size_t n = std::min(kChunk, in.size() - off);
    if (EVP_EncryptUpdate(c, reinterpret_cast<unsigned char*>(out.data() + off), &len,
                          reinterpret_cast<const unsigned char*>(in.data() + off),
                          static_cast<int>(n)) != 1) {
      fatal("GCM update");
    }
  }
  unsigned char rest[16];
  Mac tag{};
  if (EVP_EncryptFinal_ex(c, rest, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, kMacBytes, tag.data()) != 1) {
    fatal("GCM final");
  }
  return tag;
}

bool SessionKey::open(uint64_t counter, std::span<const std::byte> in, const Mac& tag,
                      std::span<std::byte> out) const {
  if (out.size() != in.size()) return false;
  const auto iv = nonceOf(counter);
  EVP_CIPHER_CTX* c = ctx_->dec;
  int len = 0;
  if (EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) != 1) fatal("GCM init");
  for (size_t off = 0; off < in.size(); off += kChunk) {
    const size_t n = std::min(kChunk, in.size() - off);
    if (EVP_DecryptUpdate(c, reinterpret_cast<unsigned char*>(out.data() + off), &len,
                          reinterpret_cast<const unsigned char*>(in.data() + off),
                          static_cast<int>(n)) != 1) {
      return false;
    }
  }
  Mac expected = tag;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, kMacBytes, expected.data()) != 1) return false;
  unsigned char rest[16];
  return EVP_DecryptFinal_ex(c, rest, &len) == 1;
}

Mac SessionKey::headerTag(std::initializer_list<std::span<const std::byte>> parts) const {
  const Digest d = hmac(macKey_, parts);
  Mac m{};
  std::memcpy(m.data(), d.data(), m.size());
  return m;
}

bool ReplayWindow::fresh(uint64_t counter) const {
  if (counter == 0) return false;
  if (counter > top_) return true;
  const uint64_t age = top_ - counter;
  return age < kWindow && !seen_[age];
}

bool ReplayWindow::accept(uint64_t counter) {
  if (!fresh(counter)) return false;
  if (counter > top_) {
    const uint64_t shift = counter - top_;
    if (shift >= kWindow) {
      seen_.reset();
    } else {
      seen_ <<= shift;
    }
    top_ = counter;
    seen_[0] = true;
  } else {
    seen_[top_ - counter] = true;
  }
  return true;
}

}  // namespace starling::transport::auth
