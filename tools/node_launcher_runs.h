// What node-launcher's verbs share (tools/node_launcher.cc parses the command line): loading a
// scenario, the exit status of a failure, the run folder's lock, the result line, and the
// `merge` and `run --resume` verbs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/launcher.h"
#include "runtime/metrics.h"
#include "runtime/run_folder.h"
#include "scenario/experiment.h"

namespace starling::cli {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Options for `run` to start `node-launcher peer` processes (this executable) on the scenario.
runtime::LaunchOptions peerLaunch(const std::string& scenarioPath, std::optional<uint64_t> rounds,
                                  std::optional<uint64_t> seed, std::filesystem::path outDir);

// The result line on stdout: rounds, nodes, how they ran, the quality (rel_error or, for a
// classification problem, loss and test accuracy), consensus, bytes, time and the outputs.
void printResult(const scenario::Experiment& e, const runtime::RoundMetrics& m,
                 const std::filesystem::path& out, const char* how);

// Prints the error; returns the exit status: 2 for a scenario problem, 1 otherwise.
int report(const core::Status& st);

// A run that started and failed: prints it (a divergence is its own headline); returns 1.
int runFailed(const core::Status& st);

// The run folder for this process alone (runtime/run_folder.h): locked for as long as the
// launcher lives; for a fresh run, cleared of an earlier run's files (and refused when it holds
// files Starling did not write).
core::Result<runtime::RunFolderLock> claimRunFolder(const std::filesystem::path& dir, bool fresh);

// The scenario at `path` with --rounds and --seed applied, prepared (data read, partitioned; the
// central solution when `solve`); refuses a scenario that only a trainer can run.
core::Result<scenario::Experiment> load(const std::string& path, std::optional<uint64_t> rounds,
                                        std::optional<uint64_t> seed, bool solve);

// The end of `run` and `run --resume` over peer processes: records the run (run.json), starts
// and supervises the peers (runtime::launchPeers) and prints the result line, saying `how` they
// ran. Returns the exit status.
int launchPeerRun(const scenario::Experiment& e, const runtime::LaunchOptions& lo,
                  const std::vector<std::string>& command, const char* how);

// `node-launcher merge SCENARIO --out DIR`: the peer logs say what the peers ran (seed, rounds,
// scenario hash); the scenario file must be the one they ran, and --rounds/--seed, if given,
// must agree. Returns the exit status.
int mergeRun(const std::string& scenarioPath, const std::string& outDir,
             std::optional<uint64_t> rounds, std::optional<uint64_t> seed,
             const std::vector<std::string>& command);

// `node-launcher run SCENARIO --resume DIR`: the run whose output folder is DIR goes on from the
// newest round every peer has a verified checkpoint of (runtime/resume.h). Returns the exit
// status.
int resumeRun(const std::string& scenarioPath, const std::string& dir, const std::string& outDir,
              std::optional<uint64_t> rounds, std::optional<uint64_t> seed,
              const std::vector<std::string>& trainerCommand,
              const std::vector<std::string>& command);

}  // namespace starling::cli
