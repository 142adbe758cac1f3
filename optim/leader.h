// Leader SGD (LSGD): every worker pulls toward the best-performing worker it knows, a local
// leader among its neighbours and a global leader among all (docs/algorithms.md §24).
//
// Two kinds of pull, with x~_L and x~_G the last leader models a node has received:
//   proximal (every step):   x <- x - eta (u + lambda_L (x - x~_L) + lambda_G (x - x~_G)),
//                            lambda_L = p_L / (tau_L eta),  lambda_G = p_G / (tau_G eta)
//     so that each step moves x by p_L / tau_L of its distance to x~_L (and likewise to x~_G): the
//     reference's per-step convex combinations x <- (1 - p/tau) x + (p/tau) x~, applied together
//     with the descent step instead of one after the other (the two differ by terms of the
//     order of (p/tau) eta ||u|| and (p_L/tau_L)(p_G/tau_G)).
//   pulling (when a leader's model arrives, every tau_L rounds for the local leader, every tau_G
//   for the global one):     x <- (1 - c) x + c x~    (c = c_L or c_G)
// u is the node's update direction: its gradient, or a LocalOptimizer's direction (the reference
// uses Nesterov momentum), so that the pull never enters a momentum buffer.
// The leader is the candidate with the lowest running training loss (the mean over the last
// `window` batches); ties go to the lowest rank, and a NaN loss never leads.
//
// How it is meant to be driven: each node keeps a RunningLoss of its batch losses. Every tau_L
// rounds it learns its neighbours' running losses (a few scalars in the round's message),
// chooseLeader picks the local leader among itself and them, and the node fetches that model
// (a node that leads itself pulls toward nothing). Every tau_G rounds the global leader is found by
// max-consensus of (-loss, -rank) over diameter rounds of gossip and its model spread the same
// way, without a server. On arrival of a leader's model the node applies leaderPull with c, and
// between arrivals leaderDirection with the lambdas of leaderProximalStrengths toward the stale
// copies. What is sent when, and from whom, is the runtime's.
// Thread-safety: pure functions; RunningLoss belongs to one node.
#pragma once

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"

namespace starling::optim {

struct LeaderSpec {
  double pullLocal = 0.1;       // c_L in [0, 1]: pulling strength toward the local leader
  double pullGlobal = 0.1;      // c_G in [0, 1]
  double proximalLocal = 0.1;   // p_L in [0, 1]: proximal strength toward the local leader
  double proximalGlobal = 0.1;  // p_G in [0, 1]
  uint64_t localPeriod = 4;     // tau_L >= 1 rounds between local leader elections
  uint64_t globalPeriod = 16;   // tau_G >= 1 rounds between global leader elections
  uint64_t lossWindow = 4;      // batches in the running loss (the reference uses tau_L)
};

// kInvalidArgument naming the field when a value is out of its range.
inline core::Status checkLeaderSpec(const LeaderSpec& spec) {
  const auto unit = [](const char* name, double v) {
    return v >= 0.0 && v <= 1.0
               ? core::Status::ok()
               : core::invalidArgument(std::string("leader: ") + name + " must be in [0, 1], got " +
                                       std::to_string(v));
  };
  STARLING_RETURN_IF_ERROR(unit("pull_local", spec.pullLocal));
  STARLING_RETURN_IF_ERROR(unit("pull_global", spec.pullGlobal));
  STARLING_RETURN_IF_ERROR(unit("proximal_local", spec.proximalLocal));
  STARLING_RETURN_IF_ERROR(unit("proximal_global", spec.proximalGlobal));
  if (spec.localPeriod == 0 || spec.globalPeriod == 0 || spec.lossWindow == 0) {
    return core::invalidArgument(
        "leader: local_period, global_period and loss_window must be >= 1");
  }
  return core::Status::ok();
}

struct LeaderStrengths {
  double local = 0.0;   // lambda_L
  double global = 0.0;  // lambda_G
};

// lambda_L = p_L / (tau_L eta), lambda_G = p_G / (tau_G eta); both 0 when eta <= 0.
inline LeaderStrengths leaderProximalStrengths(const LeaderSpec& spec, double stepSize) {
  if (!(stepSize > 0.0)) return {};
  return {spec.proximalLocal / (static_cast<double>(spec.localPeriod) * stepSize),
          spec.proximalGlobal / (static_cast<double>(spec.globalPeriod) * stepSize)};
}

// out = u + lambdaLocal (x - localLeader) + lambdaGlobal (x - globalLeader). An empty leader span
// means no such leader yet (its term is left out). `out` may be `u` (the same span).
template <typename T>
void leaderDirection(std::span<const T> x, std::span<const T> u, std::span<const T> localLeader,
                     std::span<const T> globalLeader, double lambdaLocal, double lambdaGlobal,
                     std::span<T> out) {
  const size_t d = x.size();
  assert(u.size() == d && out.size() == d);
  assert(localLeader.empty() || localLeader.size() == d);
  assert(globalLeader.empty() || globalLeader.size() == d);
  const bool hasLocal = !localLeader.empty() && lambdaLocal != 0.0;
  const bool hasGlobal = !globalLeader.empty() && lambdaGlobal != 0.0;
  for (size_t k = 0; k < d; ++k) {
    const double xk = x[k];
    double v = u[k];
    if (hasLocal) v += lambdaLocal * (xk - static_cast<double>(localLeader[k]));
    if (hasGlobal) v += lambdaGlobal * (xk - static_cast<double>(globalLeader[k]));
    out[k] = static_cast<T>(v);
  }
}

// x <- (1 - strength) x + strength leader, written x + strength (leader - x) so that strength 0
// leaves x and strength 1 gives the leader exactly.
template <typename T>
void leaderPull(std::span<T> x, std::span<const T> leader, double strength) {
  assert(leader.size() == x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const double xk = x[k];
    x[k] = static_cast<T>(xk + strength * (static_cast<double>(leader[k]) - xk));
  }
}

struct LeaderCandidate {
  int rank = 0;
  double loss = 0.0;  // running training loss
};

// The index in `candidates` of the leader: lowest loss, ties to the lowest rank; NaN losses
// never lead. -1 when there is none (empty, or every loss NaN).
inline int chooseLeader(std::span<const LeaderCandidate> candidates) {
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    if (std::isnan(c.loss)) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const auto& b = candidates[static_cast<size_t>(best)];
    if (c.loss < b.loss || (c.loss == b.loss && c.rank < b.rank)) best = static_cast<int>(i);
  }
  return best;
}

// The mean of the last `window` losses added (of all of them while fewer were added), NaN before
// the first. Sums the window afresh on every value() call, so no rounding drifts in.
class RunningLoss {
 public:
  explicit RunningLoss(uint64_t window) : window_(window == 0 ? 1 : window) {}

  void add(double loss) {
    if (losses_.size() < window_) {
      losses_.push_back(loss);
    } else {
      losses_[next_] = loss;
    }
    next_ = (next_ + 1) % window_;
  }

  double value() const {
    if (losses_.empty()) return std::nan("");
    double sum = 0.0;
    for (double l : losses_) sum += l;
    return sum / static_cast<double>(losses_.size());
  }

  uint64_t window() const { return window_; }

  void visitState(core::StateVisitor& v) {
    v.sized("losses", losses_);
    v.scalar("next", next_);
    if (v.loading() && !v.failed() && (losses_.size() > window_ || next_ >= window_)) {
      v.fail("checkpoint holds a running loss that does not fit a window of " +
             std::to_string(window_));
    }
  }

 private:
  uint64_t window_;
  std::vector<double> losses_;
  uint64_t next_ = 0;
};

}  // namespace starling::optim
