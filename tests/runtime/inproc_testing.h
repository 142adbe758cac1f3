// Helpers for the in-process transport's tests (transport_test.cc, inproc_failures_test.cc):
// messages, the outcome of a send or a recv, and driving endpoints until something holds.
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "core/status.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/transport.h"

namespace starling::transport::inproc_testing {

using namespace std::chrono_literals;
using core::Status;
using core::StatusCode;

inline SharedBytes bytesOf(std::initializer_list<int> values) {
  auto b = std::make_shared<Bytes>();
  for (int v : values) b->push_back(static_cast<std::byte>(v));
  return b;
}

inline SharedBytes bytesOfSize(size_t n, int fill) {
  return std::make_shared<const Bytes>(n, static_cast<std::byte>(fill));
}

// The outcome of one recv.
struct Received {
  int calls = 0;
  core::Status status;
  SharedBytes bytes;
  RecvCallback callback() {
    return [this](const core::Status& st, SharedBytes b) {
      ++calls;
      status = st;
      bytes = std::move(b);
    };
  }
};

struct Sent {
  int calls = 0;
  core::Status status;
  SendCallback callback() {
    return [this](const core::Status& st) {
      ++calls;
      status = st;
    };
  }
};

inline Clock::time_point later() { return Clock::now() + 10s; }

// Calls progress on every transport until `done` holds, for at most 5 s. Returns whether it held.
template <typename Pred>
bool drive(std::initializer_list<Transport*> ts, Pred done) {
  const auto stop = Clock::now() + 5s;
  while (!done()) {
    if (Clock::now() > stop) return false;
    for (Transport* t : ts) {
      auto r = t->progress(Clock::now() + 1ms);
      if (!r.isOk()) return false;
    }
  }
  return true;
}

struct Fixture {
  explicit Fixture(int ranks) : hub(inproc::createHub(ranks)) {
    for (int r = 0; r < ranks; ++r) t.push_back(inproc::createTransport(*hub, r));
  }
  std::unique_ptr<inproc::InprocHub> hub;
  std::vector<std::unique_ptr<Transport>> t;
};

}  // namespace starling::transport::inproc_testing
