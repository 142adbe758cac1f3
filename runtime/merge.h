// PeerLogMerger: turns the n peer logs of a multi-process run into metrics.jsonl and
// summary.json, with the same numbers the simulator writes.
//
// poll() reads whatever the peers have appended since the last call (a peer may be writing at the
// same time: an incomplete last line waits for the next poll) and appends a metrics line for every
// round that all n peers have logged. Used live by the launcher and after the fact by
// `node-launcher merge`. Thread-safety: none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/experiment.h"
#include "runtime/metrics.h"

namespace starling::runtime {

class PeerLogMerger {
 public:
  // `e` and `log` are borrowed. `dir` is the run's output folder (peer logs in dir/peers/).
  PeerLogMerger(const Experiment& e, std::filesystem::path dir, MetricsLog& log);

  // Merges what is complete. Returns the number of rounds written by this call. kCorruption for a
  // peer log line that is not what a peer writes.
  core::Result<int> poll();

  // The last merged round's metrics and mean model (nullopt before the first).
  const std::optional<RoundMetrics>& last() const { return last_; }
  const std::vector<double>& xMean() const { return xMean_; }

 private:
  struct Record {
    uint64_t bytesSent = 0;
    uint64_t corrupt = 0;
    double compressionErrorSum = 0;
    uint64_t compressionErrorCount = 0;
    double wallS = 0;
    std::vector<double> x;
  };
  struct Source {
    std::filesystem::path path;
    uint64_t offset = 0;
    std::string partial;
  };

  core::Status readPeer(int rank);

  const Experiment& e_;
  std::filesystem::path dir_;
  MetricsLog& log_;
  std::vector<Source> sources_;
  std::map<uint64_t, std::vector<std::optional<Record>>> pending_;
  std::optional<RoundMetrics> last_;
  CompressionErrorMean compressionError_;
  std::vector<double> xMean_;
};

}  // namespace starling::runtime
