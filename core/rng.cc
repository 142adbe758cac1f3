#include "core/rng.h"

#include <cmath>
#include <numbers>
#include <sstream>

namespace starling::core {

uint64_t Rng::below(uint64_t n) {
  // Largest multiple of n that fits; values at or above it are redrawn.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
  uint64_t x;
  do {
    x = engine_();
  } while (x >= limit);
  return x % n;
}

double Rng::normal() {
  if (hasSpare_) {
    hasSpare_ = false;
    return spare_;
  }
  double u1;
  do {
    u1 = uniform();
  } while (u1 <= 0.0);
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  hasSpare_ = true;
  return r * std::cos(theta);
}

void Rng::visitState(StateVisitor& v) {
  std::ostringstream os;
  os << engine_;
  std::string engine = os.str();
  v.text("engine", engine);
  v.flag("has_spare", hasSpare_);
  v.scalar("spare", spare_);
  if (!v.loading() || v.failed()) return;
  std::istringstream is(engine);
  std::mt19937_64 restored;
  is >> restored;
  if (is.fail() || !(is >> std::ws).eof()) {
    v.fail("checkpoint field engine: not the text form of a std::mt19937_64 state");
    return;
  }
  engine_ = restored;
}

}  // namespace starling::core
