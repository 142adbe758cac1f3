// GossipAlgorithm::lend/release: Peer::mix lends the trainer's buffer to plain gossip for one
// round, so the message is read from it and the mixed model written into it without copies. The
// round must be the one the copying path (setModel, then model() copied out) makes, value for
// value; a round that fails its divergence check must leave the buffer as the trainer lent it;
// and after release() nothing may read the buffer again.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "optim/combine.h"
#include "optim/gossip.h"

namespace starling::optim {
namespace {

// Three partial blocks of the combine (1,024 values), odd, so no loop ends on a block boundary.
constexpr size_t kLendDim = 2 * 1024 + 517;

template <typename T>
std::vector<T> values(double base, double slope) {
  std::vector<T> v(kLendDim);
  for (size_t k = 0; k < kLendDim; ++k) {
    v[k] = static_cast<T>(base + slope * static_cast<double>(k % 89));
  }
  return v;
}

// The round written out by hand: x_k + sum_j (gamma w_j) (m_jk - x_k), neighbours in order.
template <typename T>
std::vector<T> expected(const std::vector<T>& x, const std::vector<std::vector<T>>& m,
                        const std::vector<double>& w, double gamma) {
  std::vector<T> out(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    T acc = x[k];
    for (size_t j = 0; j < m.size(); ++j) {
      acc += static_cast<T>(gamma) * static_cast<T>(w[j]) * (m[j][k] - x[k]);
    }
    out[k] = acc;
  }
  return out;
}

template <typename T>
std::vector<NeighborMessage<T>> messages(const std::vector<std::vector<T>>& m,
                                         const std::vector<double>& w) {
  std::vector<NeighborMessage<T>> out;
  for (size_t j = 0; j < m.size(); ++j) {
    out.push_back(NeighborMessage<T>{static_cast<int>(j + 1), w[j], m[j]});
  }
  return out;
}

template <typename T>
std::vector<T> prepared(GossipAlgorithm<T>& g, const RoundInfo& info) {
  std::vector<T> frame(kLendDim, T(-9));
  for (size_t b = 0; b < kLendDim; b += 4096) {  // the node's block walk
    const size_t n = std::min<size_t>(4096, kLendDim - b);
    g.prepareBlock(info, b, std::span<T>(frame).subspan(b, n));
  }
  return frame;
}

TEMPLATE_TEST_CASE("plain gossip on a lent buffer mixes into it, as the copying path does",
                   "[optim][unit]", float, double) {
  const double gamma = 0.8;
  const std::vector<double> w = {0.3, 0.25};
  const RoundInfo info{0, 0.0, 0.45};
  auto lent = createGossip<TestType>(gamma, kLendDim, /*compressed=*/false, /*timeVarying=*/false);
  auto copying = createGossip<TestType>(gamma, kLendDim, false, false);
  std::vector<TestType> user = values<TestType>(0.5, 0.01);
  for (int round = 0; round < 3; ++round) {
    // The trainer moves its parameters between rounds; each round lends them anew.
    for (size_t k = 0; k < kLendDim; ++k) user[k] += static_cast<TestType>(0.001 * (k % 7) - 0.003);
    const std::vector<TestType> x = user;
    const std::vector<std::vector<TestType>> m = {values<TestType>(1.0 + round, 0.02),
                                                  values<TestType>(-2.0, 0.005 * round)};
    lent->lend(user);
    copying->setModel(x);
    // Before the combine the model is the lent buffer, and so is the message.
    CHECK(std::vector<TestType>(lent->model().begin(), lent->model().end()) == x);
    const auto frame = prepared(*lent, info);
    CHECK(frame == x);
    const auto nbrs = messages(m, w);
    CHECK(lent->absorbWithin(info, frame, nbrs, std::numeric_limits<TestType>::max()));
    copying->absorb(info, prepared(*copying, info), nbrs);
    const auto want = expected(x, m, w, gamma);
    CHECK(user == want);
    CHECK(lent->release());
    CHECK(std::vector<TestType>(copying->model().begin(), copying->model().end()) == want);
    // After release the gossip keeps its own copy: a trainer that reuses (or frees) the
    // buffer changes nothing the engine reads between rounds (logs, a rejoining neighbour).
    std::vector<TestType> scribble = user;
    user.assign(kLendDim, TestType(123));
    CHECK(std::vector<TestType>(lent->model().begin(), lent->model().end()) == want);
    user = scribble;
  }
  CHECK_FALSE(lent->release());  // nothing lent
}

TEMPLATE_TEST_CASE("plain gossip's combine matches the hand-written round for 0 to 6 neighbours",
                   "[optim][unit]", float, double) {
  // 0-4 neighbours take the fused loops, more the pass-per-neighbour one; lent or not.
  const RoundInfo info{0, 0.0, 0.2};
  for (size_t count = 0; count <= 6; ++count) {
    for (const bool lend : {false, true}) {
      std::vector<std::vector<TestType>> m;
      std::vector<double> w;
      for (size_t j = 0; j < count; ++j) {
        m.push_back(values<TestType>(0.3 * static_cast<double>(j) - 1.0, 0.003 * (j + 1)));
        w.push_back(0.1 + 0.03 * static_cast<double>(j));
      }
      auto g = createGossip<TestType>(0.9, kLendDim, false, false);
      std::vector<TestType> user = values<TestType>(0.7, -0.002);
      const std::vector<TestType> x = user;
      if (lend) {
        g->lend(user);
      } else {
        g->setModel(user);
      }
      const auto frame = prepared(*g, info);
      CHECK(g->absorbWithin(info, frame, messages(m, w), std::numeric_limits<TestType>::max()));
      const auto want = expected(x, m, w, 0.9);
      INFO("neighbours " << count << (lend ? ", lent" : ""));
      CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == want);
      CHECK(g->release() == lend);
      CHECK(user == (lend ? want : x));
    }
  }
}

TEMPLATE_TEST_CASE("a lent round that diverges leaves the trainer's buffer as it was lent",
                   "[optim][unit]", float, double) {
  auto g = createGossip<TestType>(1.0, kLendDim, false, false);
  const RoundInfo info{0, 0.0, 0.5};
  std::vector<TestType> user = values<TestType>(0.25, 0.01);
  const std::vector<TestType> x = user;
  for (const size_t at : {size_t{3}, size_t{1500}, kLendDim - 1}) {  // first, middle and last block
    std::vector<std::vector<TestType>> m = {values<TestType>(1.0, 0.0)};
    m[0][at] = std::numeric_limits<TestType>::infinity();
    g->lend(user);
    const auto frame = prepared(*g, info);
    CHECK_FALSE(g->absorbWithin(info, frame, messages(m, {0.5}), TestType(1e6)));
    CHECK(user == x);
    // The model the node's error names is the diverged one, coordinate `at` included.
    CHECK(std::isinf(g->model()[at]));
    CHECK_FALSE(g->release());
    CHECK(std::isinf(g->model()[at]));
    CHECK(user == x);
  }
}

TEMPLATE_TEST_CASE("a loan that ends before its combine never reads the buffer again",
                   "[optim][unit]", float, double) {
  // release() also runs where the trainer has freed the buffer (a Peer destroyed with a failed
  // mix in flight): it must not read it, and the model stays what it was before the loan.
  auto g = createGossip<TestType>(1.0, kLendDim, false, false);
  const std::vector<TestType> before = values<TestType>(-1.0, 0.02);
  g->setModel(before);
  std::vector<TestType> user = values<TestType>(2.0, -0.01);
  g->lend(user);
  CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == user);  // lent: the buffer
  user.assign(kLendDim, TestType(0));
  CHECK_FALSE(g->release());  // the round failed before its messages were combined
  CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == before);
}

