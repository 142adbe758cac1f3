// BufferPool: reuses message buffers once nobody holds them any more.
//
// Large frames (megabytes) allocated fresh every round cost more than the bytes they carry: each
// new buffer is mapped, page-faulted and zero-filled, and unmapped when freed. A pool hands back a
// buffer whose last user has released it (use_count() == 1), resized without clearing when the
// size is unchanged. Thread-safety: none; one pool belongs to one node or transport.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace starling::transport {

class BufferPool {
 public:
  explicit BufferPool(size_t maxBuffers = 16) : maxBuffers_(maxBuffers) {}

  // A buffer of exactly `size` bytes that no one else holds. Its contents are unspecified when it
  // is reused (callers overwrite it), zero when it is new.
  std::shared_ptr<Bytes> acquire(size_t size) {
    for (auto& b : buffers_) {
      if (b.use_count() == 1 && b->capacity() >= size) {
        b->resize(size);
        return b;
      }
    }
    auto fresh = std::make_shared<Bytes>(size);
    if (buffers_.size() < maxBuffers_) {
      buffers_.push_back(fresh);
    } else {
      // Replace a free buffer that is too small, if there is one; otherwise do not pool.
      for (auto& b : buffers_) {
        if (b.use_count() == 1) {
          b = fresh;
          break;
        }
      }
    }
    return fresh;
  }

 private:
  size_t maxBuffers_;
  std::vector<std::shared_ptr<Bytes>> buffers_;
};

}  // namespace starling::transport
