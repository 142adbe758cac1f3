// The main of every test executable but tests/cuda/gpu_test.cc (the implementation is
// catch_runner.cc).
#include "catch_runner.h"

int main(int argc, char** argv) { return starling::testing::runCatch(argc, argv); }
