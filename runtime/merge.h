// PeerLogMerger: turns the n peer logs of a multi-process run into metrics.jsonl and
// summary.json, with the same numbers the simulator writes.
//
// poll() reads whatever the peers have appended since the last call (a peer may be writing at the
// same time: an incomplete last line waits for the next poll) and appends a metrics line for every
// round that all n peers have logged. Used live by the launcher and after the fact by
// `node-launcher merge`. Each log's header must match the run being merged (rank, nodes, scenario
// hash); a peer's failure line is kept, and rootCause() names the peer the others lost first.
// Thread-safety: none.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/line_file.h"
#include "core/status.h"
#include "runtime/metrics.h"
#include "runtime/peer.h"
#include "scenario/experiment.h"

namespace starling::runtime {

// The first line of a peer log: what the peer ran.
struct PeerLogHeader {
  int rank = 0;
  int nodes = 0;
  uint64_t seed = 0;
  uint64_t rounds = 0;
  std::string scenarioHash;  // scenarioHashHex
  std::string address;
  std::string version;
  std::string runId;     // currentRunId() of the process that wrote it ("" in older logs)
  bool trainer = false;  // a trainer's log (run SCENARIO -- COMMAND)
};

// Reads the header of every rank's log in dir/peers. kNotFound names the ranks without a log,
// kCorruption a log whose first line is not a header (`nodes` logs are expected).
core::Result<std::vector<PeerLogHeader>> readPeerLogHeaders(const std::filesystem::path& dir,
                                                            int nodes);

// The "lost" and "membership" lines of a run's peer logs (faults.on_peer_loss "continue"), as
// both mergers of a launched run read them (PeerLogMerger for `node-launcher peer` processes,
// TrainerLogMerger for trainers): which ranks the survivors lost and when, and
// dir/membership.jsonl, created at the first news, with each loss and each change once.
// Only the reports of reporters still in the run at their round count (a stalled peer that
// resumes reports the others lost, wrongly). Thread-safety: none.
class MembershipReports {
 public:
  MembershipReports(std::filesystem::path dir, int nodes) : dir_(std::move(dir)), nodes_(nodes) {}
  // One line of `reporter`'s log: true when it was a "lost" or "membership" line (kept); false
  // for any other line; kCorruption (naming `where`) for a malformed one.
  core::Result<bool> read(const std::string& line, int reporter, const std::string& where);
  // Settles what was read: the lost ranks, and news appended to membership.jsonl.
  core::Status settle();
  // rank -> the round it was lost in, for the ranks out now (lost and not back).
  const std::map<int, uint64_t>& lost() const { return lostNow_; }
  // Whether `rank` takes part in `round` (it logs it): not lost before it, or back by then
  // (a rank lost in round L logs up to L; one that rejoins at round J logs from J).
  // Trainers (TrainerLogMerger) whose last line may not have been written count up to L - 1:
  // lostRoundCounts false.
  bool running(int rank, uint64_t round, bool lostRoundCounts = true) const;

 private:
  struct Report {
    uint64_t round;
    int reporter;
    int rank;  // -1: a membership line (epoch in `epoch`, returns in `joined`)
    uint64_t epoch;
    std::vector<int> joined;
    std::string line;
  };
  core::Status note(const std::string& line);

  std::filesystem::path dir_;
  int nodes_;
  std::vector<Report> reports_;
  // Per rank, its absences: [round lost in, round back at) (back: ~0 while it is out).
  std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> absent_;
  std::map<int, uint64_t> lostNow_;
  std::map<uint64_t, std::string> changes_;  // epoch -> its membership line
  std::set<std::pair<int, uint64_t>> noted_;  // absences (rank, round) in membership.jsonl
  std::unique_ptr<core::LineFile> log_;       // dir/membership.jsonl, once there is news
};

// Where a run's failure started: the peer that failed on its own, or the one its neighbours lost,
// at the earliest round.
struct RootCause {
  int rank = 0;
  uint64_t round = 0;
  bool lostByOthers = false;   // the others lost it (it may have hung, crashed or been killed)
  std::vector<int> lostBy;     // the ranks that lost it
  std::string message;         // its own error, or the first of those who lost it
  std::string describe() const;
};

// The root cause among the peers' failure lines (indexed by rank; nullopt: none): the earliest
// event, a peer's own failure before its neighbours losing it.
std::optional<RootCause> rootCauseOf(
    const std::vector<std::optional<engine::PeerFailure>>& failures);

class PeerLogMerger {
 public:
  // `e` and `log` are borrowed. `dir` is the run's output folder (peer logs in dir/peers/).
  PeerLogMerger(const scenario::Experiment& e, std::filesystem::path dir, MetricsLog& log);

  // Merges what is complete. Returns the number of rounds written by this call. kCorruption for a
  // peer log line that is not what a peer writes, or a log written for another run.
  core::Result<int> poll();
  // The last poll, once every peer has exited: no line will come any more, so a rank lost in
  // round L whose log ends before L (stopped between finishing round L - 1 and writing L's line,
  // a stall that then cost it the run) is counted out from L instead of waited for.
  core::Result<int> finalPoll();

  // The last merged round's metrics and mean model (nullopt before the first).
  const std::optional<RoundMetrics>& last() const { return last_; }
  const std::vector<double>& xMean() const { return xMean_; }

  // What each peer's log says so far: the last round it logged (nullopt: none yet) and its
  // failure line, if it wrote one.
  std::optional<uint64_t> lastRoundOf(int rank) const { return sources_[rank].lastRound; }
  const std::optional<engine::PeerFailure>& failureOf(int rank) const {
    return sources_[rank].failure;
  }
  std::optional<RootCause> rootCause() const;

  // Why the logs stop before the scenario's last round, one line per rank that stops short
  // (empty when every log reaches it).
  std::string shortLogs() const;

  // Peer loss (faults.on_peer_loss "continue"): the ranks the survivors' logs say they lost, with
  // the round they were lost in. A lost rank's log ends early; from the round after, the merged
  // metrics are the survivors' (and rel_error is against the survivors' optimum).
  const std::map<int, uint64_t>& lost() const { return membership_.lost(); }

 private:
  struct Record {
    uint64_t bytesSent = 0;
    uint64_t corrupt = 0;
    double compressionErrorSum = 0;
    uint64_t compressionErrorCount = 0;
    double wallS = 0;
    std::vector<double> x;       // the model, or empty when the peer logged a sketch
    std::vector<double> sketch;  // metrics.h: modelSketch
    double ownAccuracy = NAN;    // "test_accuracy_own": a sketching mlp peer's own accuracy
    std::vector<optim::MethodMetric> methods;  // "methods": {name: value}
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

  core::Status readPeer(int rank);

  const scenario::Experiment& e_;
  std::filesystem::path dir_;
  MetricsLog& log_;
  std::string expectedHash_;
  std::optional<std::string> runId_;  // the run id of the first header read
  std::vector<Source> sources_;
  std::map<uint64_t, std::vector<std::optional<Record>>> pending_;
  std::optional<RoundMetrics> last_;
  CompressionErrorMean compressionError_;
  std::vector<double> xMean_;
  MembershipReports membership_;  // the "lost" and "membership" lines; membership.jsonl
  std::vector<std::optional<Record>> lastRecord_;  // each rank's last round line
  std::vector<bool> surviving_;                    // the set survivors_ is for
  bool final_ = false;                             // finalPoll: every peer has exited
  std::unique_ptr<SurvivorProblem> survivors_;
};

}  // namespace starling::runtime
