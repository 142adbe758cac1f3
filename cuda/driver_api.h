// The CUDA driver API entry points Starling uses, declared here with the signatures the CUDA
// Driver API reference documents, so that the host side builds without the CUDA Toolkit: they
// are looked up at run time in the driver's own libcuda.so.1 (cuda/driver.cc), never linked.
// Only cuda/driver.cc includes this file. Symbol names carry the `_v2` suffix where the driver
// exports the 64-bit version under it (as cuda.h's macros select).
#pragma once

#include <cstddef>
#include <cstdint>

namespace starling::cuda::api {

using CUresult = int;  // CUDA_SUCCESS = 0
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr int kAttributeMultiprocessorCount =
    16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
inline constexpr int kAttributeComputeCapabilityMajor = 75;
inline constexpr int kAttributeComputeCapabilityMinor = 76;
inline constexpr unsigned kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDefault = 0x0;
inline constexpr unsigned kEventDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING
inline constexpr int kPointerAttributeMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr int kPointerAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
inline constexpr unsigned kMemoryTypeDevice = 2;          // CU_MEMORYTYPE_DEVICE

// One table of the functions, filled by dlsym.
struct Functions {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);  // cuDevicePrimaryCtxRelease_v2
  CUresult (*cuCtxPushCurrent)(CUcontext context);         // cuCtxPushCurrent_v2
  CUresult (*cuCtxPopCurrent)(CUcontext* context);         // cuCtxPopCurrent_v2
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuCtxGetCurrent)(CUcontext* context);
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);  // _v2
  CUresult (*cuMemFree)(CUdeviceptr ptr);                  // _v2
  CUresult (*cuMemAllocHost)(void** ptr, size_t bytes);    // _v2
  CUresult (*cuMemFreeHost)(void* ptr);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr to, const void* from, size_t bytes,
                                CUstream stream);  // _v2
  CUresult (*cuMemcpyDtoHAsync)(void* to, CUdeviceptr from, size_t bytes,
                                CUstream stream);  // _v2
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr to, CUdeviceptr from, size_t bytes,
                                CUstream stream);  // _v2
  CUresult (*cuMemsetD8Async)(CUdeviceptr to, unsigned char value, size_t count, CUstream stream);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned gridX, unsigned gridY, unsigned gridZ,
                             unsigned blockX, unsigned blockY, unsigned blockZ,
                             unsigned sharedBytes, CUstream stream, void** params, void** extra);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);  // _v2
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent event);  // _v2
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
  CUresult (*cuPointerGetAttribute)(void* data, int attribute, CUdeviceptr ptr);
};

}  // namespace starling::cuda::api
