// Reading an input file the user named (a scenario, a LIBSVM data file) without trusting it.
//
// Only regular files are read: a FIFO, a device (/dev/zero), a socket or a directory is refused
// before any byte is read, because reading one either blocks forever (a FIFO with no writer) or
// never ends (/dev/zero). The file is opened non-blocking, so even the open() of a FIFO returns at
// once, and then checked with fstat() on the open descriptor (no race with a rename between a
// stat() and the open()). At most maxBytes are read: a file larger than that, or one that grows
// past it while being read (a /proc file reports size 0), is refused with the limit in the
// message. Thread-safety: free functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace starling::core {

// The whole of `path`, at most maxBytes. `what` names the file's role in messages ("scenario
// file", "data file"). Errors, each starting with the path:
//   kNotFound         no such file;
//   kInvalidArgument  not a regular file (says which kind it is), or larger than maxBytes (says
//                     the size and the limit);
//   kIoError          anything else open() or read() reports (permissions, EIO, ...).
core::Result<std::string> readRegularFile(const std::string& path, uint64_t maxBytes,
                                          std::string_view what);

// `path` opened for reading (a descriptor the caller closes) when it is a regular file, with the
// same checks and errors as readRegularFile (no size limit: the caller bounds what it reads).
core::Result<int> openRegularFile(const std::string& path, std::string_view what);

// "1 MiB", "200.0 MB"-style sizes for messages: binary units, one decimal above 1 KiB.
std::string formatBytes(double bytes);

// The memory a run may use, which bounds what is read into it (a scenario's estimate, a LIBSVM
// file, a peer log, a checkpoint): kDefaultMemoryLimitGiB, or the value in GiB of the
// environment variable STARLING_MEMORY_LIMIT_GIB on bigger machines.
inline constexpr double kDefaultMemoryLimitGiB = 16.0;
inline constexpr const char* kMemoryLimitEnv = "STARLING_MEMORY_LIMIT_GIB";
// The memory limit in bytes. kInvalidArgument when STARLING_MEMORY_LIMIT_GIB is set but is not
// a number in [0.001, 2^30] (GiB).
core::Result<uint64_t> memoryLimitBytes();

}  // namespace starling::core
