#include "runtime/merge.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/peer.h"

namespace starling::runtime {

PeerLogMerger::PeerLogMerger(const Experiment& e, std::filesystem::path dir, MetricsLog& log)
    : e_(e), dir_(std::move(dir)), log_(log) {
  for (int r = 0; r < e.scenario.nodes; ++r) sources_.push_back(Source{peerLogPath(dir_, r), 0, {}});
}

core::Status PeerLogMerger::readPeer(int rank) {
  Source& src = sources_[rank];
  std::ifstream in(src.path, std::ios::binary);
  if (!in) return core::Status::ok();  // the peer has not started writing yet
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < src.offset) return core::corruption(src.path.string() + " shrank while being read");
  if (size == src.offset) return core::Status::ok();
  std::string chunk(size - src.offset, '\0');
  in.seekg(static_cast<std::streamoff>(src.offset));
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  src.offset = size;
  src.partial += chunk;

  size_t start = 0;
  for (size_t nl; (nl = src.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = src.partial.substr(start, nl - start);
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&](const std::string& why) {
      return core::corruption(src.path.string() + ": " + why);
    };
    if (!j.is_object() || !j.contains("round") || !j["round"].is_number_unsigned() ||
        !j.contains("x") || !j["x"].is_array()) {
      return bad("not a peer log line");
    }
    Record rec;
    rec.bytesSent = j.value("bytes_sent", uint64_t{0});
    rec.corrupt = j.value("corrupt_messages", uint64_t{0});
    rec.compressionErrorSum = j.value("compression_error_sum", 0.0);
    rec.compressionErrorCount = j.value("compression_error_count", uint64_t{0});
    rec.wallS = j.value("wall_s", 0.0);
    for (const auto& v : j["x"]) {
      if (!v.is_number()) return bad("non-numeric model value");
      rec.x.push_back(v.get<double>());
    }
    if (static_cast<int>(rec.x.size()) != e_.data.features) return bad("model of the wrong size");
    auto& slot = pending_[j["round"].get<uint64_t>()];
    slot.resize(e_.scenario.nodes);
    slot[rank] = std::move(rec);
  }
  src.partial.erase(0, start);
  return core::Status::ok();
}

core::Result<int> PeerLogMerger::poll() {
  for (int r = 0; r < e_.scenario.nodes; ++r) STARLING_RETURN_IF_ERROR(readPeer(r));
  int merged = 0;
  while (!pending_.empty()) {
    auto it = pending_.begin();
    bool complete = true;
    for (const auto& rec : it->second) complete = complete && rec.has_value();
    if (!complete) break;
    std::vector<std::span<const double>> models;
    for (const auto& rec : it->second) models.emplace_back(rec->x);
    RoundMetrics m = measureModels<double>(e_, models, xMean_);
    m.round = it->first;
    double errSum = 0;
    uint64_t errCount = 0;
    for (const auto& rec : it->second) {
      errSum += rec->compressionErrorSum;
      errCount += rec->compressionErrorCount;
      m.bytesSent += rec->bytesSent;
      m.corruptMessages += rec->corrupt;
      m.wallS = std::max(m.wallS, rec->wallS);
    }
    m.compressionError = compressionError_.next(errSum, errCount);
    STARLING_RETURN_IF_ERROR(log_.append(m));
    last_ = m;
    pending_.erase(it);
    ++merged;
  }
  return merged;
}

}  // namespace starling::runtime
