// The driver loader and the RAII owners of cuda/driver.h.
#include "cuda/driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <sstream>

#include "cuda/driver_api.h"

namespace starling::cuda {

struct DriverLoader {
  // The Driver, or why there is none; computed once.
  static const core::Result<const Driver*>& instance() {
    static const core::Result<const Driver*> loaded = load();
    return loaded;
  }

  static core::Result<const Driver*> load() {
    const char* env = std::getenv("STARLING_CUDA_DRIVER");
    const std::string path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      return core::unavailable("no CUDA driver: cannot load " + path + " (" +
                               (why != nullptr ? why : "unknown reason") +
                               "); the GPU path needs NVIDIA's driver, not the CUDA Toolkit");
    }
    auto* driver = new Driver();  // lives as long as the process, as the library does
    driver->fn_ = std::make_unique<api::Functions>();
    api::Functions& f = *driver->fn_;
    std::string missing;
    // The first of `names` that the library exports.
    auto bind = [&](auto& slot, std::initializer_list<const char*> names) {
      for (const char* n : names) {
        if (void* p = dlsym(lib, n)) {
          slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(p);
          return;
        }
      }
      missing += std::string(missing.empty() ? "" : ", ") + *names.begin();
    };
    bind(f.cuInit, {"cuInit"});
    bind(f.cuDriverGetVersion, {"cuDriverGetVersion"});
    bind(f.cuGetErrorName, {"cuGetErrorName"});
    bind(f.cuGetErrorString, {"cuGetErrorString"});
    bind(f.cuDeviceGetCount, {"cuDeviceGetCount"});
    bind(f.cuDeviceGet, {"cuDeviceGet"});
    bind(f.cuDeviceGetName, {"cuDeviceGetName"});
    bind(f.cuDeviceGetAttribute, {"cuDeviceGetAttribute"});
    bind(f.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
    bind(f.cuDevicePrimaryCtxRelease,
         {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"});
    bind(f.cuCtxPushCurrent, {"cuCtxPushCurrent_v2"});
    bind(f.cuCtxPopCurrent, {"cuCtxPopCurrent_v2"});
    bind(f.cuCtxSynchronize, {"cuCtxSynchronize"});
    bind(f.cuCtxGetCurrent, {"cuCtxGetCurrent"});
    bind(f.cuModuleLoadData, {"cuModuleLoadData"});
    bind(f.cuModuleUnload, {"cuModuleUnload"});
    bind(f.cuModuleGetFunction, {"cuModuleGetFunction"});
    bind(f.cuMemAlloc, {"cuMemAlloc_v2"});
    bind(f.cuMemFree, {"cuMemFree_v2"});
    bind(f.cuMemAllocHost, {"cuMemAllocHost_v2"});
    bind(f.cuMemFreeHost, {"cuMemFreeHost"});
    bind(f.cuMemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"});
    bind(f.cuMemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"});
    bind(f.cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"});
    bind(f.cuMemsetD8Async, {"cuMemsetD8Async"});
    bind(f.cuLaunchKernel, {"cuLaunchKernel"});
    bind(f.cuStreamCreate, {"cuStreamCreate"});
    bind(f.cuStreamDestroy, {"cuStreamDestroy_v2"});
    bind(f.cuStreamSynchronize, {"cuStreamSynchronize"});
    bind(f.cuEventCreate, {"cuEventCreate"});
    bind(f.cuEventDestroy, {"cuEventDestroy_v2"});
    bind(f.cuEventRecord, {"cuEventRecord"});
    bind(f.cuEventSynchronize, {"cuEventSynchronize"});
    bind(f.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
    bind(f.cuStreamWaitEvent, {"cuStreamWaitEvent"});
    bind(f.cuPointerGetAttribute, {"cuPointerGetAttribute"});
    if (!missing.empty()) {
      delete driver;
      return core::unavailable(path + " lacks " + missing +
                               ": a CUDA driver older than Starling supports");
    }
    STARLING_RETURN_IF_ERROR(driver->check(f.cuInit(0), "cuInit"));
    STARLING_RETURN_IF_ERROR(
        driver->check(f.cuDriverGetVersion(&driver->version_), "cuDriverGetVersion"));
    return static_cast<const Driver*>(driver);
  }
};

core::Result<const Driver*> Driver::get() { return DriverLoader::instance(); }

core::Status Driver::check(int result, std::string_view what) const {
  if (result == api::kSuccess) return core::Status::ok();
  const char* name = nullptr;
  const char* text = nullptr;
  if (fn_->cuGetErrorName == nullptr || fn_->cuGetErrorName(result, &name) != api::kSuccess)
    name = nullptr;
  if (fn_->cuGetErrorString == nullptr || fn_->cuGetErrorString(result, &text) != api::kSuccess)
    text = nullptr;
  std::string m = std::string(what) + " failed: " + (name != nullptr ? name : "CUDA error") + " (" +
                  std::to_string(result) + ")";
  if (text != nullptr) m += ": " + std::string(text);
  return core::unavailable(std::move(m));
}

namespace {
const Driver& driver() { return *Driver::get().value(); }  // only after a Gpu opened

void* currentContext() {
  api::CUcontext ctx = nullptr;
  (void)driver().fn().cuCtxGetCurrent(&ctx);
  return ctx;
}

// Frees with the context that allocated, current for the call (a destructor may run anywhere).
template <typename Free>
void freeIn(void* context, Free&& free) {
  const api::Functions& f = driver().fn();
  const bool push = context != nullptr &&
                    f.cuCtxPushCurrent(static_cast<api::CUcontext>(context)) == api::kSuccess;
  free();
  if (push) {
    api::CUcontext previous = nullptr;
    (void)f.cuCtxPopCurrent(&previous);
  }
}
}  // namespace

// ---------------------------------------------------------------------------------------------

core::Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  STARLING_RETURN_IF_ERROR(driver().check(driver().fn().cuMemAlloc(&b.ptr_, bytes),
                                          "cuMemAlloc of " + std::to_string(bytes) + " bytes"));
  b.bytes_ = bytes;
  b.context_ = currentContext();
  return b;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    this->~DeviceBuffer();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    context_ = o.context_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) freeIn(context_, [&] { (void)driver().fn().cuMemFree(ptr_); });
  ptr_ = 0;
}

core::Result<PinnedBuffer> PinnedBuffer::allocate(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  STARLING_RETURN_IF_ERROR(driver().check(driver().fn().cuMemAllocHost(&b.ptr_, bytes),
                                          "cuMemAllocHost of " + std::to_string(bytes) + " bytes"));
  b.bytes_ = bytes;
  b.context_ = currentContext();
  return b;
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    this->~PinnedBuffer();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    context_ = o.context_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) freeIn(context_, [&] { (void)driver().fn().cuMemFreeHost(ptr_); });
  ptr_ = nullptr;
}

// ---------------------------------------------------------------------------------------------

Gpu::Scope::Scope(const Gpu& gpu) {
  (void)driver().fn().cuCtxPushCurrent(static_cast<api::CUcontext>(gpu.context_));
}
Gpu::Scope::~Scope() {
  api::CUcontext previous = nullptr;
  (void)driver().fn().cuCtxPopCurrent(&previous);
}

core::Result<std::unique_ptr<Gpu>> Gpu::open(int ordinal) {
  auto loaded = Driver::get();
  if (!loaded) return loaded.status();
  const Driver& d = **loaded;
  const api::Functions& f = d.fn();
  int count = 0;
  STARLING_RETURN_IF_ERROR(d.check(f.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (ordinal < 0 || ordinal >= count) {
    return core::unavailable("no CUDA device " + std::to_string(ordinal) + ": the driver sees " +
                             std::to_string(count));
  }
  std::unique_ptr<Gpu> gpu(new Gpu());
  gpu->driver_ = &d;
  STARLING_RETURN_IF_ERROR(d.check(f.cuDeviceGet(&gpu->device_, ordinal), "cuDeviceGet"));
  char name[256] = {};
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuDeviceGetName(name, sizeof(name) - 1, gpu->device_), "cuDeviceGetName"));
  gpu->name_ = name;
  int major = 0, minor = 0;
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuDeviceGetAttribute(&major, api::kAttributeComputeCapabilityMajor, gpu->device_),
              "cuDeviceGetAttribute"));
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuDeviceGetAttribute(&minor, api::kAttributeComputeCapabilityMinor, gpu->device_),
              "cuDeviceGetAttribute"));
  gpu->cc_ = 10 * major + minor;
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuDeviceGetAttribute(&gpu->sms_, api::kAttributeMultiprocessorCount, gpu->device_),
              "cuDeviceGetAttribute"));
  api::CUcontext ctx = nullptr;
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuDevicePrimaryCtxRetain(&ctx, gpu->device_), "cuDevicePrimaryCtxRetain"));
  gpu->context_ = ctx;
  Scope scope(*gpu);
  // The kernels: the build's PTX, or the file STARLING_CUDA_PTX names (nvcc's, on a GPU machine).
  std::string ptx = kKernelsPtx;
  gpu->ptxSource_ = kKernelsPtxCompiler;
  if (const char* file = std::getenv("STARLING_CUDA_PTX"); file != nullptr && *file != '\0') {
    std::ifstream in(file, std::ios::binary);
    if (!in) return core::notFound(std::string("STARLING_CUDA_PTX: cannot read ") + file);
    std::ostringstream text;
    text << in.rdbuf();
    ptx = text.str();
    gpu->ptxSource_ = file;
  }
  api::CUmodule module = nullptr;
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuModuleLoadData(&module, ptx.c_str()), "cuModuleLoadData of the kernels' PTX"));
  gpu->module_ = module;
  api::CUstream stream = nullptr;
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuStreamCreate(&stream, api::kStreamNonBlocking), "cuStreamCreate"));
  gpu->stream_ = stream;
  api::CUevent start = nullptr, stop = nullptr;
  STARLING_RETURN_IF_ERROR(d.check(f.cuEventCreate(&start, api::kEventDefault), "cuEventCreate"));
  gpu->start_ = start;
  STARLING_RETURN_IF_ERROR(d.check(f.cuEventCreate(&stop, api::kEventDefault), "cuEventCreate"));
  gpu->stop_ = stop;
  api::CUevent order = nullptr;
  STARLING_RETURN_IF_ERROR(
      d.check(f.cuEventCreate(&order, api::kEventDisableTiming), "cuEventCreate"));
  gpu->order_ = order;
  return gpu;
}

