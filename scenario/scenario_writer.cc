#include "scenario/scenario_writer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "compression/codec_keys.h"

namespace starling::scenario {
namespace {

using ojson = nlohmann::ordered_json;  // not `json`: scenario_reader.h has that name

// The parser resolves a relative data path against the scenario's folder, which is itself
// relative when the scenario was named by a relative path (`simulate scenarios/x.json`). Made
// absolute against the working directory, the resolved file can be run from anywhere. That is
// the directory the scenario was loaded from as long as nothing changes it in between (nothing
// in Starling does); a parser that stored absolute paths would not need this.
std::string absolutePath(const std::string& path) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

ojson graphJson(const topology::GraphSpec& g) {
  ojson j;
  j["kind"] = topology::graphKindName(g.kind);
  j["weights"] = topology::weightRuleName(g.weights);
  if (g.kind == topology::GraphKind::kGrid) {
    j["rows"] = g.rows;
    j["cols"] = g.cols;
    j["torus"] = g.torus;
  } else if (g.kind == topology::GraphKind::kRandom) {
    j["p"] = g.p;
  }
  return j;
}

ojson topologyJson(const topology::TopologySpec& t) {
  ojson j = graphJson(t.base);
  ojson sch;
  sch["kind"] = topology::scheduleKindName(t.schedule.kind);
  if (t.schedule.kind == topology::ScheduleKind::kCycle) {
    sch["graphs"] = ojson::array();
    for (const auto& g : t.schedule.cycle) sch["graphs"].push_back(graphJson(g));
  } else if (t.schedule.kind == topology::ScheduleKind::kEdgeDropout) {
    sch["p"] = t.schedule.p;
  }
  j["schedule"] = sch;
  return j;
}

void decayJson(const optim::StepSizeSchedule& st, optim::StepSizeSchedule::Kind kind, ojson& j) {
  using K = optim::StepSizeSchedule::Kind;
  if (kind == K::kInverseTime) {
    j["tau"] = st.tau;
  } else if (kind == K::kStep) {
    j["every"] = st.every;
    j["factor"] = st.factor;
  }
}

const char* stepKindName(optim::StepSizeSchedule::Kind kind) {
  using K = optim::StepSizeSchedule::Kind;
  switch (kind) {
    case K::kConstant: return "constant";
    case K::kInverseTime: return "inverse_time";
    case K::kStep: return "step";
    case K::kLegw: return "legw";
  }
  return "?";
}

ojson stepSizeJson(const optim::StepSizeSchedule& st) {
  using K = optim::StepSizeSchedule::Kind;
  if (st.kind == K::kConstant) return st.value;
  ojson j;
  j["kind"] = stepKindName(st.kind);
  if (st.kind != K::kLegw) {
    j["value"] = st.value;
    decayJson(st, st.kind, j);
    return j;
  }
  j["base_lr"] = st.baseLr;
  j["base_batch"] = st.baseBatch;
  if (st.batchGiven) j["batch"] = st.batch;  // else derived from the data (scenario/experiment.cc)
  j["warmup_epochs"] = st.warmupEpochs;
  if (st.roundsPerEpochGiven) j["rounds_per_epoch"] = st.roundsPerEpoch;
  ojson d;
  d["kind"] = stepKindName(st.decay);
  decayJson(st, st.decay, d);
  j["decay"] = d;
  return j;
}

// Always written, {"l1": 0} when there is none (the parser reads that as no regularizer). JSON has
// no infinities, so an unbounded box side is left out (the parser's default); `nonneg` is written
// as the box it stands for, lower 0.
ojson regularizerJson(const optim::RegularizerSpec& r) {
  ojson j;
  j["l1"] = r.l1;
  if (std::isfinite(r.lower) || std::isfinite(r.upper)) {
    ojson box = ojson::object();
    if (std::isfinite(r.lower)) box["lower"] = r.lower;
    if (std::isfinite(r.upper)) box["upper"] = r.upper;
    j["box"] = box;
  }
  return j;
}

ojson problemJson(const ProblemConfig& p) {
  ojson j;
  if (p.isMlp()) {
    j["kind"] = "mlp";
    j["layers"] = p.layers;
  } else {
    j["kind"] = p.spec.loss == optim::LossKind::kLogistic ? "logistic" : "least_squares";
  }
  j["l2"] = p.spec.l2;
  switch (p.partition) {
    case PartitionKind::kContiguous:
      j["partition"] = "contiguous";
      break;
    case PartitionKind::kRandom:
      j["partition"] = "random";
      break;
    case PartitionKind::kIid:
      j["partition"] = "iid";
      break;
    case PartitionKind::kDirichlet:
      j["partition"] = {{"kind", "dirichlet"}, {"alpha", p.partitionAlpha}};
      break;
    case PartitionKind::kShards:
      j["partition"] = {{"kind", "shards"}, {"shards_per_node", p.shardsPerNode}};
      break;
  }
  if (!p.isMlp()) j["regularizer"] = regularizerJson(p.spec.regularizer);
  ojson est;
  // Always the estimator object, also for the older `"batch": B` form it is equivalent to.
  est["kind"] = optim::estimatorKindName(p.estimator.kind);
  if (p.estimator.kind != optim::EstimatorSpec::Kind::kFull) est["batch"] = p.estimator.batch;
  // L-SVRG's default p is min(1, B / m_i), which differs from node to node (m_i is node i's
  // sample count): no single number states it, so a default p stays left out.
  if (p.estimator.kind == optim::EstimatorSpec::Kind::kLsvrg && p.estimator.p > 0) {
    est["p"] = p.estimator.p;
  }
  j["estimator"] = est;
  ojson data;
  if (p.data.kind == DataSource::Kind::kSynthetic) {
    const auto& sp = p.data.synthetic;
    data["synthetic"] = {{"samples", sp.samples},           {"features", sp.features},
                         {"heterogeneity", sp.heterogeneity}, {"noise", sp.noise},
                         {"density", sp.density}};
  } else if (p.data.kind == DataSource::Kind::kIdx) {
    if (!p.data.dataset.empty()) {
      data["dataset"] = p.data.dataset;
    } else {
      data["format"] = "idx";
      data["images"] = absolutePath(p.data.images);
      data["labels"] = absolutePath(p.data.labels);
      data["test_images"] = absolutePath(p.data.testImages);
      data["test_labels"] = absolutePath(p.data.testLabels);
    }
    data["train_samples"] = p.data.trainSamples;
    data["test_samples"] = p.data.testSamples;
  } else {
    data["format"] = "libsvm";
    data["path"] = absolutePath(p.data.path);
    // Without `features` d is the largest index in the file: only the file knows it.
    if (p.data.features) data["features"] = *p.data.features;
  }
  j["data"] = data;
  return j;
}

ojson algorithmJson(const optim::AlgorithmSpec& a, const Scenario& s) {
  ojson j;
  j["kind"] = optim::algorithmKindName(a.kind);
  j["step_size"] = stepSizeJson(a.stepSize);
  const optim::AlgorithmInfo& info = optim::algorithmInfo(a.kind);
  if (info.usesGamma) j["gamma"] = a.gamma;
  if (info.usesAlpha) j["alpha"] = a.alpha;
  if (a.combine == optim::AlgorithmSpec::Combine::kAdasum) {
    j["combine"] = "adasum";
    j.erase("gamma");
  }
  const optim::LocalOptimizerSpec& l = a.localOptimizer;
  using LK = optim::LocalOptimizerSpec::Kind;
  if (l.kind != LK::kSgd || l.weightDecay != 0.0) {
    ojson lo;
    lo["kind"] = optim::localOptimizerKindName(l.kind);
    lo["weight_decay"] = l.weightDecay;
    if (l.kind == LK::kMomentum) {
      lo["momentum"] = l.momentum;
      lo["nesterov"] = l.nesterov;
    }
    if (l.kind == LK::kAdam || l.kind == LK::kLamb) {
      lo["beta1"] = l.beta1;
      lo["beta2"] = l.beta2;
      lo["eps"] = l.eps;
      lo["bias_correction"] = l.biasCorrection;
    }
    j[a.kind == optim::AlgorithmKind::kDiloco ? "inner" : "local_optimizer"] = lo;
  }
  if (a.kind == optim::AlgorithmKind::kDiloco) {
    const optim::DilocoSpec& d = a.diloco;
    if (d.seconds > 0) {
      ojson bt{{"kind", "by_time"}, {"seconds", d.seconds}, {"max_steps", d.innerSteps},
               {"step_seconds", d.stepSeconds}};
      if (!d.speeds.empty()) bt["speeds"] = d.speeds;
      j["inner_steps"] = bt;
    } else {
      j["inner_steps"] = d.innerSteps;
    }
    j["fragments"] = d.fragments;
    j["overlap"] = d.overlap;
    ojson outer{{"kind", optim::dilocoOuterName(d.outer)}, {"lr", d.outerLr}};
    if (d.outer == optim::DilocoSpec::Outer::kNesterov ||
        d.outer == optim::DilocoSpec::Outer::kNoloco) {
      outer["momentum"] = d.outerMomentum;
    }
    if (d.outer == optim::DilocoSpec::Outer::kNoloco) outer["pull"] = d.pull;
    j["outer"] = outer;
  }
  if (const auto& ada = a.adascale) {
    ojson aj;
    if (s.hasProblem) {
      aj["micro_batches"] = ada->microBatches;
      if (ada->baseBatch) aj["base_batch"] = *ada->baseBatch;
    } else {
      aj["scale"] = ada->scale;  // a trainer's run: the one thing not derived from the problem
    }
    if (ada->smoothing) aj["smoothing"] = *ada->smoothing;
    j["adascale"] = aj;
  }
  if (const auto& l = a.leader) {
    j["leader"] = ojson{{"pull_local", l->pullLocal},
                       {"pull_global", l->pullGlobal},
                       {"proximal_local", l->proximalLocal},
                       {"proximal_global", l->proximalGlobal},
                       {"local_period", l->localPeriod},
                       {"global_period", l->globalPeriod},
                       {"loss_window", l->lossWindow}};
  }
  if (const auto& sk = a.sketch) {
    ojson sj{{"rows", sk->rows}, {"cols", sk->cols}};
    if (sk->k > 0) {
      sj["k"] = sk->k;
    } else {
      sj["ratio"] = sk->ratio;
    }
    sj["momentum"] = sk->momentum;  // the seed is derived from /seed again
    j["sketch"] = sj;
  }
  if (a.codistillation) {
    const optim::CodistillationConfig& c = *a.codistillation;
    ojson co;
    co["alpha"] = c.loss.alpha;
    co["distance"] =
        c.loss.distance == optim::CodistillationSpec::Distance::kKl ? "kl" : "cross_entropy";
    co["period"] = c.period;
    co["burn_in"] = c.burnIn;
    j["codistillation"] = co;
    j.erase("gamma");
  }
  return j;
}

void keepJson(const compression::CompressorSpec& c, ojson& j) {
  if (c.k > 0) {
    j["k"] = c.k;
  } else {
    j["ratio"] = c.ratio;
  }
}

ojson compressionJson(const compression::CompressorSpec& c) {
  using Type = compression::CodecKey::Type;
  ojson j;
  j["kind"] = compression::compressorKindName(c.kind);
  // The codec's keys in the table's order (compression/codec_keys.h), as the reader reads them.
  for (const compression::CodecKey& key : compression::codecKeys(c.kind)) {
    switch (key.type) {
      case Type::kKeep:
        keepJson(c, j);
        break;
      case Type::kSketchKeep:
        if (!c.meanEstimate) {
          if (c.threshold > 0) {
            j["threshold"] = c.threshold;
          } else {
            keepJson(c, j);
          }
        }
        break;
      case Type::kInteger:
        j[key.name] = static_cast<uint64_t>(key.get(c));
        break;
      case Type::kNumber:
        j[key.name] = key.get(c);
        break;
      case Type::kBoolean:
        j[key.name] = key.get(c) != 0;
        break;
      case Type::kChoice:
        j[key.name] = key.choices[static_cast<size_t>(key.get(c))];
        break;
    }
  }
  j["error_feedback"] = c.errorFeedback;
  // Only when given, so that the scenarios without layers keep their hashes. The "uncompressed"
  // shorthand was turned into the identity rule it stands for.
  if (!c.layers.empty()) {
    ojson rules = ojson::array();
    for (const compression::LayerRule& r : c.layers) {
      ojson rule = compressionJson(r.codec);
      rule["tensors"] = r.tensors;
      rules.push_back(std::move(rule));
    }
    j["layers"] = std::move(rules);
  }
  return j;
}

ojson transportJson(const TransportConfig& t) {
  ojson j;
  if (t.kind == TransportConfig::Kind::kInproc) {
    j["kind"] = "inproc";
    return j;
  }
  j["kind"] = "ucx";
  j["tls"] = t.tls;
  j["ucx_tls"] = t.ucxTls;  // "" (the default): UCX_TLS follows `tls`
  j["connect_timeout_ms"] = t.connectTimeoutMs;
  j["round_timeout_ms"] = t.roundTimeoutMs;
  j["max_endpoints"] = t.maxEndpoints;
  j["shm_frames"] = t.shmFrames;
  j["shm_threshold_bytes"] = t.shmThresholdBytes;
  j["spin_us"] = t.spinUs;
  j["busy_poll"] = t.busyPoll == TransportConfig::BusyPoll::kOn    ? "on"
                   : t.busyPoll == TransportConfig::BusyPoll::kOff ? "off"
                                                                   : "auto";
  return j;
}

// The whole scenario in the parser's key order. Derived fields are not written: the topology's
// nodes and seed (the scenario's), the algorithm's regularizer (the problem's) and timeVarying
// (the schedule's), problem.batchPath (a message detail).
ojson resolved(const Scenario& s) {
  ojson j;
  j["schema_version"] = kScenarioSchemaVersion;
  j["name"] = s.name;
  j["description"] = s.description;
  j["nodes"] = s.nodes;
  j["seed"] = s.seed;
  if (s.rounds > 0) j["rounds"] = s.rounds;  // 0: an embedded run's trainer decides
  j["log_every"] = s.logEvery;
  j["precision"] = precisionName(s.precision);
  j["topology"] = topologyJson(s.topology);
  if (s.hasProblem) j["problem"] = problemJson(s.problem);
  j["algorithm"] = algorithmJson(s.algorithm, s);
  // Only when asked for, so that the hash of every synchronous scenario stays what it was.
  if (s.asynchronous.enabled) {
    j["algorithm"]["asynchronous"] = {{"max_staleness", s.asynchronous.maxStaleness},
                                      {"speeds", s.asynchronous.speeds},
                                      {"compute_ms", s.asynchronous.computeMs}};
  }
  j["compression"] = compressionJson(s.compression);
  j["transport"] = transportJson(s.transport);
  // Written only when the scenario had one: without it, `run` picks free loopback ports and
  // `peer` uses 127.0.0.1:29500 + rank, which no `peers` section can say. A `hosts` + `base_port`
  // section is written as the addresses it stands for (the parser keeps no hosts).
  if (s.peers.explicitAddresses) {
    j["peers"] = {{"addresses", s.peers.addresses}};
  } else if (s.peers.basePort != kDefaultBasePort) {
    j["peers"] = {{"base_port", s.peers.basePort}};
  }
  j["divergence"] = {{"max_abs", s.divergenceMaxAbs}};
  ojson faults = ojson::object();
  faults["on_peer_loss"] =
      s.faults.onPeerLoss == engine::OnPeerLoss::kContinue ? "continue" : "stop";
  faults["repair"] = s.faults.repair == engine::RepairKind::kNone ? "none" : "reconnect";
  if (s.faults.agreementRounds > 0) faults["agreement_rounds"] = s.faults.agreementRounds;
  if (s.faults.restart) {
    faults["restart"] = true;
    faults["max_restarts"] = s.faults.maxRestarts;
  }
  ojson script = ojson::array();
  for (const engine::FaultEvent& e : s.faults.script) {
    ojson ev = ojson::object();
    if (e.kind == engine::FaultEvent::Kind::kKill) {
      ev["kill"] = e.kill;
      ev["at_round"] = e.atRound;
    } else {
      switch (e.kind) {
        case engine::FaultEvent::Kind::kCorrupt:
          ev["corrupt"] = e.probability;
          break;
        case engine::FaultEvent::Kind::kDrop:
          ev["drop"] = e.probability;
          break;
        case engine::FaultEvent::Kind::kDuplicate:
          ev["duplicate"] = e.probability;
          break;
        case engine::FaultEvent::Kind::kReorder:
          ev["reorder"] = e.probability;
          break;
        default: ev["delay_ms"] = e.delayMs; break;
      }
      ev["from_round"] = e.fromRound;
      ev["to_round"] = e.toRound;
      if (e.linkA >= 0) ev["link"] = {e.linkA, e.linkB};
    }
    script.push_back(ev);
  }
  faults["script"] = script;
  j["faults"] = faults;
  if (!s.security.keyFile.empty() || s.security.encrypt) {
    ojson security = ojson::object();
    if (!s.security.keyFile.empty()) security["key_file"] = s.security.keyFile;
    security["encrypt"] = s.security.encrypt;
    j["security"] = security;
  }
  if (s.checkpoint.every > 0) {
    j["checkpoint"] = {{"every", s.checkpoint.every}, {"keep", s.checkpoint.keep}};
  }
  return j;
}

// Doubles are written in the shortest form that reads back to the same bits (nlohmann's
// Grisu2), so every number round-trips exactly. Strings from the parser are valid UTF-8; a
// working directory that is not (absolutePath) is written with U+FFFD rather than thrown on.
std::string dump(const ojson& j) { return j.dump(2, ' ', false, ojson::error_handler_t::replace); }

}  // namespace

std::string resolvedScenarioJson(const Scenario& s) { return dump(resolved(s)); }

uint64_t scenarioHash(const Scenario& s) {
  // The name and the description are labels: they change the run's folder, not one number of
  // it, and a name left out of the file is the file's name, which must not matter. Checkpoints
  // change how often state is saved, not one number of the run (a run resumed with another
  // `every` is the same run).
  ojson j = resolved(s);
  j.erase("name");
  j.erase("description");
  j.erase("checkpoint");
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  for (const unsigned char c : dump(j)) {
    h ^= c;
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return h;
}

std::string scenarioHashHex(uint64_t hash) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(hash));
  return out;
}

}  // namespace starling::scenario
