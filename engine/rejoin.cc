#include "engine/rejoin.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>

#include "compression/frame.h"
#include "core/line_file.h"
#include "core/read_file.h"

namespace starling::engine {
namespace {

constexpr double kRequestMagic = 0x52454a4e;  // "REJN"
constexpr double kStateMagic = 0x4a535441;    // "JSTA"
constexpr double kMaxExact = 9.0e15;          // below 2^53

bool isCount(double v, double below) { return v >= 0 && v < below && v == std::floor(v); }

core::Result<std::vector<double>> values(std::span<const std::byte> bytes, const char* what) {
  auto view = compression::parseFrame(bytes);
  if (!view) return core::corruption(std::string(what) + ": " + view.status().message());
  std::vector<double> scratch;
  auto v = compression::decodeDense<double>(bytes, view->elementCount, scratch);
  if (!v) return core::corruption(std::string(what) + ": " + v.status().message());
  return std::vector<double>(v->begin(), v->end());
}

}  // namespace

transport::Bytes encodeJoinRequest(uint64_t attempt) {
  const double v[3] = {kRequestMagic, static_cast<double>(attempt >> 32),
                       static_cast<double>(attempt & 0xffffffffu)};
  transport::Bytes out;
  compression::encodeDense<double>(std::span<const double>(v, 3), out);
  return out;
}

core::Result<uint64_t> decodeJoinRequest(std::span<const std::byte> bytes) {
  auto v = values(bytes, "join request");
  if (!v) return v.status();
  const auto& x = *v;
  if (x.size() != 3 || x[0] != kRequestMagic || !isCount(x[1], 4294967296.0) ||
      !isCount(x[2], 4294967296.0)) {
    return core::corruption("join request: not one");
  }
  return (static_cast<uint64_t>(x[1]) << 32) | static_cast<uint64_t>(x[2]);
}

// Layout: magic, round, epoch, nodes, entries, dim, channel; `nodes` alive flags; 4 per entry
// (rank, change, at, applied); the model; the carried state (none, or dim values).
transport::Bytes encodeJoinState(const JoinState& s) {
  std::vector<double> v = {kStateMagic,
                           static_cast<double>(s.round),
                           static_cast<double>(s.epoch),
                           static_cast<double>(s.alive.size()),
                           static_cast<double>(s.entries.size()),
                           static_cast<double>(s.model.size()),
                           static_cast<double>(s.channel)};
  for (bool a : s.alive) v.push_back(a ? 1 : 0);
  for (const auto& e : s.entries) {
    v.push_back(e.rank);
    v.push_back(static_cast<double>(e.change));
    v.push_back(static_cast<double>(e.at));
    v.push_back(e.applied ? 1 : 0);
  }
  v.insert(v.end(), s.model.begin(), s.model.end());
  v.insert(v.end(), s.carried.begin(), s.carried.end());
  transport::Bytes out;
  compression::encodeDense<double>(v, out);
  return out;
}

core::Result<JoinState> decodeJoinState(std::span<const std::byte> bytes, int nodes, size_t dim) {
  auto decoded = values(bytes, "join state");
  if (!decoded) return decoded.status();
  const auto& x = *decoded;
  const auto bad = [](const std::string& why) { return core::corruption("join state: " + why); };
  if (x.size() < 7 || x[0] != kStateMagic) return bad("not one");
  if (!isCount(x[1], kMaxExact) || !isCount(x[2], kMaxExact)) return bad("bad round or epoch");
  if (x[3] != nodes) return bad("for a run of " + std::to_string(x[3]) + " nodes");
  if (!isCount(x[4], MembershipGossip::kMaxEntries + 1.0)) return bad("bad entry count");
  JoinState s;
  s.round = static_cast<uint64_t>(x[1]);
  s.epoch = static_cast<uint64_t>(x[2]);
  const auto entries = static_cast<size_t>(x[4]);
  const size_t want = s.round == 0 ? 0 : dim;
  if (x[5] != static_cast<double>(want)) return bad("a model of " + std::to_string(x[5]) + " values");
  if (!isCount(x[6], 16)) return bad("bad channel");
  s.channel = static_cast<uint32_t>(x[6]);
  const size_t head = 7 + static_cast<size_t>(nodes) + 4 * entries;
  const bool carries = want > 0 && x.size() == head + 2 * want;
  if (x.size() != head + want && !carries) return bad("wrong length");
  size_t k = 7;
  for (int r = 0; r < nodes; ++r, ++k) {
    if (x[k] != 0 && x[k] != 1) return bad("bad alive flag");
    s.alive.push_back(x[k] == 1);
  }
  for (size_t e = 0; e < entries; ++e, k += 4) {
    if (!isCount(x[k], nodes) || !isCount(x[k + 1], MembershipGossip::kMaxChange + 1.0) ||
        x[k + 1] < 1 || !isCount(x[k + 2], kMaxExact) || (x[k + 3] != 0 && x[k + 3] != 1)) {
      return bad("bad membership change");
    }
    s.entries.push_back(MembershipGossip::Entry{static_cast<int>(x[k]),
                                                static_cast<uint64_t>(x[k + 1]),
                                                static_cast<uint64_t>(x[k + 2]), x[k + 3] == 1});
  }
  const auto model = x.begin() + static_cast<std::ptrdiff_t>(k);
  s.model.assign(model, model + static_cast<std::ptrdiff_t>(want));
  for (double m : s.model) {
    if (!std::isfinite(m)) return bad("a non-finite model value");
  }
  if (carries) s.carried.assign(model + static_cast<std::ptrdiff_t>(want), x.end());
  for (double c : s.carried) {
    if (!std::isfinite(c)) return bad("a non-finite carried value");
  }
  return s;
}

core::Result<uint64_t> rejoinLogBytes(const std::filesystem::path& path, const std::string& header) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::filesystem::create_directories(path.parent_path(), ec);
    auto created = core::LineFile::create(path);
    if (!created) return created.status();
    STARLING_RETURN_IF_ERROR((*created)->append(header));
    return (*created)->size();
  }
  auto limit = core::memoryLimitBytes();
  if (!limit) return limit.status();
  auto read =
      core::readRegularFile(path.string(), *limit, "peer log");  // never a FIFO or /dev/zero
  if (!read) return read.status();
  const std::string& text = *read;
  const size_t nl = text.rfind('\n');
  if (nl == std::string::npos) {
    return core::corruption(path.string() + ": not a peer log (no whole line)");
  }
  return static_cast<uint64_t>(nl + 1);
}