Gpu::~Gpu() {
  if (context_ == nullptr) return;
  const api::Functions& f = driver_->fn();
  {
    Scope scope(*this);
    if (stream_ != nullptr) (void)f.cuStreamSynchronize(static_cast<api::CUstream>(stream_));
    if (start_ != nullptr) (void)f.cuEventDestroy(static_cast<api::CUevent>(start_));
    if (stop_ != nullptr) (void)f.cuEventDestroy(static_cast<api::CUevent>(stop_));
    if (order_ != nullptr) (void)f.cuEventDestroy(static_cast<api::CUevent>(order_));
    if (stream_ != nullptr) (void)f.cuStreamDestroy(static_cast<api::CUstream>(stream_));
    if (module_ != nullptr) (void)f.cuModuleUnload(static_cast<api::CUmodule>(module_));
  }
  (void)f.cuDevicePrimaryCtxRelease(device_);
}

core::Result<void*> Gpu::function(const char* name) {
  api::CUfunction fn = nullptr;
  STARLING_RETURN_IF_ERROR(driver_->check(
      driver_->fn().cuModuleGetFunction(&fn, static_cast<api::CUmodule>(module_), name),
      std::string("cuModuleGetFunction(") + name + ")"));
  return static_cast<void*>(fn);
}

core::Status Gpu::launchBlocks(const char* name, uint64_t blocks, void** params, unsigned block) {
  auto fn = function(name);
  if (!fn) return fn.status();
  if (blocks == 0) return core::Status::ok();
  if (blocks > 0x7fffffffu) return core::invalidArgument(std::string(name) + ": too many blocks");
  return driver_->check(driver_->fn().cuLaunchKernel(
                            static_cast<api::CUfunction>(*fn), static_cast<unsigned>(blocks), 1, 1,
                            block, 1, 1, 0, static_cast<api::CUstream>(stream_), params, nullptr),
                        std::string("cuLaunchKernel(") + name + ")");
}

