// The codec a codec_fuzzer.cc target fuzzes: meson compiles this file once per codec with
// -DSTARLING_FUZZ_CODEC="<name>", so the fuzzer itself is compiled only once.
#ifndef STARLING_FUZZ_CODEC
#error "compile with -DSTARLING_FUZZ_CODEC=\"<codec name>\""
#endif

namespace starling::fuzz {
extern const char kCodecName[];
const char kCodecName[] = STARLING_FUZZ_CODEC;
}  // namespace starling::fuzz
