// Busy polling in the UCX transport (Options::busyPoll, the scenario's transport.busy_poll): a
// waiting transport polls instead of sleeping, and still keeps every deadline.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"
#include "tests/runtime/ucx_testing.h"


namespace starling::transport {
namespace {

using namespace std::chrono_literals;
using core::Status;
using core::StatusCode;
using namespace ucx_testing;

// ---- tests ---------------------------------------------------------------------------------

namespace {
// CPU time this thread has used (user + system).
std::chrono::microseconds threadCpu() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}
}  // namespace

// Two transports on loopback over `tls`, both options changed by `tune`; the logs are dumped
// when a check fails.
struct Connected {
  template <typename Tune>
  Connected(const std::string& tls, Tune tune) {
    const auto ports = freePorts(2);
    auto o0 = options(0, ports, log0, tls);
    auto o1 = options(1, ports, log1, tls);
    tune(o0);
    tune(o1);
    t0 = make(o0);
    t1 = make(o1);
  }
  LogLines log0 = std::make_shared<std::vector<std::string>>();
  LogLines log1 = std::make_shared<std::vector<std::string>>();
  std::unique_ptr<Transport> t0, t1;
  LogDump dump0{log0}, dump1{log1};
};

TEST_CASE("ucx: eager sends (no rendezvous) carry small and large frames", "[runtime][unit][ucx]") {
  // UCX_RNDV_THRESH=inf: a bad key or value fails make().
  Connected c("tcp", [](ucx::Options& o) { o.eagerSends = true; });
  for (size_t size : {size_t{100}, size_t{1} << 22}) {
    CAPTURE(size);
    exchange(*c.t0, *c.t1, Tag{size, 0}, size, static_cast<uint32_t>(size));
  }
}

TEST_CASE("ucx: busy polling carries messages, keeps deadlines, and never sleeps while waiting",
          "[runtime][unit][ucx]") {
  const std::string tls = GENERATE(std::string("tcp"), std::string("sysv,posix,cma,tcp"));
  CAPTURE(tls);
  Connected c(tls, [&](ucx::Options& o) {
    o.busyPoll = true;
    o.sharedMemoryFrames = tls != "tcp";
  });
  auto& t0 = c.t0;
  auto& t1 = c.t1;
  for (size_t size : {size_t{100}, size_t{1} << 20}) {
    CAPTURE(size);
    exchange(*t0, *t1, Tag{size, 0}, size, static_cast<uint32_t>(size));
  }

  // A receive nobody answers still times out at its deadline, not before.
  Received got;
  const auto deadline = Clock::now() + 200ms;
  t0->recv(1, Tag{9, 0}, deadline, got.callback());
  REQUIRE(pumpUntil({t0.get()}, [&] { return got.calls > 0; }, deadline + 5s));
  CHECK(got.at >= deadline);
  CHECK(got.status.code() == StatusCode::kTimeout);

  // Waiting with nothing to do: progress comes back by its bound, having polled all along (a
  // thread that slept would have used next to no CPU; one that polls uses what the scheduler
  // gives it, which on a loaded 2-core host is still well above a tenth of the time).
  const auto wall = 300ms;
  const auto cpu0 = threadCpu();
  const auto until = Clock::now() + wall;
  auto r = t0->progress(until);
  const auto returned = Clock::now();
  const auto used = threadCpu() - cpu0;
  REQUIRE(r.isOk());
  CHECK(*r == 0);
  CHECK(returned >= until);
  CHECK(returned <= until + 2s);
  CHECK(used >= wall / 10);
}

TEST_CASE("ucx: without busy polling a waiting transport sleeps", "[runtime][unit][ucx]") {
  const auto ports = freePorts(2);
  auto log = std::make_shared<std::vector<std::string>>();
  auto t0 = make(options(0, ports, log));
  LogDump dump{log};
  const auto wall = 300ms;
  const auto cpu0 = threadCpu();
  auto r = t0->progress(Clock::now() + wall);
  REQUIRE(r.isOk());
  CHECK(threadCpu() - cpu0 < wall / 10);
}

}  // namespace
}  // namespace starling::transport
