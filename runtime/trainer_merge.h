// TrainerLogMerger: metrics.jsonl and summary.json of `node-launcher run SCENARIO -- COMMAND`,
// from the peer logs the trainers' starling::Peer objects write (runtime/peer.h has the format;
// their round lines may carry "metrics", the trainer's own, and carry the consensus sketch instead
// of "x" for models longer than kFullModelLogMaxDim, runtime/metrics.h).
//
// A round is merged once every peer has logged it. With faults.on_peer_loss "continue", a rank the
// survivors lost in round r counts in rounds before r only (a killed trainer's last round line may
// never have been written): from round r on, every value is the survivors' (sums and means over
// them), and membership.jsonl has the losses and changes (MembershipReports, runtime/merge.h). Its metrics line has round, bytes_sent and
// corrupt_messages (sums over the peers), compression_error, wall_s (the slowest peer),
// consensus_distance (1/n sum_i ||x_i - x_mean||^2; for large models the sketch's estimate) and each
// trainer metric averaged over the peers that logged it. There is no problem, so no objective,
// rel_error or x*. summary.json: the last merged round's values and x_mean (small models only).
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/line_file.h"
#include "core/status.h"
#include "runtime/merge.h"
#include "runtime/peer.h"
#include "scenario/scenario.h"

namespace starling::runtime {

class TrainerLogMerger {
 public:
  // `s` is borrowed. Creates dir/metrics.jsonl.
  static core::Result<std::unique_ptr<TrainerLogMerger>> create(const scenario::Scenario& s,
                                                                std::filesystem::path dir);

  // Merges what is complete; returns the number of rounds written by this call. kCorruption for
  // a line no peer writes or a log of another run. A round is complete once every rank in it
  // has logged it or logged a later round: trainers may log at different rounds (peer.log() at
  // one rank only, a rank that logs less often), and a rank that skipped a round leaves a gap in
  // that round's line, not an end to the merge. A line with a gap has "logged_ranks" (how many
  // logged it); its trainer metrics are the means over those, its consensus_distance null.
  core::Result<int> poll();
  // The last poll, once every trainer has exited: the rounds some rank never reached are merged
  // from the ranks that did.
  core::Result<int> finalPoll();
  // The last round each rank logged (none: it logged no round), for summary.json.
  std::map<int, uint64_t> lastRoundByRank() const;

  std::optional<uint64_t> lastRound() const { return lastRound_; }
  // "consensus 1.2e-03, loss 0.31" for the progress line (empty before the first round).
  std::string progressDetail() const;
  std::optional<RootCause> rootCause() const;
  // The ranks the survivors lost, with the round they were lost in (on_peer_loss "continue").
  const std::map<int, uint64_t>& lost() const { return membership_.lost(); }
  // Writes dir/summary.json from the last merged round (kFailedPrecondition before one).
  core::Status writeSummary() const;

 private:
  struct Record {
    uint64_t bytesSent = 0, corrupt = 0, errCount = 0;
    double errSum = 0, wallS = 0;
    std::vector<double> x;
    bool hasX = false;
    std::vector<double> sketch;  // models longer than kFullModelLogMaxDim
    std::map<std::string, double> metrics;
  };
  struct Source {
    std::filesystem::path path;
    uint64_t offset = 0;
    std::string partial;
    bool sawHeader = false;
    uint64_t lines = 0;  // read so far (for messages)
    std::optional<uint64_t> lastRound;
    std::optional<engine::PeerFailure> failure;
  };

  TrainerLogMerger(const scenario::Scenario& s, std::filesystem::path dir,
                   std::unique_ptr<core::LineFile> out);
  core::Status readPeer(int rank);

  const scenario::Scenario& s_;
  std::filesystem::path dir_;
  std::unique_ptr<core::LineFile> out_;
  std::string expectedHash_;
  std::optional<std::string> runId_;  // the run id of the first header read
  std::vector<Source> sources_;
  std::map<uint64_t, std::vector<std::optional<Record>>> pending_;
  MembershipReports membership_;
  std::optional<uint64_t> lastRound_;
  std::string lastLine_;  // the last metrics line, for summary.json
  std::vector<double> xMean_;
  bool final_ = false;  // finalPoll: no line will come any more
  double errSumSeen_ = 0;
  uint64_t errCountSeen_ = 0;
};

}  // namespace starling::runtime
