// Part of cuda/kernels.cu, included at its end (one PTX module): Count-Sketch's kernels, which
// use its helpers (globalThread, atomicAddU32, atomicMaxU32). Not a header of its own.
#pragma once

// ---------------------------------------------------------------------------------------------
// Count-Sketch (docs/cuda.md "Count-Sketch"). The table must be the CPU's to the bit, and the CPU
// adds each cell's terms in index order; so per row, each coordinate's bucket is counted, the
// counts become each bucket's offset (an exclusive scan), the coordinates are placed in their
// bucket's segment (in any order: atomics), and one thread per bucket sorts its segment by index
// and adds its terms in that order. Hashes, medians and the sort are elementwise.h's.
extern "C" {

// counts[h(i)] += 1 for every coordinate i (counts zeroed by the caller).
__global__ void starling_sketch_count(uint64_t n, uint64_t a, uint64_t b, uint64_t cols,
                                      uint32_t* counts) {
  for (uint64_t i = globalThread(); i < n; i += threadCount()) {
    atomicAddU32(&counts[ew::sketchBucket(a, b, cols, i)], 1u);
  }
}

// out[c] = in[0] + ... + in[c - 1] for c = 0..n (n + 1 values): one block, each thread a run.
__global__ void starling_scan_u32(const uint32_t* in, uint32_t* out, uint64_t n) {
  __shared__ uint32_t sums[1024];
  const unsigned t = threadIdx.x, threads = blockDim.x;
  const uint64_t run = (n + threads - 1) / threads;
  const uint64_t lo = t * run < n ? t * run : n;
  const uint64_t hi = lo + run < n ? lo + run : n;
  uint32_t total = 0;
  for (uint64_t c = lo; c < hi; ++c) total += in[c];
  sums[t] = total;
  STARLING_SYNCTHREADS();
  if (t == 0) {
    uint32_t acc = 0;
    for (unsigned u = 0; u < threads; ++u) {
      const uint32_t v = sums[u];
      sums[u] = acc;
      acc += v;
    }
  }
  STARLING_SYNCTHREADS();
  uint32_t acc = sums[t];
  for (uint64_t c = lo; c < hi; ++c) {
    out[c] = acc;
    acc += in[c];
  }
  if (hi == n && lo < hi) out[n] = acc;
  if (n == 0 && t == 0) out[0] = 0;
}

// idx[offsets[h(i)] + (a free place of the segment)] = i (fill zeroed by the caller).
__global__ void starling_sketch_place(uint64_t n, uint64_t a, uint64_t b, uint64_t cols,
                                      const uint32_t* offsets, uint32_t* fill, uint32_t* idx) {
  for (uint64_t i = globalThread(); i < n; i += threadCount()) {
    const uint32_t c = ew::sketchBucket(a, b, cols, i);
    uint32_t at;
#if defined(__NVCC__)
    at = atomicAdd(&fill[c], 1u);
#else
    at = static_cast<uint32_t>(__nvvm_atom_add_gen_i(reinterpret_cast<int*>(&fill[c]), 1));
#endif
    idx[offsets[c] + at] = static_cast<uint32_t>(i);
  }
}

// row[c] = the sum over the bucket's coordinates i, in index order from +0, of s(i) x_i (the
// CPU's row[c] += sign * x[i]); its segment of idx is sorted first.
__global__ void starling_sketch_sum(const float* x, uint64_t a, uint64_t b, uint64_t cols,
                                    const uint32_t* offsets, uint32_t* idx, float* row) {
  for (uint64_t c = globalThread(); c < cols; c += threadCount()) {
    uint32_t* seg = idx + offsets[c];
    const uint64_t len = offsets[c + 1] - offsets[c];
    ew::sortAscending(seg, len);
    float acc = 0.0f;
    for (uint64_t t = 0; t < len; ++t) {
      const uint32_t i = seg[t];
      const float sign = ew::sketchNegative(a, b, i) ? -1.0f : 1.0f;
      acc = acc + sign * x[i];
    }
    row[c] = acc;
  }
}

// y_i = the mean (row by row from +0, times 1/r) or the lower median (elementwise.h's networks,
// rows <= 7) of s_j(i) table[j][h_j(i)]; coef holds each row's four hash coefficients.
__global__ void starling_sketch_estimate(const float* table, const uint64_t* coef, uint32_t rows,
                                         uint64_t cols, uint64_t n, int mean, float* y) {
  const float inv = 1.0f / static_cast<float>(rows);
  for (uint64_t i = globalThread(); i < n; i += threadCount()) {
    float v[7];
    float e = 0.0f;
    for (uint32_t j = 0; j < rows; ++j) {
      const uint64_t* k = coef + 4 * j;
      const float sign = ew::sketchNegative(k[2], k[3], i) ? -1.0f : 1.0f;
      const float est = sign * table[j * cols + ew::sketchBucket(k[0], k[1], cols, i)];
      if (mean != 0) {
        e += est;
      } else {
        v[j] = est;
      }
    }
    y[i] = mean != 0 ? e * inv : ew::sketchMedian(v, rows);
  }
}

// Threshold mode: y_i <- 0 unless |y_i| >= thr (in double, as the CPU compares).
__global__ void starling_sketch_threshold(float* y, uint64_t n, double thr) {
  for (uint64_t i = globalThread(); i < n; i += threadCount()) {
    const float v = y[i];
    const float mag = v < 0.0f ? -v : v;
    if (!(static_cast<double>(mag) >= thr)) y[i] = 0.0f;
  }
}

// One thread: out = (sum x_i y_i, sum y_i y_i) in float64, in index order over the y_i that may
// be nonzero (the sender's least-squares scale, as the CPU sums it): with `sparse` the `count`
// kept indices idx (increasing) and their values y[0..count); else every i < count with y_i != 0.
__global__ void starling_sketch_dot(const float* x, const float* y, const uint32_t* idx,
                                    uint64_t count, int sparse, double* out) {
  if (globalThread() != 0) return;
  double xy = 0, yy = 0;
  for (uint64_t t = 0; t < count; ++t) {
    const uint64_t i = sparse != 0 ? idx[t] : t;
    const double yi = static_cast<double>(y[t]);
    if (sparse == 0 && y[t] == 0.0f) continue;
    const double xi = static_cast<double>(x[i]);
    xy += xi * yi;
    yy += yi * yi;
  }
  out[0] = xy;
  out[1] = yy;
}

// v <- s v, and v <- value.
__global__ void starling_scale_f32(float* v, uint64_t n, float s) {
  for (uint64_t i = globalThread(); i < n; i += threadCount()) v[i] = s * v[i];
}
__global__ void starling_fill_f32(float* v, uint64_t n, float value) {
  for (uint64_t i = globalThread(); i < n; i += threadCount()) v[i] = value;
}

}  // extern "C"