TEMPLATE_TEST_CASE("where the node keeps the frames, a lent round writes only the buffer and "
                   "recomputes its own copy on demand", "[optim][unit]", float, double) {
  // RoundInfo::messagesKept: the node keeps `own` and the messages alive after absorb while
  // holdsMessages() says so. The gossip then leaves x_ unwritten; model() after the loan must
  // still be the mixed model, bit for bit, whatever the trainer does to its buffer.
  const double gamma = 0.7;
  const std::vector<double> w = {0.2, 0.35};
  RoundInfo info{0, 0.0, 0.45};
  info.messagesKept = true;
  auto g = createGossip<TestType>(gamma, kLendDim, false, false);
  std::vector<TestType> user = values<TestType>(0.5, 0.01);
  std::vector<TestType> lastMixed;
  for (int round = 0; round < 3; ++round) {
    for (size_t k = 0; k < kLendDim; ++k) user[k] += static_cast<TestType>(0.002 * (k % 5) - 0.004);
    const std::vector<TestType> x = user;
    const std::vector<std::vector<TestType>> m = {values<TestType>(0.5 * round, 0.03),
                                                  values<TestType>(-1.0, 0.007)};
    g->lend(user);
    CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == x);
    // The node's frames: they live until the node's next absorb.
    const auto frame = prepared(*g, info);
    const auto nbrs = messages(m, w);
    CHECK(g->absorbWithin(info, frame, nbrs, std::numeric_limits<TestType>::max()));
    CHECK(g->holdsMessages());
    const auto want = expected(x, m, w, gamma);
    CHECK(user == want);
    // During the loan the model is the buffer, which holds the mixed model.
    CHECK(g->model().data() == user.data());
    CHECK(g->release());
    // The trainer scribbles over its buffer (or frees it): model() is the mixed model,
    // recomputed from the kept messages, and the second read is the same.
    user.assign(kLendDim, TestType(-55));
    CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == want);
    CHECK_FALSE(g->holdsMessages());  // recomputed: the frames are no longer read
    CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == want);
    user = want;
    lastMixed = want;
  }
  // A loan whose round fails before its combine: the model is the last mixed one, from the
  // frames the node still keeps (it absorbed nothing since), as on the copying path.
  {
    const std::vector<std::vector<TestType>> m = {values<TestType>(1.0, 0.01),
                                                  values<TestType>(2.0, 0.02)};
    const auto nbrs = messages(m, w);
    g->lend(user);
    const auto frame = prepared(*g, info);
    CHECK(g->absorbWithin(info, frame, nbrs, std::numeric_limits<TestType>::max()));
    const auto want = expected(lastMixed, m, w, gamma);
    CHECK(g->release());
    std::vector<TestType> next = values<TestType>(9.0, 0.0);
    g->lend(next);
    next.assign(kLendDim, TestType(0));
    CHECK_FALSE(g->release());
    CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == want);
  }
  // setModel supersedes the kept messages.
  {
    std::vector<TestType> x = values<TestType>(0.1, 0.0);
    const std::vector<std::vector<TestType>> m = {values<TestType>(1.0, 0.01)};
    g->lend(x);
    const auto frame = prepared(*g, info);
    CHECK(g->absorbWithin(info, frame, messages(m, {0.5}), std::numeric_limits<TestType>::max()));
    CHECK(g->holdsMessages());
    CHECK(g->release());
    const auto y = values<TestType>(-4.0, 0.001);
    g->setModel(y);
    CHECK_FALSE(g->holdsMessages());
    CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == y);
  }
}