core::Status Gpu::launch(const char* name, uint64_t threads, void** params, unsigned block) {
  // A grid-stride loop needs no more than a few waves: 32 blocks of `block` per multiprocessor.
  const uint64_t cap = static_cast<uint64_t>(std::max(sms_, 1)) * 32;
  const uint64_t blocks = std::min<uint64_t>((threads + block - 1) / block, cap);
  Scope scope(*this);
  return launchBlocks(name, std::max<uint64_t>(blocks, 1), params, block);
}

core::Status Gpu::copyToDevice(DevicePtr to, const void* from, size_t bytes) {
  Scope scope(*this);
  return driver_->check(
      driver_->fn().cuMemcpyHtoDAsync(to, from, bytes, static_cast<api::CUstream>(stream_)),
      "cuMemcpyHtoDAsync");
}
core::Status Gpu::copyToHost(void* to, DevicePtr from, size_t bytes) {
  Scope scope(*this);
  return driver_->check(
      driver_->fn().cuMemcpyDtoHAsync(to, from, bytes, static_cast<api::CUstream>(stream_)),
      "cuMemcpyDtoHAsync");
}
core::Status Gpu::copyOnDevice(DevicePtr to, DevicePtr from, size_t bytes) {
  Scope scope(*this);
  return driver_->check(
      driver_->fn().cuMemcpyDtoDAsync(to, from, bytes, static_cast<api::CUstream>(stream_)),
      "cuMemcpyDtoDAsync");
}
core::Status Gpu::zero(DevicePtr to, size_t bytes) {
  Scope scope(*this);
  return driver_->check(
      driver_->fn().cuMemsetD8Async(to, 0, bytes, static_cast<api::CUstream>(stream_)),
      "cuMemsetD8Async");
}
core::Status Gpu::sync() {
  Scope scope(*this);
  return driver_->check(driver_->fn().cuStreamSynchronize(static_cast<api::CUstream>(stream_)),
                        "cuStreamSynchronize");
}
core::Status Gpu::after(uint64_t stream) {
  Scope scope(*this);
  const api::Functions& f = driver_->fn();
  auto* caller = reinterpret_cast<api::CUstream>(stream);
  STARLING_RETURN_IF_ERROR(
      driver_->check(f.cuEventRecord(static_cast<api::CUevent>(order_), caller),
                     "cuEventRecord on the caller's stream"));
  return driver_->check(f.cuStreamWaitEvent(static_cast<api::CUstream>(stream_),
                                            static_cast<api::CUevent>(order_), 0),
                        "cuStreamWaitEvent");
}

