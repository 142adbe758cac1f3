// The scenario as it runs: every default filled in, written back in the format parseScenario
// reads (scenarios/README.md), and a hash of it.
//
// A run folder keeps this as scenario.resolved.json, so it says exactly what ran and can be run
// again as it is. Peers record the hash in their logs, so that `merge` can check it merges the
// run it is given. Thread-safety: free functions over values.
#pragma once

#include <cstdint>
#include <string>

#include "scenario/scenario.h"

namespace starling::scenario {

// Pretty JSON (2-space indent, keys in the parser's order) with every default written out.
// Parsing it gives back a Scenario that writes the same text: a fixpoint. Data paths are
// absolute. The `file` a scenario was read from is not part of it. Defaults no single value can
// state stay left out, as the parser reads them: the `peers` section when there was none,
// L-SVRG's `p`, a LIBSVM file's `features`, unbounded box sides.
std::string resolvedScenarioJson(const Scenario& s);

// FNV-1a (64 bits) of resolvedScenarioJson without `name`, `description` and `checkpoint`
// (how often state is saved changes no number of the run): equal for scenarios
// that run identically (whatever the file's name, key order, spacing or defaults spelled out),
// different when anything that changes the run differs, seed and rounds included.
uint64_t scenarioHash(const Scenario& s);

// 16 lowercase hex digits.
std::string scenarioHashHex(uint64_t hash);

}  // namespace starling::scenario
