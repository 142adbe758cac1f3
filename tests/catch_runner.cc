// Catch2's implementation, without a main (CATCH_CONFIG_RUNNER): compiled once for every test
// executable. catch_main.cc holds the main most of them use; tests/cuda/gpu_test.cc has its own
// (it skips without a GPU) and links the same library, whose main it then never pulls in.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.h"

namespace starling::testing {

int runCatch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace starling::testing
