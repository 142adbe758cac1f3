#include "transport/factory.h"

#include <sched.h>

#include <algorithm>

#if STARLING_HAVE_UCX
#include "transport/ucx/ucx_transport.h"
#endif

namespace starling::transport {

std::string ucxTlsFor(const std::string& tls) {
  // tcp stays in the shared-memory list: it carries UCX's connection establishment.
  return tls == "shm" ? "sysv,posix,cma,tcp" : "tcp";
}

namespace {

// The host of "host:port" ("[v6]:port" too), with every loopback name as "loopback".
std::string hostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return "loopback";
  return host;
}

}  // namespace

bool coreForEachLocalRank(const std::vector<std::string>& addresses, int rank, int cores) {
  if (rank < 0 || rank >= static_cast<int>(addresses.size())) return false;
  const std::string here = hostOf(addresses[rank]);
  const auto local = std::count_if(addresses.begin(), addresses.end(),
                                   [&](const std::string& a) { return hostOf(a) == here; });
  return cores >= 4 && cores >= local;
}

bool coreForEachLocalRank(const std::vector<std::string>& addresses, int rank) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return false;
  return coreForEachLocalRank(addresses, rank, CPU_COUNT(&set));
}

core::Result<std::unique_ptr<Transport>> createNetworkTransport(const NetworkOptions& options) {
#if STARLING_HAVE_UCX
  ucx::Options o;
  o.rank = options.rank;
  for (const auto& text : options.addresses) {
    auto a = ucx::parseAddress(text);
    if (!a) return a.status();
    o.addresses.push_back(*a);
  }
  o.tls = options.ucxTls.empty() ? ucxTlsFor(options.tls) : options.ucxTls;
  o.connectTimeout = options.connectTimeout;
  o.maxEndpoints = options.maxEndpoints;
  o.sharedMemoryFrames = options.sharedMemoryFrames &&
                         (o.tls.find("sysv") != std::string::npos ||
                          o.tls.find("posix") != std::string::npos ||
                          o.tls.find("sm") != std::string::npos);
  o.sharedMemoryThreshold = options.sharedMemoryThreshold;
  o.spin = options.spin;
  o.busyPoll = options.busyPoll;
  o.eagerSends = options.eagerSends;
  o.log = options.log;
  o.failReceivesOfLostPeers = options.failReceivesOfLostPeers;
  o.key = options.key;
  o.encrypt = options.encrypt;
  return ucx::createTransport(o);
#else
  (void)options;
  return core::failedPrecondition(
      "this build has no UCX transport (configure with -Ducx=enabled and libucx-dev installed)");
#endif
}

}  // namespace starling::transport
