#include "engine/engine.h"

#include <chrono>
#include <cstdio>

#include "engine/peer_log.h"

namespace starling::engine {
namespace {

using Clock = transport::Clock;
// How often a waiting peer looks at its stop flag.
constexpr auto kStopPoll = std::chrono::milliseconds(200);

}  // namespace

template <typename T>
Engine<T>::Engine(Options run, const topology::Schedule& schedule, transport::Transport& net,
                  EngineOptions options)
    : run_(std::move(run)),
      schedule_(schedule),
      net_(net),
      opt_(std::move(options)),
      start_(Clock::now()) {}

template <typename T>
void Engine<T>::say(const std::string& line) const {
  if (opt_.log) {
    opt_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

template <typename T>
double Engine<T>::wallSeconds() const {
  return opt_.wallOffset + std::chrono::duration<double>(Clock::now() - start_).count();
}

template <typename T>
core::Status Engine<T>::open() {
  start_ = Clock::now();
  if (opt_.resumeRound) round_ = *opt_.resumeRound;
  if (opt_.outDir.empty()) return core::Status::ok();
  if (opt_.resumeRound) {
    auto opened = core::LineFile::openAt(peerLogPath(opt_.outDir, opt_.rank), opt_.resumeLogBytes);
    if (!opened) return opened.status();
    out_ = std::move(*opened);
    return core::Status::ok();
  }
  std::error_code ec;
  std::filesystem::create_directories(opt_.outDir / "peers", ec);
  if (ec) {
    return core::ioError("cannot create " + (opt_.outDir / "peers").string() + ": " + ec.message());
  }
  auto created = core::LineFile::create(peerLogPath(opt_.outDir, opt_.rank));
  if (!created) return created.status();
  out_ = std::move(*created);
  return out_->append(opt_.logHeader);
}

template <typename T>
double Engine<T>::stepSizeAt(std::optional<double> stepSize) const {
  return stepSize ? *stepSize : run_.stepSize.at(round_);
}

template <typename T>
core::Status Engine<T>::begin(Node<T>& node, std::optional<double> stepSize) {
  const auto topo = schedule_.at(round_);
  return begin(node, *topo, stepSize);
}

template <typename T>
core::Status Engine<T>::begin(Node<T>& node, const topology::RoundTopology& topo,
                              std::optional<double> stepSize) {
  if (!failure_.isOk()) return failure_;
  if (inRound_) return core::failedPrecondition("a round is already in flight");
  // The first round (of this process: a resumed peer's too) also waits for the neighbours to
  // start and connect.
  const uint64_t wait =
      !started_ ? std::max(run_.roundTimeoutMs, run_.connectTimeoutMs) : run_.roundTimeoutMs;
  started_ = true;
  deadline_ = Clock::now() + std::chrono::milliseconds(wait);
  if (auto st = node.startRound(round_, topo, stepSizeAt(stepSize), deadline_); !st.isOk()) {
    return fail(st, &node);
  }
  inRound_ = &node;
  return core::Status::ok();
}

template <typename T>
core::Status Engine<T>::wait(Node<T>& node) {
  const auto third = std::chrono::milliseconds(std::max<uint64_t>(1, run_.roundTimeoutMs / 3));
  auto nextLongWait = Clock::now() + third;
  // Work the algorithm does while its messages travel (DiLoCo's overlapped inner steps), moving
  // the transport between its pieces; a failure there shows in the loop below.
  node.computeDuringExchange([this] { (void)net_.progress(Clock::now()); });
  while (!node.roundComplete() || (alsoWaitFor_ && !alsoWaitFor_())) {
    if (opt_.stop && opt_.stop->load()) return core::cancelled("stopped by a signal");
    auto ran = net_.progress(std::min(Clock::now() + kStopPoll, deadline_ + std::chrono::seconds(1)));
    if (!ran) return ran.status();
    if (node.roundComplete() && (!alsoWaitFor_ || alsoWaitFor_())) break;
    const auto now = Clock::now();
    if (onLongWait_ && now >= nextLongWait) {
      onLongWait_();
      nextLongWait = now + third;
    }
    // Receives expire at the deadline and complete with kTimeout (progress runs them first,
    // also after this process was stopped for longer); the margin only bounds this loop if a
    // completion were ever lost.
    if (now > deadline_ + std::chrono::seconds(5)) {
      return core::internalError("round did not complete after its deadline");
    }
  }
  return node.finishRound();
}

template <typename T>
core::Status Engine<T>::complete(Node<T>& node) {
  if (!failure_.isOk()) return failure_;
  if (inRound_ != &node) return core::failedPrecondition("no round of this node is in flight");
  inRound_ = nullptr;
  if (auto st = wait(node); !st.isOk()) return fail(st, &node);
  ++round_;
  return core::Status::ok();
}

template <typename T>
core::Status Engine<T>::poll() {
  if (!failure_.isOk()) return failure_;
  if (!inRound_) return core::Status::ok();
  auto ran = net_.progress(Clock::now());
  if (!ran) return fail(ran.status(), inRound_);
  return core::Status::ok();
}

template <typename T>
core::Status Engine<T>::round(Node<T>& node, std::optional<double> stepSize) {
  STARLING_RETURN_IF_ERROR(begin(node, stepSize));
  return complete(node);
}

template <typename T>
core::Status Engine<T>::append(const std::string& line) {
  if (opt_.tap) opt_.tap(line);
  if (!out_) return core::Status::ok();
  return out_->append(line);
}

template <typename T>
core::Status Engine<T>::fail(const core::Status& raw, const Node<T>* node) {
  if (!failure_.isOk()) return failure_;
  const auto context = "rank " + std::to_string(opt_.rank) + ", round " + std::to_string(round_);
  failure_ = run_.explainFailure ? run_.explainFailure(raw, context) : raw.withContext(context);
  if (failure_.isOk()) failure_ = core::internalError(context + ": failed with an ok status");
  // The others learn from this line whom this peer lost (the launcher and `merge` name the
  // root cause of a cascade from it). Best effort: the error itself is what is returned.
  if (out_) {
    PeerFailure f{opt_.rank, round_, std::string(core::statusCodeName(failure_.code())),
                  failure_.code() == core::StatusCode::kCancelled || node == nullptr
                      ? std::nullopt
                      : node->lostNeighbour(),
                  failure_.message()};
    (void)out_->append(peerFailureLine(f));
  }
  return failure_;
}

template <typename T>
core::Status Engine<T>::flush(const std::vector<const Node<T>*>& nodes) {
  const auto inFlight = [&] {
    size_t n = 0;
    for (const Node<T>* node : nodes) n += node->sendsInFlight();
    return n;
  };
  const auto flushDeadline = Clock::now() + std::chrono::milliseconds(run_.connectTimeoutMs);
  while (inFlight() > 0 && Clock::now() < flushDeadline) {
    if (opt_.stop && opt_.stop->load()) break;
    auto ran = net_.progress(std::min(Clock::now() + kStopPoll, flushDeadline));
    if (!ran) return ran.status();
  }
  return core::Status::ok();
}

template class Engine<float>;
template class Engine<double>;

}  // namespace starling::engine
