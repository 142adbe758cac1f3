#include "optim/leader_gossip.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "optim/leader.h"

namespace starling::optim {
namespace {

// Candidate (loss a, rank ra) beats (b, rb): lower loss, ties to the lower rank, NaN never.
bool beats(double a, int ra, double b, int rb) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b || (a == b && ra < rb);
}

// A NaN loss (a node that has none) travels as T's largest value: messages must be finite (the
// engine refuses any other), and that value never beats a real loss.
template <typename T>
T encodeLoss(double loss) {
  return std::isnan(loss) ? std::numeric_limits<T>::max() : static_cast<T>(loss);
}
template <typename T>
double decodeLoss(T v) {
  return v == std::numeric_limits<T>::max() ? std::nan("") : static_cast<double>(v);
}

template <typename T>
class LeaderGossip final : public Algorithm<T> {
 public:
  LeaderGossip(const AlgorithmSpec& spec, std::span<const T> x0, GradientOracle<T>& oracle)
      : leader_(*spec.leader), gamma_(spec.gamma), diameter_(spec.diameter),
        x_(x0.begin(), x0.end()), grad_(x0.size()), candModel_(x0.size()), oracle_(oracle),
        loss_(spec.leader->lossWindow) {}

  size_t messageSize() const override { return 2 * x_.size() + 3; }

  void prepare(const RoundInfo& info, std::span<T> out) override {
    const size_t d = x_.size();
    self_ = info.self;
    oracle_.gradient(x_, grad_);
    loss_.add(oracle_.lastLoss());
    // Rounded to T: what the neighbours will see and compare against.
    runningLoss_ = decodeLoss<T>(encodeLoss<T>(loss_.value()));
    if (info.round % leader_.globalPeriod == 0) {
      candLoss_ = runningLoss_;
      candRank_ = self_;
      std::copy(x_.begin(), x_.end(), candModel_.begin());
      electionStart_ = info.round;
      electing_ = true;
    }
    const LeaderStrengths lambda = leaderProximalStrengths(leader_, info.stepSize);
    leaderDirection<T>(x_, grad_, localLeader_, globalLeader_, lambda.local, lambda.global, grad_);
    const T eta = static_cast<T>(info.stepSize);
    for (size_t k = 0; k < d; ++k) out[k] = x_[k] - eta * grad_[k];
    out[d] = encodeLoss<T>(runningLoss_);
    out[d + 1] = encodeLoss<T>(candLoss_);
    out[d + 2] = static_cast<T>(candRank_);
    std::copy(candModel_.begin(), candModel_.end(), out.begin() + static_cast<std::ptrdiff_t>(d + 3));
  }

  void absorb(const RoundInfo& info, std::span<const T> own,
              std::span<const NeighborMessage<T>> nbrs) override {
    const size_t d = x_.size();
    for (size_t k = 0; k < d; ++k) x_[k] = own[k];
    for (const auto& n : nbrs) {
      const T w = static_cast<T>(gamma_ * n.weight);
      for (size_t k = 0; k < d; ++k) x_[k] += w * (n.message[k] - own[k]);
    }
    // Max-consensus on the election's candidate, over the candidates as sent this round.
    if (electing_) {
      int best = -1;  // index into nbrs; -1: this node's own candidate
      double bestLoss = candLoss_;
      int bestRank = candRank_;
      for (size_t q = 0; q < nbrs.size(); ++q) {
        const auto& m = nbrs[q].message;
        const double l = decodeLoss<T>(m[d + 1]);
        const int r = static_cast<int>(m[d + 2]);
        if (beats(l, r, bestLoss, bestRank)) {
          best = static_cast<int>(q);
          bestLoss = l;
          bestRank = r;
        }
      }
      if (best >= 0) {
        candLoss_ = bestLoss;
        candRank_ = bestRank;
        const auto src = nbrs[static_cast<size_t>(best)].message.subspan(d + 3, d);
        std::copy(src.begin(), src.end(), candModel_.begin());
      }
      if (info.round + 1 - electionStart_ >= diameter_) {
        electing_ = false;
        globalRank_ = candRank_;
        if (candRank_ == self_ || std::isnan(candLoss_)) {
          globalLeader_.clear();
        } else {
          globalLeader_ = candModel_;
          leaderPull<T>(x_, globalLeader_, leader_.pullGlobal);
        }
      }
    }
    if ((info.round + 1) % leader_.localPeriod == 0) {
      std::vector<LeaderCandidate> cands;
      cands.push_back({self_, runningLoss_});
      for (const auto& n : nbrs) {
        if (n.weight == 0.0) continue;
        cands.push_back({n.peer, decodeLoss<T>(n.message[d])});
      }
      const int best = chooseLeader(cands);
      localRank_ = best < 0 ? -1 : cands[static_cast<size_t>(best)].rank;
      if (best <= 0) {
        localLeader_.clear();  // the node itself, or nobody with a loss
      } else {
        for (const auto& n : nbrs) {
          if (n.peer != localRank_) continue;
          localLeader_.assign(n.message.begin(), n.message.begin() + static_cast<std::ptrdiff_t>(d));
        }
        leaderPull<T>(x_, localLeader_, leader_.pullLocal);
      }
    }
  }

