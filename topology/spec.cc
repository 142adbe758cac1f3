#include "topology/spec.h"

namespace starling::topology {

const char* graphKindName(GraphKind kind) {
  switch (kind) {
    case GraphKind::kRing:
      return "ring";
    case GraphKind::kLine:
      return "line";
    case GraphKind::kGrid:
      return "grid";
    case GraphKind::kRandom:
      return "random";
    case GraphKind::kExponential:
      return "exponential";
    case GraphKind::kComplete:
      return "complete";
    case GraphKind::kStar:
      return "star";
  }
  return "unknown";
}

const char* weightRuleName(WeightRule rule) {
  switch (rule) {
    case WeightRule::kMetropolis:
      return "metropolis";
    case WeightRule::kMaxDegree:
      return "max_degree";
    case WeightRule::kUniform:
      return "uniform";
  }
  return "unknown";
}

const char* scheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kStatic:
      return "static";
    case ScheduleKind::kCycle:
      return "cycle";
    case ScheduleKind::kOnePeerExponential:
      return "one_peer_exponential";
    case ScheduleKind::kRandomMatching:
      return "random_matching";
    case ScheduleKind::kEdgeDropout:
      return "edge_dropout";
  }
  return "unknown";
}

}  // namespace starling::topology
