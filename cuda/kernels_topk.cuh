// Part of cuda/kernels.cu, included at its end (one PTX module): top-k's kernels, which use
// its helpers (globalThread, atomicAddU32, ballot, popcount32). Not a header of its own.
#pragma once

// ---------------------------------------------------------------------------------------------
// Top-k (docs/cuda.md "Top-k"): a radix select of the k-th largest magnitude key K in four passes
// of a byte (the host picks each digit from the histogram, cuda/topk_select.h), then a stable
// compaction of the kept elements, in index order, into (index, value) pairs. The order and the
// rule are elementwise.h's, the CPU codec's.
extern "C" {

// Pass `pass`: the histogram of the candidates' digits added into counts[256] (zeroed by the
// caller), a block's in shared memory first.
__global__ void starling_topk_histogram(const float* x, uint64_t n, int pass, uint32_t prefix,
                                        uint32_t* counts) {
  __shared__ uint32_t local[256];
  for (unsigned t = threadIdx.x; t < 256; t += blockDim.x) local[t] = 0;
  STARLING_SYNCTHREADS();
  for (uint64_t i = globalThread(); i < n; i += threadCount()) {
    const uint32_t key = ew::topkKeyOfBits(bitsOf(x[i]));
    if (ew::topkCandidate(key, pass, prefix)) atomicAddU32(&local[ew::topkDigit(key, pass)], 1);
  }
  STARLING_SYNCTHREADS();
  for (unsigned t = threadIdx.x; t < 256; t += blockDim.x) {
    if (local[t] != 0) atomicAddU32(&counts[t], local[t]);
  }
}

// Block b's run [b chunk, min(n, (b + 1) chunk)): how many keys are above K (greater[b]) and
// equal to it (equal[b]).
__global__ void starling_topk_block_counts(const float* x, uint64_t n, uint64_t chunk,
                                           uint32_t kthKey, uint32_t* greater, uint32_t* equal) {
  __shared__ uint32_t g, e;
  if (threadIdx.x == 0) g = e = 0;
  STARLING_SYNCTHREADS();
  const uint64_t lo = static_cast<uint64_t>(blockIdx.x) * chunk;
  const uint64_t hi = lo + chunk < n ? lo + chunk : n;
  uint32_t mg = 0, me = 0;
  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint32_t key = ew::topkKeyOfBits(bitsOf(x[i]));
    mg += key > kthKey ? 1u : 0u;
    me += key == kthKey ? 1u : 0u;
  }
  if (mg != 0) atomicAddU32(&g, mg);
  if (me != 0) atomicAddU32(&e, me);
  STARLING_SYNCTHREADS();
  if (threadIdx.x == 0) {
    greater[blockIdx.x] = g;
    equal[blockIdx.x] = e;
  }
}

// Block b writes its run's kept elements (elementwise.h: topkKept), in index order, from
// keptBefore[b] on: their indices into `indices` and values into `values`. equalBefore[b] counts
// the elements with key K before the run. A tile of blockDim.x (a multiple of 32, at most 1024)
// elements at a time: each warp ranks its lanes with a ballot, the warps' counts in shared memory
// rank the warps.
__global__ void starling_topk_compact(const float* x, uint64_t n, uint64_t chunk, uint32_t kthKey,
                                      uint64_t equalKept, const uint32_t* equalBefore,
                                      const uint32_t* keptBefore, uint32_t* indices,
                                      float* values) {
  __shared__ uint32_t warpEqual[32], warpKept[32];
  __shared__ uint64_t runEqual, runKept;
  if (threadIdx.x == 0) {
    runEqual = equalBefore[blockIdx.x];
    runKept = keptBefore[blockIdx.x];
  }
  STARLING_SYNCTHREADS();
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const uint32_t below = (1u << lane) - 1u;  // the lanes before this one
  const uint64_t lo = static_cast<uint64_t>(blockIdx.x) * chunk;
  const uint64_t hi = lo + chunk < n ? lo + chunk : n;
  for (uint64_t base = lo; base < hi; base += blockDim.x) {
    const uint64_t i = base + threadIdx.x;
    const bool in = i < hi;
    const float v = in ? x[i] : 0.0f;
    const uint32_t key = ew::topkKeyOfBits(bitsOf(v));
    const bool isEqual = in && key == kthKey;
    const uint32_t equalLanes = ballot(isEqual);
    if (lane == 0) warpEqual[warp] = popcount32(equalLanes);
    STARLING_SYNCTHREADS();
    const uint64_t equal0 = runEqual, kept0 = runKept;
    uint64_t equalRank = equal0 + popcount32(equalLanes & below);
    for (unsigned w = 0; w < warp; ++w) equalRank += warpEqual[w];
    const bool kept = in && ew::topkKept(key, kthKey, equalKept, equalRank);
    const uint32_t keptLanes = ballot(kept);
    if (lane == 0) warpKept[warp] = popcount32(keptLanes);
    STARLING_SYNCTHREADS();
    if (kept) {
      uint64_t at = kept0 + popcount32(keptLanes & below);
      for (unsigned w = 0; w < warp; ++w) at += warpKept[w];
      indices[at] = static_cast<uint32_t>(i);
      values[at] = v;
    }
    if (threadIdx.x == 0) {
      uint64_t e = equal0, k = kept0;
      for (unsigned w = 0; w < warps; ++w) {
        e += warpEqual[w];
        k += warpKept[w];
      }
      runEqual = e;
      runKept = k;
    }
    STARLING_SYNCTHREADS();
  }
}

// out[indices[j]] = values[j] for j < k (a decoded sparse frame; out zeroed by the caller).
__global__ void starling_scatter(const uint32_t* indices, const float* values, uint64_t k,
                                 float* out) {
  for (uint64_t j = globalThread(); j < k; j += threadCount()) out[indices[j]] = values[j];
}

}  // extern "C"
