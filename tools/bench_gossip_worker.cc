// One Starling worker of bench-gossip: a rank of the ring over the UCX transport, doing what
// engine/node.cc does in a round (see bench_gossip.cc for the round and docs/bench_gossip.md).
#include "tools/bench_gossip_worker.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "compression/frame.h"
#include "transport/buffer_pool.h"
#include "transport/factory.h"
#include "transport/transport.h"
#include "tools/bench_gossip_round.h"

namespace starling::bench::gossip {
namespace {

using transport::Bytes;
using transport::SharedBytes;
using transport::Tag;

constexpr auto kRoundTimeout = std::chrono::seconds(30);

class RingPeer {
 public:
  RingPeer(transport::Transport& net, int peers, size_t dim, bool spin)
      : net_(net), peers_(peers), dim_(dim), spin_(spin) {
    const int r = net.rank();
    nbr_ = {(r + peers - 1) % peers, (r + 1) % peers};
    const std::span<float> x = nextFrame();
    initialValues(r, x);
    compression::sealFrame(frameBytes_);
    x_ = x;
  }

  // The next round's frame, as runtime::Node gets it: memory the transport sends without a copy
  // (a shared-memory segment its neighbours map) when it has some, else a recycled buffer.
  std::span<float> nextFrame() {
    const size_t size = compression::denseFrameBytes<float>(dim_);
    if (auto out = net_.allocate(size)) {
      frame_ = std::move(out->message);
      frameBytes_ = out->bytes;
    } else {
      auto buffer = framePool_.acquire(size);
      frameBytes_ = *buffer;
      frame_ = std::move(buffer);
    }
    return compression::beginDense<float>(dim_, frameBytes_);
  }

  std::span<const float> x() const { return x_; }

  // One gossip round; adds its phases to `phases`. x lives in the payload of the frame this round
  // sends (sealed by the last round's combine), and the combine writes the next x straight into
  // the next round's frame and seals it: no copy, and no pass of its own for the CRC.
  core::Status round(uint64_t round, std::array<double, kPhases>& phases) {
    const auto t1 = Clock::now();

    const Tag tag{round, kModelChannel};
    const auto deadline = Clock::now() + kRoundTimeout;
    std::array<SharedBytes, 2> got;
    std::array<std::span<const float>, 2> values;
    core::Status failure;
    int pending = 2;
    double verifyS = 0;
    for (int s = 0; s < 2; ++s) {
      ++sendsInFlight_;
      net_.send(nbr_[s], tag, frame_, [this](const core::Status& st) {
        --sendsInFlight_;
        if (!st.isOk() && sendFailure_.isOk()) sendFailure_ = st;
      });
      net_.recv(nbr_[s], tag, deadline, [&, s](const core::Status& st, SharedBytes bytes) {
        --pending;
        if (!st.isOk()) {
          if (failure.isOk()) failure = st;
          return;
        }
        // Checked as soon as it arrives, while the other neighbour's message is still on its way
        // (its CRC too, unless the transport vouches for the bytes, as runtime::Node does).
        const auto v0 = Clock::now();
        auto decoded = compression::decodeDense<float>(
            *bytes, dim_, scratch_[s],
            bytes.intact() ? compression::Checksum::kSkip : compression::Checksum::kVerify);
        verifyS += seconds(v0, Clock::now());
        if (!decoded) {
          if (failure.isOk()) failure = decoded.status();
          return;
        }
        values[s] = *decoded;
        got[s] = std::move(bytes);
      });
    }
    STARLING_RETURN_IF_ERROR(pump(pending, deadline));
    const auto t2 = Clock::now();
    STARLING_RETURN_IF_ERROR(failure);
    STARLING_RETURN_IF_ERROR(sendFailure_);

    // Frames are recycled once the transport has let go of them (as runtime::Node does).
    SharedBytes sent = std::move(frame_);  // x_ views it until the combine is done
    const std::span<float> out = nextFrame();
    const auto t3 = Clock::now();
    combineAndSeal(frameBytes_, out, x_, values[0], values[1]);
    const auto t4 = Clock::now();
    got = {};
    sent.reset();  // the transport keeps what it still needs (sends, neighbours reading it)
    x_ = out;
    const auto t5 = Clock::now();

    phases[kExchange] += seconds(t1, t2) - verifyS;
    phases[kVerify] += verifyS;
    phases[kFrame] += seconds(t2, t3);
    phases[kCombine] += seconds(t3, t4);
    phases[kRelease] += seconds(t4, t5);
    return core::Status::ok();
  }

  // Rank 0 tells every rank how many rounds to time (a one-element float64 frame).
  core::Result<int> agreeOnRounds(int proposal) {
    const Tag tag{0, kControlChannel};
    const auto deadline = Clock::now() + kRoundTimeout;
    if (net_.rank() == 0) {
      auto frame = std::make_shared<Bytes>();
      const double value = proposal;
      compression::encodeDense<double>(std::span<const double>(&value, 1), *frame);
      for (int p = 1; p < peers_; ++p) {
        ++sendsInFlight_;
        net_.send(p, tag, frame, [this](const core::Status& st) {
          --sendsInFlight_;
          if (!st.isOk() && sendFailure_.isOk()) sendFailure_ = st;
        });
      }
      return proposal;
    }
    int pending = 1;
    core::Status failure;
    int rounds = 0;
    net_.recv(0, tag, deadline, [&](const core::Status& st, SharedBytes bytes) {
      --pending;
      if (!st.isOk()) {
        failure = st;
        return;
      }
      std::vector<double> scratch;
      auto v = compression::decodeDense<double>(*bytes, 1, scratch);
      if (!v) {
        failure = v.status();
        return;
      }
      rounds = static_cast<int>((*v)[0]);
    });
    STARLING_RETURN_IF_ERROR(pump(pending, deadline));
    STARLING_RETURN_IF_ERROR(failure);
    return rounds;
  }

