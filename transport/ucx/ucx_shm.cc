// Shared-memory frame segments: memfd staging on the sender, sealed read-only mappings on the
// receiver. See ucx_shm.h.
#include "transport/ucx/ucx_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

namespace starling::transport::ucx::detail {
namespace {

constexpr uint64_t kSegmentMagic = 0x474553534C525453ULL;  // "STRLSSEG"
// A segment holds one frame; frames are at most 2^36 bytes (the transport's message limit).
constexpr size_t kMaxSegmentBytes = (size_t{1} << 36) + (size_t{1} << 20);
constexpr size_t kPopulateLimitBytes = size_t{256} << 20;

// Header: magic (8), serial (8), token (16), zero to 64 bytes.
void writeHeader(std::byte* base, const Token& token, uint64_t serial) {
  std::memset(base, 0, kSegmentHeaderBytes);
  putLe(base, kSegmentMagic, 8);
  putLe(base + 8, serial, 8);
  std::memcpy(base + 16, token.data(), token.size());
}

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

size_t pageRound(size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

core::Result<ShmIdentity> makeIdentity() {
  ShmIdentity id;
  id.pid = static_cast<uint32_t>(::getpid());
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (!(in >> text)) return core::ioError("cannot read /proc/sys/kernel/random/boot_id");
  size_t n = 0;
  for (size_t i = 0; i + 1 < text.size() && n < id.bootId.size();) {
    if (text[i] == '-') {
      ++i;
      continue;
    }
    id.bootId[n++] = static_cast<uint8_t>(std::stoul(text.substr(i, 2), nullptr, 16));
    i += 2;
  }
  if (n != id.bootId.size()) return core::ioError("malformed boot id \"" + text + "\"");
  std::random_device rd;
  for (auto& b : id.token) b = static_cast<uint8_t>(rd());
  return id;
}

// ---- sender --------------------------------------------------------------------------------

OutSegment::~OutSegment() {
  if (base) ::munmap(base, kSegmentHeaderBytes + capacity);
  if (fd >= 0) ::close(fd);
}

Outbox::~Outbox() {
  // A frame written in place holds its segment through its lease; break that cycle. Segments
  // still lent stay mapped until their last frame is gone.
  for (auto& s : segments_) s->holder.reset();
}

core::Result<std::shared_ptr<OutSegment>> Outbox::create(size_t capacity) {
  const size_t total = pageRound(kSegmentHeaderBytes + capacity);
  auto seg = std::make_shared<OutSegment>();
  seg->fd = ::memfd_create("starling-frames", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (seg->fd < 0) return core::ioError(errnoText("memfd_create"));
  auto fail = [](const char* what) { return core::ioError(errnoText(what)); };
  if (::ftruncate(seg->fd, static_cast<off_t>(total)) != 0) return fail("ftruncate");
  // Sealed: no process (this one included) can shrink the file under a reader's mapping.
  if (::fcntl(seg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail("F_ADD_SEALS");
  }
  // Populated now, in one call, rather than by a page fault per page on the first frame.
  void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, seg->fd, 0);
  if (p == MAP_FAILED) return fail("mmap");
  seg->base = static_cast<std::byte*>(p);
  seg->capacity = total - kSegmentHeaderBytes;  // the destructor unmaps this much
  seg->serial = nextSerial_++;
  writeHeader(seg->base, id_.token, seg->serial);
  return seg;
}

core::Status Outbox::createProbe() {
  auto probe = create(0);
  if (!probe) return probe.status();
  probe_ = std::move(*probe);
  return core::Status::ok();
}

OutSegment* Outbox::acquire(size_t size) {
  OutSegment* best = nullptr;
  for (auto& s : segments_) {
    if (s->isFree() && s->capacity >= size && (!best || s->capacity < best->capacity)) {
      best = s.get();
    }
  }
  if (best) return best;
  if (segments_.size() >= maxSegments_) {
    // Replace the smallest free segment that is too small, if any.
    auto victim = segments_.end();
    for (auto it = segments_.begin(); it != segments_.end(); ++it) {
      if ((*it)->isFree() && (victim == segments_.end() || (*it)->capacity < (*victim)->capacity)) {
        victim = it;
      }
    }
    if (victim == segments_.end()) return nullptr;
    segments_.erase(victim);  // unmapped by its destructor
  }
  auto fresh = create(size);
  if (!fresh) return nullptr;
  segments_.push_back(std::move(*fresh));
  return segments_.back().get();
}

std::shared_ptr<OutSegment> Outbox::lend(size_t size) {
  OutSegment* seg = acquire(size);
  if (seg == nullptr) return nullptr;
  seg->lent = true;
  for (auto& s : segments_) {
    if (s.get() == seg) return s;
  }
  return nullptr;  // not reached: acquire returns one of segments_
}

OutSegment* Outbox::findLent(const std::byte* data) {
  for (auto& s : segments_) {
    if (s->lent && s->data() == data) return s.get();
  }
  return nullptr;
}

void Outbox::dropReader(OutSegment& s, std::vector<int>::iterator it) {
  s.readers.erase(it);
  // The last reader is done with a frame written in place: let it go (which may end its lease).
  if (s.readers.empty()) s.holder.reset();
}

bool Outbox::release(uint64_t serial, int reader) {
  for (auto& s : segments_) {
    if (s->serial != serial) continue;
    auto it = std::find(s->readers.begin(), s->readers.end(), reader);
    if (it == s->readers.end()) return false;
    dropReader(*s, it);
    return true;
  }
  return false;
}

OutSegment* Outbox::find(uint64_t serial) {
  for (auto& s : segments_) {
    if (s->serial == serial) return s.get();
  }
  return nullptr;
}

bool Outbox::hasReader(int reader) const {
  for (const auto& s : segments_) {
    if (std::find(s->readers.begin(), s->readers.end(), reader) != s->readers.end()) return true;
  }
  return false;
}

void Outbox::forget(int reader) {
  for (auto& s : segments_) {
    auto it = std::find(s->readers.begin(), s->readers.end(), reader);
    if (it != s->readers.end()) dropReader(*s, it);
  }
}

// ---- receiver ------------------------------------------------------------------------------

MappedSegment::~MappedSegment() {
  ::munmap(const_cast<std::byte*>(base_), size_);
}

namespace {

// Opens segment `fd` of process `pid` (through /proc) and checks that it is a sealed regular file
// of a plausible size; returns the open descriptor (closed by the caller) and the size.
core::Result<int> openSealed(uint32_t pid, int32_t fd, bool writable, size_t& size,
                             std::string& path) {
  if (pid == 0 || fd < 0) return core::corruption("no such segment");
  path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  struct stat before {};
  if (::stat(path.c_str(), &before) != 0) return core::unavailable(errnoText(("stat " + path).c_str()));
  if (!S_ISREG(before.st_mode)) return core::corruption(path + " is not a regular file");
  const int local = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK |
                                             O_NOCTTY);
  if (local < 0) return core::unavailable(errnoText(("open " + path).c_str()));
  auto fail = [local](core::Status st) {
    ::close(local);
    return st;
  };
  const int seals = ::fcntl(local, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return fail(core::corruption(path + " is not a sealed segment"));
  }
  struct stat st {};
  if (::fstat(local, &st) != 0) return fail(core::unavailable(errnoText("fstat")));
  if (!S_ISREG(st.st_mode) || st.st_ino != before.st_ino || st.st_dev != before.st_dev) {
    return fail(core::corruption(path + " changed while it was opened"));
  }
  size = static_cast<size_t>(st.st_size);
  return local;
}

}  // namespace

// ---- small-frame rings -------------------------------------------------------------------

namespace {

// A slot's state: free (the sender may write it), full (written, not yet read), held (read: the
// receiver still has a view of it). Only the sender makes a slot full, only the receiver makes it
// held or free.
constexpr uint32_t kSlotFree = 0;
constexpr uint32_t kSlotFull = 1;
constexpr uint32_t kSlotHeld = 2;

// Slot header: state (4), length (4), sequence number (8), round (8), channel (4).
size_t ringBytes(size_t slotBytes) {
  return kSegmentHeaderBytes + kRingControlBytes + kRingSlots * (kRingSlotHeaderBytes + slotBytes);
}
std::byte* slotAt(std::byte* base, size_t slotBytes, uint64_t seq) {
  return base + kSegmentHeaderBytes + kRingControlBytes +
         (seq % kRingSlots) * (kRingSlotHeaderBytes + slotBytes);
}
std::atomic_ref<uint32_t> word(std::byte* p) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(p));
}

}  // namespace

core::Result<std::unique_ptr<OutRing>> OutRing::create(const Token& token, size_t slotBytes) {
  if (slotBytes == 0 || slotBytes % 64 != 0 || slotBytes > kRingMaxSlotBytes) {
    return core::invalidArgument("ring slots of " + std::to_string(slotBytes) + " bytes");
  }
  std::unique_ptr<OutRing> ring(new OutRing());
  ring->slotBytes_ = slotBytes;
  ring->total_ = pageRound(ringBytes(slotBytes));
  ring->fd_ = ::memfd_create("starling-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (ring->fd_ < 0) return core::ioError(errnoText("memfd_create"));
  auto fail = [](const char* what) { return core::ioError(errnoText(what)); };
  if (::ftruncate(ring->fd_, static_cast<off_t>(ring->total_)) != 0) return fail("ftruncate");
  if (::fcntl(ring->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail("F_ADD_SEALS");
  }
  void* p = ::mmap(nullptr, ring->total_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   ring->fd_, 0);
  if (p == MAP_FAILED) return fail("mmap");
  ring->base_ = static_cast<std::byte*>(p);  // zero: every slot free, the receiver awake
  writeHeader(ring->base_, token, 0);
  putLe(ring->base_ + 32, slotBytes, 8);  // the receiver lays the ring out from this
  return ring;
}

OutRing::~OutRing() {
  if (base_) ::munmap(base_, total_);
  if (fd_ >= 0) ::close(fd_);
}

bool OutRing::push(const Tag& tag, std::span<const std::byte> frame, bool& wake) {
  wake = false;
  if (frame.size() > slotBytes_) return false;
  std::byte* slot = slotAt(base_, slotBytes_, head_);
  if (word(slot).load(std::memory_order_acquire) != kSlotFree) return false;
  putLe(slot + 4, frame.size(), 4);
  putLe(slot + 8, head_, 8);
  putLe(slot + 16, tag.round, 8);
  putLe(slot + 24, tag.channel, 4);
  if (!frame.empty()) std::memcpy(slot + kRingSlotHeaderBytes, frame.data(), frame.size());
  word(slot).store(kSlotFull, std::memory_order_release);
  ++head_;
  // Either the receiver sees this slot full when it looks once more before sleeping, or this
  // sees its sleeping word and rings: both sides store, fence, then load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  wake = word(base_ + kSegmentHeaderBytes).load(std::memory_order_relaxed) != 0;
  return true;
}

MappedRing::~MappedRing() { ::munmap(base_, size_); }

MappedRing::Next MappedRing::next(Tag& tag, std::span<const std::byte>& bytes, uint32_t*& state,
                                  std::string& why) {
  std::byte* slot = slotAt(base_, slotBytes_, cursor_);
  if (word(slot).load(std::memory_order_acquire) != kSlotFull) return Next::kEmpty;
  const uint64_t length = getLe(slot + 4, 4);
  const uint64_t seq = getLe(slot + 8, 8);
  if (seq != cursor_ || length > slotBytes_) {
    why = "ring slot holds frame " + std::to_string(seq) + " of " + std::to_string(length) +
          " bytes where frame " + std::to_string(cursor_) + " of at most " +
          std::to_string(slotBytes_) + " was due";
    return Next::kCorrupt;
  }
  tag = Tag{getLe(slot + 16, 8), static_cast<uint32_t>(getLe(slot + 24, 4))};
  bytes = std::span<const std::byte>(slot + kRingSlotHeaderBytes, length);
  state = reinterpret_cast<uint32_t*>(slot);
  word(slot).store(kSlotHeld, std::memory_order_relaxed);
  ++cursor_;
  return Next::kFrame;
}

void MappedRing::setSleeping(bool sleeping) {
  word(base_ + kSegmentHeaderBytes).store(sleeping ? 1 : 0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void MappedRing::freeSlot(uint32_t* state) {
  std::atomic_ref<uint32_t>(*state).store(kSlotFree, std::memory_order_release);
}

core::Result<std::shared_ptr<MappedRing>> mapRing(uint32_t pid, int32_t fd, const Token& token) {
  size_t size = 0;
  std::string path;
  auto opened = openSealed(pid, fd, /*writable=*/true, size, path);
  if (!opened) return opened.status();
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{*opened};
  if (size < kSegmentHeaderBytes || size > pageRound(ringBytes(kRingMaxSlotBytes))) {
    return core::corruption(path + " is not the size of a ring");
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, *opened, 0);
  if (p == MAP_FAILED) return core::unavailable(errnoText("mmap"));
  auto* base = static_cast<std::byte*>(p);
  // The slot size is read once, here, and checked against the sealed size: the sender cannot
  // change this ring's layout afterwards.
  const uint64_t slotBytes = getLe(base + 32, 8);
  auto ring = std::make_shared<MappedRing>(base, size, slotBytes);
  if (getLe(base, 8) != kSegmentMagic || getLe(base + 8, 8) != 0 ||
      std::memcmp(base + 16, token.data(), token.size()) != 0) {
    return core::corruption(path + " is not a ring of that sender");
  }
  if (slotBytes == 0 || slotBytes % 64 != 0 || slotBytes > kRingMaxSlotBytes ||
      ringBytes(slotBytes) > size) {
    return core::corruption(path + " claims ring slots of " + std::to_string(slotBytes) +
                            " bytes in " + std::to_string(size));
  }
  return ring;
}

core::Result<std::shared_ptr<const MappedSegment>> mapSegment(uint32_t pid, int32_t fd,
                                                              const Token& token, uint64_t serial) {
  // Only a regular file is opened at all (openSealed): a descriptor naming a FIFO or a device
  // would block in open() or have side effects.
  size_t size = 0;
  std::string path;
  auto opened = openSealed(pid, fd, /*writable=*/false, size, path);
  if (!opened) return opened.status();
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{*opened};
  const int local = *opened;
  if (size < kSegmentHeaderBytes) return core::corruption(path + " is too small for a segment");
  if (size > kMaxSegmentBytes) return core::corruption(path + " is larger than any frame");
  // Populated now (one call instead of a fault per page) unless it is huge: the size is the
  // neighbour's choice, and only the frame's own bytes are ever read.
  const int populate = size <= kPopulateLimitBytes ? MAP_POPULATE : 0;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | populate, local, 0);
  if (p == MAP_FAILED) return core::unavailable(errnoText("mmap"));
  auto seg = std::make_shared<const MappedSegment>(static_cast<const std::byte*>(p), size);
  const std::byte* h = seg->base();
  if (getLe(h, 8) != kSegmentMagic || getLe(h + 8, 8) != serial ||
      std::memcmp(h + 16, token.data(), token.size()) != 0) {
    return core::corruption(path + " is not segment " + std::to_string(serial) + " of that sender");
  }
  return seg;
}

std::shared_ptr<const MappedSegment> SegmentCache::find(uint64_t serial) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first == serial) {
      auto hit = *it;
      entries_.erase(it);
      entries_.push_back(hit);
      return hit.second;
    }
  }
  return nullptr;
}

void SegmentCache::insert(uint64_t serial, std::shared_ptr<const MappedSegment> segment) {
  entries_.emplace_back(serial, std::move(segment));
  while (entries_.size() > max_) entries_.pop_front();
}

}  // namespace starling::transport::ucx::detail
