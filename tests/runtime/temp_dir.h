// A fresh folder under the temporary directory for one test, removed with everything in it when
// the TempDir goes. Shared by the runtime tests (one definition, so that they build as a unity).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace starling::testing {

struct TempDir {
  std::filesystem::path path;
  // /tmp/starling-<name>-XXXXXX, made by mkdtemp (unique across processes and calls).
  explicit TempDir(const std::string& name = "test") {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("starling-" + name + "-XXXXXX")).string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `bytes` into the file `name` of the folder and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

}  // namespace starling::testing