  // The neighbours still need this rank's last frames: hand them to the network before closing.
  core::Status flush() {
    const auto deadline = Clock::now() + kRoundTimeout;
    while (sendsInFlight_ > 0) {
      if (Clock::now() > deadline) return core::timeout("sends still in flight at exit");
      auto ran = net_.progress(deadline);
      if (!ran) return ran.status();
    }
    return sendFailure_;
  }

 private:
  transport::BufferPool framePool_{4};
  core::Status pump(const int& pending, Clock::time_point deadline) {
    while (pending > 0) {
      // Receives expire at `deadline`; the margin only guards against a lost completion.
      if (Clock::now() > deadline + std::chrono::seconds(5)) {
        return core::internalError("round did not complete after its deadline");
      }
      // Spinning: never sleep in the transport, give the core away between polls.
      auto ran = net_.progress(spin_ ? Clock::now() : deadline + std::chrono::seconds(1));
      if (!ran) return ran.status();
      if (spin_ && *ran == 0) sched_yield();
    }
    return core::Status::ok();
  }

  transport::Transport& net_;
  int peers_;
  size_t dim_;
  bool spin_;
  SharedBytes frame_;                 // this round's frame; x_ views its payload
  std::span<std::byte> frameBytes_;  // the same, writable until it is sent
  std::span<const float> x_;
  std::array<int, 2> nbr_{};
  std::array<std::vector<float>, 2> scratch_;
  int sendsInFlight_ = 0;
  core::Status sendFailure_;
};

}  // namespace

void combineAndSeal(std::span<std::byte> frame, std::span<float> out, std::span<const float> x,
                    std::span<const float> left, std::span<const float> right) {
  constexpr size_t kBlock = 4096;
  compression::Crc32c crc;
  const auto* payload = reinterpret_cast<const std::byte*>(out.data());
  crc.update(frame.first(static_cast<size_t>(payload - frame.data())));
  for (size_t b = 0; b < out.size(); b += kBlock) {
    const size_t n = std::min(kBlock, out.size() - b);
    const auto block = out.subspan(b, n);
    combineRing(block, x.subspan(b, n), left.subspan(b, n), right.subspan(b, n));
    crc.update(std::as_bytes(block));
  }
  const std::byte* end = payload + out.size_bytes();
  crc.update({end, static_cast<size_t>(frame.data() + frame.size() -
                                       compression::kFrameTrailerBytes - end)});
  compression::sealFrame(frame, crc.value());
}

int roundsFor(double roundS, const WorkerOptions& o) {
  const int wanted = static_cast<int>(std::ceil(o.minSeconds / std::max(roundS, 1e-9)));
  return std::clamp(wanted, std::min(5, o.roundsMax), o.roundsMax);
}

core::Status runWorker(const WorkerOptions& o) {
  transport::NetworkOptions no;
  no.rank = o.rank;
  no.addresses = o.addresses;
  no.tls = o.tls;
  no.ucxTls = o.ucxTls;
  no.spin = std::chrono::microseconds(o.spinUs);
  no.busyPoll = o.busyPoll == "auto" ? transport::coreForEachLocalRank(o.addresses, o.rank)
                                     : o.busyPoll == "on";
  no.sharedMemoryFrames = !o.noShmFrames;
  if (o.security != "none") {
    auto key = std::make_shared<transport::auth::ClusterKey>();
    const std::string fixed = "bench-gossip: a fixed key, not a secret";
    for (char c : fixed) key->master.push_back(static_cast<std::byte>(c));
    no.key = std::move(key);
    no.encrypt = o.security == "encrypt";
  }
  auto net = transport::createNetworkTransport(no);
  if (!net) return net.status();
  const int peers = static_cast<int>(o.addresses.size());
  RingPeer ring(**net, peers, o.dim, o.spin);

  std::array<double, kPhases> phases{};
  uint64_t round = 0;
  double lastS = 0;
  for (int w = 0; w < o.warmup; ++w, ++round) {
    const auto t0 = Clock::now();
    STARLING_RETURN_IF_ERROR(ring.round(round, phases).withContext("warm-up round"));
    lastS = seconds(t0, Clock::now());
  }
  auto rounds = ring.agreeOnRounds(roundsFor(lastS, o));
  if (!rounds) return rounds.status().withContext("agreeing on the round count");
  for (int s = 0; s < o.settle; ++s, ++round) {
    STARLING_RETURN_IF_ERROR(ring.round(round, phases).withContext("settling round"));
  }

  phases = {};
  std::array<double, kPhases> trailing{};
  std::vector<double> times;
  for (int t = 0; t < *rounds; ++t, ++round) {
    const auto t0 = Clock::now();
    STARLING_RETURN_IF_ERROR(
        ring.round(round, phases).withContext("round " + std::to_string(round)));
    times.push_back(seconds(t0, Clock::now()));
  }
  for (int s = 0; s < o.settle; ++s, ++round) {
    STARLING_RETURN_IF_ERROR(ring.round(round, trailing).withContext("trailing round"));
  }
  STARLING_RETURN_IF_ERROR(ring.flush());

  std::ofstream out(o.out);
  out << "rounds " << *rounds << "\nmaxerr "
      << maxError(peers, o.rank, static_cast<int>(round), ring.x()) << "\nphases";
  for (double p : phases) out << ' ' << p / *rounds;
  out << '\n';
  for (double t : times) out << t << '\n';
  out.close();
  return out ? core::Status::ok() : core::ioError("cannot write " + o.out);
}

}  // namespace starling::bench::gossip
