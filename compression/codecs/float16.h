// IEEE binary16 (fp16) and bfloat16 conversions, written with integer operations only so the
// result does not depend on the compiler's _Float16 / __bf16 support or the FPU's rounding mode
// (internal to compression/; the tests use them directly).
//
// To 16 bits: round to nearest, ties to even, straight from the double (a float converts to
// double exactly, so float inputs are rounded once too). Finite values beyond the largest
// finite 16-bit value saturate to it (fp16 ±65504, bf16 ±3.3895314e38) instead of becoming
// infinity; ±infinity stays infinity and NaN becomes a quiet NaN with the same sign. Values
// below half the smallest subnormal become a zero of the same sign.
// From 16 bits: exact (every fp16 and bf16 value is a float).
#pragma once

#include <cstdint>

namespace starling::compression::codecs {

uint16_t halfFromDouble(double v);
double doubleFromHalf(uint16_t h);
uint16_t bf16FromDouble(double v);
double doubleFromBf16(uint16_t h);

}  // namespace starling::compression::codecs
