#include "runtime/transport/factory.h"

#if STARLING_HAVE_UCX
#include "runtime/transport/ucx/ucx_transport.h"
#endif

namespace starling::transport {

std::string ucxTlsFor(const std::string& tls) {
  // tcp stays in the shared-memory list: it carries UCX's connection establishment.
  return tls == "shm" ? "sysv,posix,cma,tcp" : "tcp";
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
