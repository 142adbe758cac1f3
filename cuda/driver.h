// The CUDA driver, loaded at run time (docs/cuda.md). Starling links no CUDA library: the
// driver's libcuda.so.1 is opened with dlopen the first time a GPU is asked for, so every build
// has the CUDA path and a machine without a driver says so (kUnavailable) instead of failing to
// start. Every handle is an RAII owner; every CUresult becomes a Status in one place (check()).
// The context is the device's primary context, the one PyTorch and the CUDA runtime use, so
// device pointers from a framework are valid here and the reverse.
//
// Thread-safety: Driver::get() is safe from any thread; a Gpu (its stream and buffers) belongs
// to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace starling::cuda {

namespace api {
struct Functions;
}

using DevicePtr = unsigned long long;  // CUdeviceptr

// The loaded driver. get() loads it once per process: $STARLING_CUDA_DRIVER if set (tests point
// it at a missing file to check the no-driver path on a GPU machine), else libcuda.so.1.
class Driver {
 public:
  static core::Result<const Driver*> get();
  const api::Functions& fn() const { return *fn_; }
  // kUnavailable naming `what` and the driver's name and text of the error; ok for success.
  core::Status check(int result, std::string_view what) const;
  int version() const { return version_; }  // e.g. 13000 for CUDA 13.0

 private:
  Driver() = default;
  std::unique_ptr<api::Functions> fn_;
  int version_ = 0;
  friend struct DriverLoader;
};

// Device memory, freed on destruction (in the context it was allocated in: allocate() with a
// Gpu::Scope, or inside a Gpu method).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static core::Result<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), context_(o.context_) {
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  DevicePtr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  DevicePtr ptr_ = 0;
  size_t bytes_ = 0;
  void* context_ = nullptr;  // CUcontext it was allocated in, current again to free it
};

// Page-locked host memory (the staging area of frames for the wire), freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static core::Result<PinnedBuffer> allocate(size_t bytes);
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), context_(o.context_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  ~PinnedBuffer();
  std::byte* data() const { return static_cast<std::byte*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  void* context_ = nullptr;
};

// One device: its retained primary context, the loaded kernels (the PTX the build made from
// cuda/kernels.cu), and a stream of its own. Kernels and copies run on that stream in order;
// sync() waits for them. Methods make the context current on the calling thread and restore
// the previous one.
class Gpu {
 public:
  // Device `ordinal`; kUnavailable when there is no driver or no such device, with the reason.
  static core::Result<std::unique_ptr<Gpu>> open(int ordinal = 0);
  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  const std::string& name() const { return name_; }
  int computeCapability() const { return cc_; }  // 90 for sm_90
  int multiprocessors() const { return sms_; }
  // Where the kernels came from: "clang" or "nvcc" PTX (STARLING_CUDA_PTX overrides the PTX
  // the build embedded with a file, to run nvcc's on the same program).
  const std::string& ptxSource() const { return ptxSource_; }

  // Launches kernel `name` (C linkage, cuda/kernels.cu) over `threads` threads in blocks of
  // `block` (capped at a grid that fills the device several times; the kernels stride).
  core::Status launch(const char* name, uint64_t threads, void** params, unsigned block = 256);
  core::Status launchBlocks(const char* name, uint64_t blocks, void** params, unsigned block = 256);
  core::Status copyToDevice(DevicePtr to, const void* from, size_t bytes);
  core::Status copyToHost(void* to, DevicePtr from, size_t bytes);
  core::Status copyOnDevice(DevicePtr to, DevicePtr from, size_t bytes);
  core::Status zero(DevicePtr to, size_t bytes);
  core::Status sync();
  // Orders this Gpu's stream after the work enqueued so far on the caller's `stream` (a CUstream
  // as an integer, PyTorch's torch.cuda.current_stream().cuda_stream; 0 is the legacy default
  // stream): an event recorded there that this stream waits for. The host does not wait.
  core::Status after(uint64_t stream);
  // This Gpu's own stream (a CUstream as an integer), for a producer that orders its work
  // before it itself (DLPack's __dlpack__(stream=...)).
  uint64_t streamHandle() const { return reinterpret_cast<uint64_t>(stream_); }
  // kInvalidArgument naming `what` unless `ptr` is memory of this device (allocated in a CUDA
  // context on it: cudaMalloc, a framework's allocator, managed memory).
  core::Status checkPointer(DevicePtr ptr, const std::string& what) const;
  // Milliseconds that `work` takes on the stream, timed with events (for the benchmarks).
  template <typename Work>
  core::Result<double> time(Work&& work);

  // Makes the context current for a scope (for buffers allocated outside a Gpu method).
  class Scope {
   public:
    explicit Scope(const Gpu& gpu);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

 private:
  Gpu() = default;
  core::Result<void*> function(const char* name);
  core::Status recordStart();
  core::Result<double> recordStop();

  const Driver* driver_ = nullptr;
  int device_ = 0;
  void* context_ = nullptr;  // CUcontext
  void* module_ = nullptr;   // CUmodule
  void* stream_ = nullptr;   // CUstream
  void* start_ = nullptr;    // CUevent
  void* stop_ = nullptr;     // CUevent
  void* order_ = nullptr;    // CUevent of after()
  std::string name_;
  std::string ptxSource_;
  int cc_ = 0;
  int sms_ = 0;
};

template <typename Work>
core::Result<double> Gpu::time(Work&& work) {
  STARLING_RETURN_IF_ERROR(recordStart());
  STARLING_RETURN_IF_ERROR(work());
  return recordStop();
}

// The PTX that the build compiled from cuda/kernels.cu (ptx_embed.cc, generated), and by whom.
extern const char kKernelsPtx[];
extern const char kKernelsPtxCompiler[];

}  // namespace starling::cuda
