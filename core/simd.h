// STARLING_SIMD_CLONES: a hot loop compiled three times, for x86-64-v4 (AVX-512), v3 (AVX2) and
// the baseline, one of them picked when the library loads (GCC function multiversioning); the
// build stays portable. A loop marked with it may only use exact operations (integer arithmetic,
// comparisons, exact floating-point steps), so that every clone gives the same bits. Defining it
// empty on the command line builds one version for the -march given (how each clone can be tested
// alone). Used by the codecs (compression/codecs/) and the engine's checks (core/within.cc).
#pragma once

#if defined(STARLING_SIMD_CLONES)
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define STARLING_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STARLING_SIMD_CLONES
#endif
