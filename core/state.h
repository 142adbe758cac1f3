// StateVisitor: how a stateful object hands its state to a checkpoint and takes it back.
//
// Every object whose state a resumed run needs (an algorithm, a gradient oracle, a codec's
// stream state, a Node, the fault injector, the membership) has ONE function,
// visitState(StateVisitor&), that names each piece of its state in order. The same function saves
// (the visitor reads the values) and loads (the visitor writes them), so save and load can never
// disagree on what the state is. A loading visitor checks every name, type and size against what
// the file holds and fails with a message naming the field (runtime/checkpoint.h is the file).
//
// Errors do not throw: the first one is kept (status()) and every later call does nothing, so a
// visitState function never checks anything itself. Values are stored bit for bit (doubles as
// their 64 bits), so a resumed run continues exactly where the saved one was.
// Thread-safety: none; one visitor walks one object graph on one thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace starling::core {

class StateVisitor {
 public:
  virtual ~StateVisitor() = default;

  // True when values are being restored (the visitor writes into the references).
  virtual bool loading() const = 0;

  // A vector whose length the object fixes (the model's dimension): a load requires exactly
  // v.size() values.
  virtual void values(std::string_view name, std::span<float> v) = 0;
  virtual void values(std::string_view name, std::span<double> v) = 0;
  // A vector whose length is part of the state (may be empty, may grow): a load resizes it.
  virtual void sized(std::string_view name, std::vector<float>& v) = 0;
  virtual void sized(std::string_view name, std::vector<double>& v) = 0;
  virtual void sized(std::string_view name, std::vector<uint64_t>& v) = 0;
  virtual void scalar(std::string_view name, uint64_t& v) = 0;
  virtual void scalar(std::string_view name, double& v) = 0;
  virtual void text(std::string_view name, std::string& s) = 0;

  template <typename T>
  void fixed(std::string_view name, std::vector<T>& v) {
    values(name, std::span<T>(v));
  }
  void flag(std::string_view name, bool& b);
  void scalar(std::string_view name, int64_t& v);
  // A map from rank to vector (CHOCO's and LEAD's per-neighbour reference points): its keys,
  // then one sized vector per key.
  template <typename T>
  void perPeer(std::string_view name, std::map<int, std::vector<T>>& m);

  // The first error (a load that found another field, size or type; an object that cannot be
  // saved). Every call after it does nothing.
  const Status& status() const { return status_; }
  void fail(const std::string& message) {
    if (status_.isOk()) status_ = corruption(message);
  }
  bool failed() const { return !status_.isOk(); }

  // Names visited while a Scope lives are prefixed with its name: "node/algorithm/x".
  class Scope {
   public:
    Scope(StateVisitor& v, std::string_view name) : v_(v), size_(v.prefix_.size()) {
      v.prefix_ += std::string(name) + "/";
    }
    ~Scope() { v_.prefix_.resize(size_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StateVisitor& v_;
    size_t size_;
  };

 protected:
  std::string qualified(std::string_view name) const { return prefix_ + std::string(name); }

 private:
  std::string prefix_;
  Status status_;
};

inline void StateVisitor::flag(std::string_view name, bool& b) {
  uint64_t u = b ? 1 : 0;
  scalar(name, u);
  if (!loading() || failed()) return;
  if (u > 1) return fail("checkpoint field " + qualified(name) + " holds " + std::to_string(u) +
                         ", expected 0 or 1");
  b = u == 1;
}

inline void StateVisitor::scalar(std::string_view name, int64_t& v) {
  uint64_t u = static_cast<uint64_t>(v);
  scalar(name, u);
  if (loading() && !failed()) v = static_cast<int64_t>(u);
}

template <typename T>
void StateVisitor::perPeer(std::string_view name, std::map<int, std::vector<T>>& m) {
  Scope scope(*this, name);
  std::vector<uint64_t> keys;
  for (const auto& entry : m) keys.push_back(static_cast<uint64_t>(entry.first));
  sized("peers", keys);
  if (failed()) return;
  if (loading()) {
    m.clear();
    for (uint64_t k : keys) {
      if (k > (uint64_t{1} << 30)) return fail("checkpoint field " + qualified("peers") +
                                               " holds rank " + std::to_string(k));
      m[static_cast<int>(k)];
    }
  }
  for (auto& [peer, v] : m) sized(std::to_string(peer), v);
}

}  // namespace starling::core