core::Status Gpu::checkPointer(DevicePtr ptr, const std::string& what) const {
  Scope scope(*this);
  int ordinal = -1;
  const int got = driver_->fn().cuPointerGetAttribute(&ordinal, api::kPointerAttributeDeviceOrdinal, ptr);
  if (got != 0) {
    return core::invalidArgument(what + " is not CUDA device memory (" +
                                 driver_->check(got, "cuPointerGetAttribute").message() + ")");
  }
  if (ordinal != device_) {
    return core::invalidArgument(what + " lives on cuda:" + std::to_string(ordinal) +
                                 ", not on cuda:" + std::to_string(device_));
  }
  return core::Status::ok();
}

core::Status Gpu::recordStart() {
  Scope scope(*this);
  return driver_->check(driver_->fn().cuEventRecord(static_cast<api::CUevent>(start_),
                                                    static_cast<api::CUstream>(stream_)),
                        "cuEventRecord");
}
core::Result<double> Gpu::recordStop() {
  Scope scope(*this);
  const api::Functions& f = driver_->fn();
  STARLING_RETURN_IF_ERROR(driver_->check(
      f.cuEventRecord(static_cast<api::CUevent>(stop_), static_cast<api::CUstream>(stream_)),
      "cuEventRecord"));
  STARLING_RETURN_IF_ERROR(
      driver_->check(f.cuEventSynchronize(static_cast<api::CUevent>(stop_)), "cuEventSynchronize"));
  float ms = 0;
  STARLING_RETURN_IF_ERROR(
      driver_->check(f.cuEventElapsedTime(&ms, static_cast<api::CUevent>(start_),
                                          static_cast<api::CUevent>(stop_)),
                     "cuEventElapsedTime"));
  return static_cast<double>(ms);
}

}  // namespace starling::cuda