  std::span<const T> model() const override { return x_; }

  void methodMetrics(std::vector<MethodMetric>& out) const override {
    out.push_back({"leader_running_loss", runningLoss_});
    out.push_back({"leader_global", static_cast<double>(globalRank_)});
    out.push_back({"leader_local", static_cast<double>(localRank_)});
  }

  // grad_ is rewritten by every prepare before it is read.
  void visitState(core::StateVisitor& v) override {
    v.fixed("x", x_);
    v.sized("local_leader", localLeader_);
    v.sized("global_leader", globalLeader_);
    v.fixed("candidate_model", candModel_);
    v.scalar("candidate_loss", candLoss_);
    int64_t rank = candRank_, global = globalRank_, local = localRank_;
    v.scalar("candidate_rank", rank);
    v.scalar("global_rank", global);
    v.scalar("local_rank", local);
    candRank_ = static_cast<int>(rank);
    globalRank_ = static_cast<int>(global);
    localRank_ = static_cast<int>(local);
    v.scalar("election_start", electionStart_);
    v.flag("electing", electing_);
    v.scalar("running_loss_sent", runningLoss_);
    core::StateVisitor::Scope scope(v, "running_loss");
    loss_.visitState(v);
    if (v.loading() && !v.failed() &&
        ((!localLeader_.empty() && localLeader_.size() != x_.size()) ||
         (!globalLeader_.empty() && globalLeader_.size() != x_.size()))) {
      v.fail("checkpoint holds a leader model of another size");
    }
  }

 private:
  const LeaderSpec leader_;
  const double gamma_;
  const uint64_t diameter_;
  std::vector<T> x_, grad_;
  std::vector<T> localLeader_, globalLeader_;  // x~_L, x~_G; empty: none, or the node itself
  std::vector<T> candModel_;
  GradientOracle<T>& oracle_;
  RunningLoss loss_;
  double runningLoss_ = std::nan("");
  double candLoss_ = std::nan("");
  int candRank_ = -1;
  int globalRank_ = -1, localRank_ = -1;
  int self_ = -1;
  uint64_t electionStart_ = 0;
  bool electing_ = false;
};

}  // namespace

template <typename T>
std::unique_ptr<Algorithm<T>> createLeaderGossip(const AlgorithmSpec& spec, std::span<const T> x0,
                                                 GradientOracle<T>& oracle) {
  assert(spec.leader.has_value());
  return std::make_unique<LeaderGossip<T>>(spec, x0, oracle);
}

template std::unique_ptr<Algorithm<float>> createLeaderGossip<float>(const AlgorithmSpec&,
                                                                     std::span<const float>,
                                                                     GradientOracle<float>&);
template std::unique_ptr<Algorithm<double>> createLeaderGossip<double>(const AlgorithmSpec&,
                                                                       std::span<const double>,
                                                                       GradientOracle<double>&);

}  // namespace starling::optim
