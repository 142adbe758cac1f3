// What a transport allocates per message, kept for the next message: after the first rounds a
// round allocates nothing (tests/api/step_allocations_test.cc counts it).
//
//   Recycled<T>   memory for T's instances (a send or receive in flight) from a small per-thread
//                 cache of freed ones; a fresh block comes from ::operator new. T declares
//                 STARLING_RECYCLED(T) (it stays an aggregate).
//   NodeCache<M>  a std::map's erased nodes (with what their value holds: a receive's callback
//                 slot, an emptied queue's storage) kept for the next insert.
//
// Thread-safety: Recycled's cache is per thread (an op freed on another thread than the one that
// made it joins that thread's cache); NodeCache belongs to one map, used as that map is.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
// A cached block is poisoned: a use after free of a recycled op still stops under ASan.
#define STARLING_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define STARLING_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define STARLING_POISON(p, n) ((void)(p), (void)(n))
#define STARLING_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace starling::transport {

template <typename T>
struct Recycled {
  static void* allocate(std::size_t n) {
    if (n == sizeof(T) && !gone_ && cache_.count > 0) {
      void* p = cache_.blocks[--cache_.count];
      STARLING_UNPOISON(p, sizeof(T));
      return p;
    }
    return ::operator new(n);
  }
  static void deallocate(void* p, std::size_t n) {
    if (n == sizeof(T) && !gone_ && cache_.count < kKeep) {
      STARLING_POISON(p, sizeof(T));
      cache_.blocks[cache_.count++] = p;
      return;
    }
    ::operator delete(p);
  }

 private:
  static constexpr std::size_t kKeep = 64;
  struct Cache {
    void* blocks[kKeep];
    std::size_t count = 0;
    ~Cache() {
      while (count > 0) {
        STARLING_UNPOISON(blocks[count - 1], sizeof(T));
        ::operator delete(blocks[--count]);
      }
      gone_ = true;  // a T freed later in this thread's exit goes straight back
    }
  };
  static thread_local inline Cache cache_;
  static thread_local inline bool gone_ = false;
};

#define STARLING_RECYCLED(T)                                                                \
  static void* operator new(std::size_t n) { return ::starling::transport::Recycled<T>::allocate(n); } \
  static void operator delete(void* p, std::size_t n) {                                    \
    ::starling::transport::Recycled<T>::deallocate(p, n);                                  \
  }

template <typename Map>
class NodeCache {
 public:
  using Key = typename Map::key_type;
  using Value = typename Map::mapped_type;

  // The value at `key`, inserted (default-constructed, or a kept node's emptied value) if absent.
  Value& at(Map& map, const Key& key) {
    if (auto it = map.find(key); it != map.end()) return it->second;
    if (kept_.empty()) return map.try_emplace(key).first->second;
    typename Map::node_type node = std::move(kept_.back());
    kept_.pop_back();
    node.key() = key;
    return map.insert(std::move(node)).position->second;
  }

  // Erases `it` and keeps its node; `empty(value)` leaves the kept value holding nothing the
  // caller's objects need back (a callback, a buffer). Returns the next iterator.
  template <typename Empty>
  typename Map::iterator erase(Map& map, typename Map::iterator it, Empty&& empty) {
    auto next = std::next(it);
    typename Map::node_type node = map.extract(it);
    empty(node.mapped());
    if (kept_.size() < kKeep) {
      if (kept_.capacity() == 0) kept_.reserve(kKeep);
      kept_.push_back(std::move(node));
    }
    return next;
  }

 private:
  static constexpr std::size_t kKeep = 64;
  std::vector<typename Map::node_type> kept_;
};

}  // namespace starling::transport