TEMPLATE_TEST_CASE("where the node keeps the frames, a lent round that diverges still names "
                   "the diverged model and restores the buffer", "[optim][unit]", float, double) {
  auto g = createGossip<TestType>(1.0, kLendDim, false, false);
  RoundInfo info{0, 0.0, 0.5};
  info.messagesKept = true;
  std::vector<TestType> user = values<TestType>(0.25, 0.01);
  const std::vector<TestType> x = user;
  std::vector<std::vector<TestType>> m = {values<TestType>(1.0, 0.0)};
  m[0][1500] = std::numeric_limits<TestType>::infinity();
  g->lend(user);
  const auto frame = prepared(*g, info);
  CHECK_FALSE(g->absorbWithin(info, frame, messages(m, {0.5}), TestType(1e6)));
  CHECK_FALSE(g->holdsMessages());
  CHECK(user == x);
  CHECK(std::isinf(g->model()[1500]));
  CHECK(g->model()[3] == expected(x, m, {0.5}, 1.0)[3]);
  CHECK_FALSE(g->release());
  CHECK(std::isinf(g->model()[1500]));
}

TEST_CASE("streamCopy copies like memcpy at every size and alignment", "[optim][unit]") {
  std::vector<unsigned char> src(600), dst(700), want(700);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 37 + 11);
  for (size_t from = 0; from < 17; ++from) {
    for (size_t to = 0; to < 17; ++to) {
      for (const size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{63},
                             size_t{64}, size_t{65}, size_t{129}, size_t{500}}) {
        std::fill(dst.begin(), dst.end(), 0xAB);
        want = dst;
        std::memcpy(want.data() + to, src.data() + from, n);
        detail::streamCopy(src.data() + from, dst.data() + to, n);
        detail::streamFence();
        INFO("from +" << from << ", to +" << to << ", " << n << " bytes");
        REQUIRE(dst == want);  // nothing outside [to, to + n) touched either
      }
    }
  }
}