core::Result<JoinState> requestRejoin(transport::Transport& net, const RejoinOptions& opt) {
  if (opt.ask.empty()) return core::failedPrecondition("rank " + std::to_string(opt.rank) +
                                                       " has no neighbour to rejoin through");
  // What the callbacks write; shared, because receives left pending when this returns complete
  // later (with the transport's other work).
  struct Shared {
    std::optional<JoinState> state;
    size_t failed = 0;
    std::string lastError;
    uint64_t corrupt = 0;
  };
  auto shared = std::make_shared<Shared>();
  uint64_t attempt = 0;
  {
    std::random_device rd;
    attempt = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  auto request = std::make_shared<transport::Bytes>(encodeJoinRequest(attempt));
  std::string asked;
  for (int peer : opt.ask) {
    asked += (asked.empty() ? "" : ", ") + std::to_string(peer);
    net.send(peer, transport::Tag{0, kJoinChannel}, request, [](const core::Status&) {});
    // Each neighbour's answer is awaited until the deadline; a wrong one is counted and the
    // next awaited (a transport hands out one message per receive).
    auto post = std::make_shared<std::function<void()>>();
    *post = [&net, peer, shared, post, nodes = opt.nodes, dim = opt.dim, rank = opt.rank,
             deadline = opt.deadline] {
      net.recv(peer, transport::Tag{0, kJoinStateChannel}, deadline,
               [peer, shared, post, nodes, dim, rank](const core::Status& st,
                                                      transport::SharedBytes b) {
                 if (!st.isOk()) {
                   shared->failed++;
                   shared->lastError = "rank " + std::to_string(peer) + ": " + st.message();
                   *post = nullptr;  // no cycle left behind
                   return;
                 }
                 auto s = decodeJoinState(*b, nodes, dim);
                 if (s && s->round > 0 && !s->alive[static_cast<size_t>(rank)]) {
                   s = core::corruption("join state: a membership without this rank");
                 }
                 if (!s) {
                   shared->corrupt++;
                   shared->lastError = "rank " + std::to_string(peer) + ": " + s.status().message();
                   (*post)();
                   return;
                 }
                 if (!shared->state) shared->state = std::move(*s);
                 *post = nullptr;
               });
    };
    (*post)();
  }
  if (opt.log) {
    opt.log("asked rank" + std::string(opt.ask.size() > 1 ? "s " : " ") + asked +
            " to take this peer back (attempt " + std::to_string(attempt) + ")");
  }
  while (!shared->state) {
    if (opt.stop && opt.stop->load()) return core::cancelled("stopped while rejoining");
    if (shared->failed >= opt.ask.size()) {
      return core::unavailable("no neighbour answered the join request (asked rank" +
                               std::string(opt.ask.size() > 1 ? "s " : " ") + asked +
                               "; last: " + shared->lastError + ")");
    }
    const auto now = transport::Clock::now();
    if (now >= opt.deadline) {
      return core::timeout("no join state from rank" + std::string(opt.ask.size() > 1 ? "s " : " ") +
                           asked + " in time");
    }
    auto progressed = net.progress(std::min(opt.deadline, now + std::chrono::milliseconds(200)));
    if (!progressed) return progressed.status();
  }
  return *shared->state;
}

}  // namespace starling::engine
