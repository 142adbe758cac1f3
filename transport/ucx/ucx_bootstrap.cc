// The bootstrap handshake in front of UCX (see ucx_bootstrap.h for the protocol).
#include "transport/ucx/ucx_bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

namespace starling::transport::ucx::detail {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr uint32_t kMagic = 0x31425453;  // "STB1"
enum MessageType : uint16_t { kHello = 1, kChallenge = 2, kProof = 3, kWelcome = 4 };
enum Answer : uint32_t {
  kOk = 0,
  kWrongRank = 1,
  kWrongNodes = 2,
  kKeyPresence = 3,
  kBusy = 4,
  kKeyRefused = 5,
};

void put(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
uint64_t get(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
std::span<const std::byte> text(const char* s) {
  return std::as_bytes(std::span<const char>(s, std::strlen(s)));
}
bool header(const std::byte* p, MessageType type) {
  return get(p, 4) == kMagic && get(p + 4, 2) == type;
}

std::string endpointText(const tcp::socket& s) {
  boost::system::error_code ec;
  const auto ep = s.remote_endpoint(ec);
  if (ec) return "an unknown address";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

tcp::endpoint toEndpoint(const sockaddr_storage& a) {
  tcp::endpoint ep;
  const size_t len = a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(ep.data(), &a, len);
  ep.resize(len);
  return ep;
}

}  // namespace

namespace bootstrap {
std::array<std::byte, kHelloBytes> hello(int from, int to, int nodes, bool keyed,
                                         const auth::Nonce& clientNonce, const auth::Nonce& salt,
                                         bool ping) {
  std::array<std::byte, kHelloBytes> h{};
  put(h.data() + 20, ping ? 1 : 0, 4);
  put(h.data(), kMagic, 4);
  put(h.data() + 4, kHello, 2);
  put(h.data() + 6, keyed ? 1 : 0, 2);
  put(h.data() + 8, static_cast<uint32_t>(from), 4);
  put(h.data() + 12, static_cast<uint32_t>(to), 4);
  put(h.data() + 16, static_cast<uint32_t>(nodes), 4);
  std::memcpy(h.data() + 24, clientNonce.data(), clientNonce.size());
  std::memcpy(h.data() + 40, salt.data(), salt.size());
  return h;
}
}  // namespace bootstrap

struct Bootstrap::Server {
  explicit Server(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;
  std::string from;  // the client's address, for the log
  uint64_t seq = 0;  // accept order
  bool helloRead = false;
  std::array<std::byte, kHelloBytes> hello{};
  std::array<std::byte, kChallengeBytes> challenge{};
  std::array<std::byte, kProofBytes> proof{};
  std::array<std::byte, kWelcomeBytes> welcome{};
};

struct Bootstrap::Ping {
  explicit Ping(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;
  int peer = 0;
  PingFn done;
  std::array<std::byte, kHelloBytes> hello{};
  std::array<std::byte, kChallengeBytes> challenge{};
};

struct Bootstrap::Client {
  Client(asio::io_context& io, int p, uint64_t i, ConnectedFn d)
      : socket(io), timer(io), peer(p), id(i), done(std::move(d)) {}
  tcp::socket socket;
  asio::steady_timer timer;
  int peer;
  uint64_t id;
  ConnectedFn done;
  std::array<std::byte, kHelloBytes> hello{};
  std::array<std::byte, kChallengeBytes> challenge{};
  std::array<std::byte, kProofBytes> proof{};
  std::array<std::byte, kWelcomeBytes> welcome{};
  WorkerAddress address;
};

Bootstrap::Bootstrap(asio::io_context& io, BootstrapConfig config, AcceptedFn accepted)
    : io_(io), config_(std::move(config)), accepted_(std::move(accepted)) {
  if (config_.key) handshakeKey_ = auth::handshakeKey(*config_.key);
  if (!config_.log) config_.log = [](const std::string&) {};
}

Bootstrap::~Bootstrap() { close(); }

void Bootstrap::close() {
  closed_ = true;
  boost::system::error_code ec;
  if (acceptor_) acceptor_->close(ec);
  for (auto& [raw, s] : servers_) {
    s->socket.close(ec);
    s->timer.cancel();
  }
  servers_.clear();
  for (auto& [peer, c] : clients_) {
    c->socket.close(ec);
    c->timer.cancel();
  }
  clients_.clear();
  for (auto& [id, p] : pings_) {
    p->socket.close(ec);
    p->timer.cancel();
  }
  pings_.clear();
}

void Bootstrap::ping(int peer, const sockaddr_storage& addr, std::chrono::milliseconds timeout,
                     PingFn done) {
  auto p = std::make_shared<Ping>(io_);
  const uint64_t id = nextPingId_++;
  p->peer = peer;
  p->done = std::move(done);
  pings_[id] = p;
  // Ends the ping once (whichever comes first: the answer, a failure, the timer).
  auto finish = [this, id](const core::Status& st) {
    auto it = pings_.find(id);
    if (it == pings_.end()) return;
    auto q = it->second;
    pings_.erase(it);
    boost::system::error_code ec;
    q->socket.close(ec);
    q->timer.cancel();
    SaltPrefix salt{};
    if (st.isOk()) std::memcpy(salt.data(), q->challenge.data() + 36, salt.size());
    q->done(st, salt);
  };
  p->timer.expires_after(timeout);
  p->timer.async_wait([this, finish, peer, timeout](const boost::system::error_code& ec) {
    if (closed_ || ec) return;
    finish(core::timeout("rank " + std::to_string(peer) + " did not answer a ping within " +
                         std::to_string(timeout.count()) + " ms"));
  });
  auth::Nonce nonce;
  auth::randomBytes(nonce);
  p->hello = bootstrap::hello(config_.rank, peer, config_.nodes, handshakeKey_.has_value(), nonce,
                              config_.salt, /*ping=*/true);
  p->socket.async_connect(toEndpoint(addr), [this, p, finish](const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec) return finish(core::unavailable("ping: " + ec.message()));
    asio::async_write(p->socket, asio::buffer(p->hello), [this, p, finish](
                                                             const boost::system::error_code& ec,
                                                             size_t) {
      if (closed_) return;
      if (ec) return finish(core::unavailable("ping: " + ec.message()));
      asio::async_read(p->socket, asio::buffer(p->challenge), [this, p, finish](
                                                                  const boost::system::error_code& ec,
                                                                  size_t) {
        if (closed_) return;
        if (ec) return finish(core::unavailable("ping: " + ec.message()));
        const std::byte* ch = p->challenge.data();
        if (!header(ch, kChallenge) || get(ch + 12, 4) != kOk ||
            get(ch + 8, 4) != static_cast<uint64_t>(p->peer)) {
          return finish(core::unavailable("ping: not rank " + std::to_string(p->peer) +
                                          " of this run there"));
        }
        finish(core::Status::ok());
      });
    });
  });
}

core::Status Bootstrap::listen(const sockaddr_storage& own, const std::string& describe) {
  const tcp::endpoint ep = toEndpoint(own);
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  boost::system::error_code ec;
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return core::ioError("listen on " + describe + ": " + ec.message());
  acceptor_ = std::move(acceptor);
  accept();
  return core::Status::ok();
}

void Bootstrap::accept() {
  auto s = std::make_shared<Server>(io_);
  acceptor_->async_accept(s->socket, [this, s](const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      if (servers_.size() >= kMaxServerSessions) {
        // Full: the oldest connection makes room (a flood's idle connections go first, as they
        // are the oldest; a real neighbour's handshake is over in a millisecond).
        auto oldest = servers_.begin();
        for (auto it = servers_.begin(); it != servers_.end(); ++it) {
          if (it->second->seq < oldest->second->seq) oldest = it;
        }
        const auto victim = oldest->second;
        endServer(victim,
                  "more than " + std::to_string(kMaxServerSessions) +
                      " handshakes at once; closed the oldest, from " + victim->from +
                      (victim->helloRead ? "" : " (it had sent nothing)"),
                  false);
      }
      s->from = endpointText(s->socket);
      s->seq = ++serverSeq_;
      servers_[s.get()] = s;
      serve(s);
    }
    accept();
  });
}

void Bootstrap::endServer(const std::shared_ptr<Server>& s, const std::string& why, bool refusedKey) {
  if (!why.empty()) {
    if (refusedKey) {
      ++refused_;
    } else {
      ++rejected_;
    }
    logLimited("bootstrap: " + why);
  }
  boost::system::error_code ec;
  s->socket.close(ec);
  s->timer.cancel();
  servers_.erase(s.get());
}

void Bootstrap::logLimited(const std::string& line) {
  const auto now = std::chrono::steady_clock::now();
  if (lastLog_ != std::chrono::steady_clock::time_point{} && now - lastLog_ < kLogInterval) {
    ++unlogged_;
    return;
  }
  lastLog_ = now;
  std::string text = line;
  if (unlogged_ > 0) {
    text += " (and " + std::to_string(unlogged_) + " more such lines left out)";
    unlogged_ = 0;
  }
  config_.log(text);
}

void Bootstrap::serve(std::shared_ptr<Server> s) {
  // The hello within kHelloTimeout (a connection that says nothing holds a place for no longer),
  // the whole handshake within the handshake timeout.
  const auto helloWait = std::min<std::chrono::milliseconds>(kHelloTimeout, config_.timeout);
  s->timer.expires_after(helloWait);
  s->timer.async_wait([this, s, helloWait](const boost::system::error_code& ec) {
    if (closed_ || ec) return;
    if (servers_.count(s.get()) && !s->helloRead) {
      endServer(s, "a connection from " + s->from + " sent no hello within " +
                       std::to_string(helloWait.count()) + " ms",
                false);
    }
  });
  asio::async_read(s->socket, asio::buffer(s->hello), [this, s](const boost::system::error_code& ec,
                                                                 size_t) {
    if (closed_ || !servers_.count(s.get())) return;
    s->helloRead = true;
    s->timer.cancel();
    s->timer.expires_after(config_.timeout);
    s->timer.async_wait([this, s](const boost::system::error_code& ec) {
      if (closed_ || ec) return;
      if (servers_.count(s.get())) {
        endServer(s, "a connection from " + s->from + " did not finish its handshake within " +
                         std::to_string(config_.timeout.count()) + " ms",
                  false);
      }
    });
    if (ec) {
      // A port probe or a client that broke off before its hello: counted, not logged.
      ++rejected_;
      endServer(s, "", false);
      return;
    }
    const std::byte* h = s->hello.data();
    if (!header(h, kHello)) {
      endServer(s, "dropped a connection from " + s->from + ": not a Starling handshake", false);
      return;
    }
    const uint64_t from = get(h + 8, 4), to = get(h + 12, 4), nodes = get(h + 16, 4);
    const bool keyed = get(h + 6, 2) == 1;
    const bool ping = (get(h + 20, 4) & 1) != 0;
    uint32_t answer = kOk;
    if (to != static_cast<uint64_t>(config_.rank)) {
      answer = kWrongRank;
    } else if (nodes != static_cast<uint64_t>(config_.nodes) || from >= nodes ||
               from == static_cast<uint64_t>(config_.rank)) {
      answer = kWrongNodes;
    } else if (keyed != handshakeKey_.has_value()) {
      answer = kKeyPresence;
    }
    std::byte* c = s->challenge.data();
    put(c, kMagic, 4);
    put(c + 4, kChallenge, 2);
    put(c + 6, handshakeKey_ ? 1 : 0, 2);
    put(c + 8, static_cast<uint32_t>(config_.rank), 4);
    put(c + 12, answer, 4);
    put(c + 16, static_cast<uint32_t>(config_.nodes), 4);
    auth::Nonce nonce;
    auth::randomBytes(nonce);
    std::memcpy(c + 20, nonce.data(), nonce.size());
    std::memcpy(c + 36, config_.salt.data(), kSaltPrefixBytes);
    asio::async_write(s->socket, asio::buffer(s->challenge), [this, s, answer, from, to, nodes,
                                                              ping](
                                                                 const boost::system::error_code& ec,
                                                                 size_t) {
      if (closed_ || !servers_.count(s.get())) return;
      if (ping && answer == kOk) {
        // A ping (Bootstrap::ping): answered with the challenge; nothing more to it.
        endServer(s, "", false);
        return;
      }
      if (answer != kOk) {
        const std::string claim = " (claims rank " + std::to_string(from) + " of " +
                                  std::to_string(nodes) + ", to rank " + std::to_string(to) + ")";
        endServer(s, "refused a connection from " + s->from + claim +
                         (answer == kKeyPresence
                              ? (handshakeKey_ ? ": it runs without the cluster's key"
                                               : ": it wants a key and this peer has none")
                              : ": it does not belong to this run"),
                  answer == kKeyPresence);
        return;
      }
      if (ec) {
        endServer(s, "", false);
        return;
      }
      asio::async_read(s->socket, asio::buffer(s->proof), [this, s, from](
                                                              const boost::system::error_code& ec,
                                                              size_t) {
        if (closed_ || !servers_.count(s.get())) return;
        if (ec || !header(s->proof.data(), kProof)) {
          endServer(s, "dropped a connection from " + s->from + ": broken handshake", false);
          return;
        }
        bool proven = true;
        if (handshakeKey_) {
          const auth::Digest expected =
              auth::hmac(*handshakeKey_, {text("client"), s->hello, s->challenge});
          proven = auth::equal(expected, std::span<const std::byte>(s->proof.data() + 8, 32));
        }
        std::byte* w = s->welcome.data();
        put(w, kMagic, 4);
        put(w + 4, kWelcome, 2);
        if (!proven) {
          put(w + 8, kKeyRefused, 4);
          asio::async_write(s->socket, asio::buffer(s->welcome), [this, s, from](
                                                                     const boost::system::error_code&,
                                                                     size_t) {
            if (closed_ || !servers_.count(s.get())) return;
            endServer(s, "refused a connection from " + s->from + " (claims rank " +
                             std::to_string(from) + "): it does not prove the cluster's key",
                      true);
          });
          return;
        }
        auth::Nonce salt;
        std::memcpy(salt.data(), s->hello.data() + 40, salt.size());
        accepted_(static_cast<int>(from), salt);
        put(w + 8, kOk, 4);
        put(w + 12, config_.workerAddress.size(), 4);
        if (handshakeKey_) {
          const auth::Digest proof = auth::hmac(
              *handshakeKey_, {text("server"), s->hello, s->challenge, s->proof, config_.workerAddress});
          std::memcpy(w + 16, proof.data(), proof.size());
        }
        std::array<asio::const_buffer, 2> out{asio::buffer(s->welcome),
                                              asio::buffer(config_.workerAddress)};
        asio::async_write(s->socket, out, [this, s](const boost::system::error_code&, size_t) {
          if (closed_ || !servers_.count(s.get())) return;
          endServer(s, "", false);
        });
      });
    });
  });
}

void Bootstrap::cancel(int peer) {
  auto it = clients_.find(peer);
  if (it == clients_.end()) return;
  boost::system::error_code ec;
  it->second->socket.close(ec);
  it->second->timer.cancel();
  clients_.erase(it);
}

void Bootstrap::finishClient(int peer, uint64_t id, const core::Status& st, WorkerAddress address) {
  auto it = clients_.find(peer);
  if (it == clients_.end() || it->second->id != id) return;
  auto c = it->second;
  clients_.erase(it);
  boost::system::error_code ec;
  c->socket.close(ec);
  c->timer.cancel();
  SaltPrefix salt{};
  if (st.isOk()) std::memcpy(salt.data(), c->challenge.data() + 36, salt.size());
  c->done(st, std::move(address), salt);
}

void Bootstrap::connect(int peer, const sockaddr_storage& addr, ConnectedFn done) {
  cancel(peer);
  auto c = std::make_shared<Client>(io_, peer, nextClientId_++, std::move(done));
  clients_[peer] = c;
  const uint64_t id = c->id;
  auto unavailable = [this, peer, id](const std::string& why) {
    finishClient(peer, id, core::unavailable(why), {});
  };
  auto refused = [this, peer, id](const std::string& why) {
    finishClient(peer, id, core::failedPrecondition(why), {});
  };
  c->timer.expires_after(config_.timeout);
  c->timer.async_wait([this, c, unavailable](const boost::system::error_code& ec) {
    if (closed_ || ec) return;
    unavailable("no handshake within " + std::to_string(config_.timeout.count()) + " ms");
  });
  auth::Nonce nonce;
  auth::randomBytes(nonce);
  c->hello = bootstrap::hello(config_.rank, peer, config_.nodes, handshakeKey_.has_value(), nonce,
                              config_.salt);
  c->socket.async_connect(toEndpoint(addr), [this, c, unavailable, refused](
                                                const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec) return unavailable(ec.message());
    asio::async_write(c->socket, asio::buffer(c->hello), [this, c, unavailable, refused](
                                                            const boost::system::error_code& ec,
                                                            size_t) {
      if (closed_) return;
      if (ec) return unavailable(ec.message());
      asio::async_read(c->socket, asio::buffer(c->challenge), [this, c, unavailable, refused](
                                                                  const boost::system::error_code& ec,
                                                                  size_t) {
        if (closed_) return;
        if (ec) {
          return unavailable("handshake broken: no challenge came after this peer's hello (" +
                             ec.message() + "): the peer there did not take the hello");
        }
        const std::byte* ch = c->challenge.data();
        if (!header(ch, kChallenge)) return refused("it does not speak Starling's handshake");
        const bool keyed = get(ch + 6, 2) == 1;
        switch (get(ch + 12, 4)) {
          case kOk:
            break;
          case kWrongRank:
            return refused("the peer there is not rank " + std::to_string(c->peer) +
                           " (is rank " + std::to_string(get(ch + 8, 4)) +
                           "): check the peers' addresses");
          case kWrongNodes:
            return refused("the peer there belongs to a run of " + std::to_string(get(ch + 16, 4)) +
                           " nodes, not of " + std::to_string(config_.nodes));
          case kKeyPresence:
            return refused(keyed ? "it requires the cluster's key and this peer has none"
                                 : "it runs without a key and this peer requires one");
          case kBusy:
            return unavailable("busy");
          default:
            return refused("it refused the handshake");
        }
        if (keyed != handshakeKey_.has_value()) {
          return refused(keyed ? "it requires the cluster's key and this peer has none"
                               : "it runs without a key and this peer requires one");
        }
        std::byte* p = c->proof.data();
        put(p, kMagic, 4);
        put(p + 4, kProof, 2);
        if (handshakeKey_) {
          const auth::Digest proof = auth::hmac(*handshakeKey_, {text("client"), c->hello, c->challenge});
          std::memcpy(p + 8, proof.data(), proof.size());
        }
        asio::async_write(c->socket, asio::buffer(c->proof), [this, c, unavailable, refused](
                                                                const boost::system::error_code& ec,
                                                                size_t) {
          if (closed_) return;
          if (ec) return unavailable("handshake broken: " + ec.message());
          asio::async_read(c->socket, asio::buffer(c->welcome), [this, c, unavailable, refused](
                                                                    const boost::system::error_code& ec,
                                                                    size_t) {
            if (closed_) return;
            if (ec) {
              return unavailable("handshake broken: no welcome came after this peer's proof (" +
                                 ec.message() + "): the peer there did not take the proof");
            }
            const std::byte* w = c->welcome.data();
            if (!header(w, kWelcome)) return refused("it does not speak Starling's handshake");
            if (get(w + 8, 4) == kKeyRefused) {
              return refused("it refused this peer's key proof (the two hold different cluster "
                             "keys, or the handshake was changed on the way)");
            }
            const uint64_t length = get(w + 12, 4);
            if (get(w + 8, 4) != kOk || length == 0 || length > kMaxWorkerAddressBytes) {
              return refused("it sent a malformed welcome");
            }
            c->address.resize(length);
            asio::async_read(c->socket, asio::buffer(c->address), [this, c, unavailable, refused](
                                                                      const boost::system::error_code& ec,
                                                                      size_t) {
              if (closed_) return;
              if (ec) return unavailable("handshake broken: " + ec.message());
              if (handshakeKey_) {
                const auth::Digest expected = auth::hmac(
                    *handshakeKey_, {text("server"), c->hello, c->challenge, c->proof, c->address});
                if (!auth::equal(expected, std::span<const std::byte>(c->welcome.data() + 16, 32))) {
                  return refused("its welcome does not prove the cluster's key (another key, or "
                                 "the handshake was changed on the way)");
                }
              }
              finishClient(c->peer, c->id, core::Status::ok(), std::move(c->address));
            });
          });
        });
      });
    });
  });
}

}  // namespace starling::transport::ucx::detail