TEMPLATE_TEST_CASE("a large message into lent memory is streamed, and read back from its source",
                   "[optim][unit]", float, double) {
  // RoundInfo::messageLent and a message of detail::kStreamBytes or more: prepareBlock copies
  // with non-temporal stores and returns the block it copied from, for the node's check and
  // checksum. The frame must hold the model exactly, whatever its alignment.
  const size_t d = detail::kStreamBytes / sizeof(TestType) + 1001;
  auto g = createGossip<TestType>(1.0, d, false, false);
  std::vector<TestType> user(d);
  for (size_t k = 0; k < d; ++k) user[k] = static_cast<TestType>(std::sin(0.001 * k) * 3.0);
  for (const bool lent : {true, false}) {
    RoundInfo info{0, 0.0, 0.5};
    info.messageLent = lent;
    g->lend(user);
    std::vector<TestType> storage(d + 1, TestType(-7));
    const std::span<TestType> frame = std::span<TestType>(storage).subspan(1);  // misaligned
    bool fromSource = true, fromFrame = true;
    for (size_t b = 0; b < d; b += 4096) {
      const size_t n = std::min<size_t>(4096, d - b);
      const auto back = g->prepareBlock(info, b, frame.subspan(b, n));
      REQUIRE(back.size() == n);
      fromSource = fromSource && back.data() == user.data() + b;
      fromFrame = fromFrame && back.data() == frame.data() + b;
      REQUIRE(std::equal(back.begin(), back.end(), user.begin() + static_cast<std::ptrdiff_t>(b)));
    }
    INFO((lent ? "lent" : "not lent"));
    CHECK(std::equal(frame.begin(), frame.end(), user.begin()));
    CHECK(storage[0] == TestType(-7));
    CHECK(fromSource == lent);
    CHECK(fromFrame == !lent);
    CHECK_FALSE(g->release());  // no combine ran
  }
  // A small message is copied as usual even into lent memory.
  auto small = createGossip<TestType>(1.0, kLendDim, false, false);
  std::vector<TestType> x = values<TestType>(0.5, 0.01);
  small->lend(x);
  RoundInfo info{0, 0.0, 0.5};
  info.messageLent = true;
  std::vector<TestType> frame(kLendDim);
  const auto back = small->prepareBlock(info, 0, frame);
  CHECK(back.data() == frame.data());
  CHECK(frame == x);
}

TEMPLATE_TEST_CASE("compressed gossip keeps the copying path when lent a buffer",
                   "[optim][unit]", float, double) {
  auto g = createGossip<TestType>(1.0, kLendDim, /*compressed=*/true, false);
  std::vector<TestType> user = values<TestType>(1.0, 0.01);
  const std::vector<TestType> x = user;
  g->lend(user);
  user.assign(kLendDim, TestType(7));
  CHECK(std::vector<TestType>(g->model().begin(), g->model().end()) == x);
  CHECK_FALSE(g->release());
}

}  // namespace
}  // namespace starling::optim
