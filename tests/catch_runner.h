// The test runner that catch_runner.cc compiles once (Catch2's Session is declared only where
// its implementation is compiled): for a test executable with its own main.
#pragma once

namespace starling::testing {

// Catch::Session().run(argc, argv): runs the test cases the command line selects; returns the
// number of failed assertions (at most 255) or a command-line error.
int runCatch(int argc, char** argv);

}  // namespace starling::testing
