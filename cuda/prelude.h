// What a kernel file needs from CUDA when it is compiled without the CUDA Toolkit's headers
// (clang -x cuda -nocudainc, the default build): the function attributes and the built-in index
// variables, both from clang itself. Under nvcc, or clang with the toolkit's headers, those are
// already defined and this adds nothing else. Device code only; the host side never includes it.
#pragma once

#if defined(__clang__) && defined(__CUDA__) && !defined(__NVCC__) && !defined(__CUDACC_RTC__) && \
    !defined(__CUDA_RUNTIME_H__)
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#include <__clang_cuda_builtin_vars.h>
#endif

#if defined(__NVCC__) || defined(__CUDA_RUNTIME_H__)
#define STARLING_SYNCTHREADS() __syncthreads()
#else
#define STARLING_SYNCTHREADS() __nvvm_bar_sync(0)
#endif
