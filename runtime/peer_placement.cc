#include "runtime/peer_placement.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

#include "runtime/pmix_exchange.h"

namespace starling::runtime {

namespace {

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

core::Status checkCount(const std::vector<std::string>& addresses, int nodes, const std::string& from) {
  if (static_cast<int>(addresses.size()) == nodes) return core::Status::ok();
  return core::invalidArgument(from + " gives " + std::to_string(addresses.size()) +
                               " addresses for a scenario of " + std::to_string(nodes) + " nodes");
}

core::Status needRank(const PeerPlacement& p, const std::string& from) {
  if (p.rank >= 0) return core::Status::ok();
  return core::invalidArgument("no rank: pass --rank or run under a launcher that sets "
                               "SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK (" +
                               from + ")");
}

}  // namespace

core::Result<std::string> interfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return core::ioError("getifaddrs: " + std::string(std::strerror(errno)));
  std::string found, have;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    have += std::string(have.empty() ? "" : ", ") + i->ifa_name + " " + text;
    const bool wanted = name.empty() ? (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)
                                     : name == i->ifa_name;
    if (wanted && found.empty()) found = text;
  }
  freeifaddrs(list);
  if (found.empty()) {
    return core::notFound((name.empty() ? std::string("no interface that is up and not loopback")
                                        : "no IPv4 address on interface " + name) +
                          " (this host has: " + (have.empty() ? "none" : have) + ")");
  }
  return found;
}

core::Result<PeerPlacement> placePeer(const scenario::Scenario& s,
                                      const PeerPlacementRequest& request, const EnvLookup& env) {
  PeerPlacement p;
  p.rank = request.rank.value_or(-1);
  const int base = s.peers.basePort;
  if (!request.peersFlag.empty()) {
    p.addresses = splitList(request.peersFlag);
    p.source = "--peers";
  } else if (s.peers.explicitAddresses) {
    p.addresses = s.peers.addresses;
    p.source = "the scenario's peers section";
  } else if (!request.hostfile.empty()) {
    auto a = fromHostfile(request.hostfile, s.nodes, base);
    if (!a) return a.status();
    p.addresses = std::move(*a);
    p.source = "hostfile " + request.hostfile;
  } else if (auto slurm = fromSlurm(env, s.nodes, base)) {
    if (!*slurm) return slurm->status();
    p.addresses = std::move(**slurm);
    p.source = "the Slurm step";
  } else if (underPmix(env)) {
    auto session = PmixSession::connect();
    if (!session) return session.status();
    const PmixJob& job = (*session)->job();
    if (job.size != s.nodes) {
      return core::invalidArgument("the launcher started " + std::to_string(job.size) +
                                   " processes (PMIx job size) for a scenario of " +
                                   std::to_string(s.nodes) + " nodes: start exactly " +
                                   std::to_string(s.nodes));
    }
    if (p.rank >= 0 && p.rank != job.rank) {
      return core::invalidArgument("--rank " + std::to_string(p.rank) + " but the launcher's PMIx "
                                   "server says this is rank " + std::to_string(job.rank));
    }
    p.rank = job.rank;
    // All on this host: loopback. Otherwise the interface STARLING_IFACE names, or the first that
    // is up and not loopback (as Gloo's and NCCL's socket interface variables do).
    std::string host = "127.0.0.1";
    if (job.localSize != job.size) {
      const auto iface = env("STARLING_IFACE");
      auto a = interfaceAddress(iface.value_or(""));
      if (!a) return core::Status(a.status().code(), "rank " + std::to_string(p.rank) +
                                                         " cannot pick its address: " +
                                                         a.status().message() +
                                                         " (STARLING_IFACE names the interface)");
      host = *a;
    }
    if (base + s.nodes - 1 > 65535) return core::invalidArgument("peers.base_port + nodes - 1 exceeds 65535");
    const std::string own = host + ":" + std::to_string(base + p.rank);
    auto all = (*session)->exchange(
        own, std::chrono::seconds(std::max<uint64_t>(1, s.transport.connectTimeoutMs / 1000)));
    if (!all) return all.status();
    p.addresses = std::move(*all);
    p.source = "the launcher's PMIx server";
  } else {
    for (int r = 0; r < s.nodes; ++r) p.addresses.push_back("127.0.0.1:" + std::to_string(base + r));
    p.source = "this machine (no peers section, hostfile, Slurm step or PMIx launcher)";
  }
  STARLING_RETURN_IF_ERROR(checkCount(p.addresses, s.nodes, p.source));
  STARLING_RETURN_IF_ERROR(needRank(p, p.source));
  if (p.rank >= s.nodes) {
    return core::invalidArgument("rank " + std::to_string(p.rank) + " is not in 0.." +
                                 std::to_string(s.nodes - 1));
  }
  return p;
}

}  // namespace starling::runtime
